package snapshot_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/snapshot"
)

type item struct {
	Name  string `json:"name"`
	Value int    `json:"value"`
}

func testID() snapshot.Identity {
	return snapshot.Identity{
		Cluster: "4f6c0a52-kube-system", Server: "https://127.0.0.1:6443",
		Version: "v1", Resource: "configmaps", Namespace: "team-a",
		LabelSelector: "app=web", FieldSelector: "metadata.name!=skip", Shards: "0-7/16",
	}
}

var items = []item{{"a", 1}, {"b", 2}, {"c", 3}}

// writeItems writes items as a JSON snapshot at rv and returns its path and bytes.
func writeItems(t *testing.T, dir, rv string) (string, []byte) {
	t.Helper()
	path := filepath.Join(dir, "items.snap")
	enc, _ := snapshot.JSON[item]()
	if err := snapshot.Write(path, testID(), rv, items, enc); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, b
}

// entries returns the names in dir, sorted.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range des {
		names = append(names, d.Name())
	}
	return names
}

func readItems(t *testing.T, path string) (string, []item, error) {
	t.Helper()
	_, dec := snapshot.JSON[item]()
	return snapshot.Read(t.Context(), path, testID(), dec)
}

func TestWriteRead_roundTrip(t *testing.T) {
	t.Run("JSON", func(t *testing.T) {
		path, _ := writeItems(t, t.TempDir(), "42")
		rv, got, err := readItems(t, path)
		if err != nil || rv != "42" || !slices.Equal(got, items) {
			t.Fatalf("Read = %q, %v, %v; want 42, %v", rv, got, err, items)
		}
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("the snapshot's mode is %v; want 0600: a cache may hold Secrets", info.Mode())
		}
	})
	t.Run("protobuf", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cm.snap")
		cms := []*corev1.ConfigMap{configMap(0), configMap(1)}
		if err := snapshot.Write(path, testID(), "7", cms, marshalConfigMap); err != nil {
			t.Fatal(err)
		}
		rv, got, err := snapshot.Read(t.Context(), path, testID(), unmarshalConfigMap)
		if err != nil || rv != "7" || !equality.Semantic.DeepEqual(got, cms) {
			t.Fatalf("Read = %q, %v, %v; want 7, %v", rv, got, err, cms)
		}
	})
	t.Run("no objects", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "empty.snap")
		enc, dec := snapshot.JSON[item]()
		if err := snapshot.Write(path, testID(), "1", nil, enc); err != nil {
			t.Fatal(err)
		}
		rv, got, err := snapshot.Read(t.Context(), path, testID(), dec)
		if err != nil || rv != "1" || len(got) != 0 {
			t.Fatalf("Read = %q, %v, %v; want 1, no objects", rv, got, err)
		}
	})
	t.Run("a second write replaces the first", func(t *testing.T) {
		dir := t.TempDir()
		writeItems(t, dir, "1")
		path, _ := writeItems(t, dir, "2")
		if rv, _, err := readItems(t, path); err != nil || rv != "2" {
			t.Fatalf("Read = %q, %v; want 2", rv, err)
		}
		if names := entries(t, dir); !slices.Equal(names, []string{snapshot.KeyFile, "items.snap"}) {
			t.Fatalf("directory holds %v, want only the key and the snapshot", names)
		}
	})
}

func TestRead_refusesEveryOtherIdentityNamingTheField(t *testing.T) {
	path, _ := writeItems(t, t.TempDir(), "42")
	_, dec := snapshot.JSON[item]()
	fields := reflect.VisibleFields(reflect.TypeFor[snapshot.Identity]())
	if len(fields) != 11 {
		t.Fatalf("Identity has %d fields; this test knows 11", len(fields))
	}
	for _, f := range fields {
		t.Run(f.Name, func(t *testing.T) {
			want := testID()
			v := reflect.ValueOf(&want).Elem().FieldByIndex(f.Index)
			v.SetString(v.String() + "-other")
			rv, got, err := snapshot.Read(t.Context(), path, want, dec)
			if !errors.Is(err, snapshot.ErrMismatch) || errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("Read = %v; want ErrMismatch", err)
			}
			var me *snapshot.MismatchError
			if !errors.As(err, &me) || me.Field != f.Name || me.Want != v.String() {
				t.Fatalf("Read = %#v; want a MismatchError for %s wanting %q", err, f.Name, v.String())
			}
			if !strings.Contains(err.Error(), f.Name) {
				t.Errorf("error %q does not name %s", err, f.Name)
			}
			if rv != "" || got != nil {
				t.Errorf("a refused snapshot served %q, %v", rv, got)
			}
		})
	}
}

func TestRead_truncatedAtEveryOffsetIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	_, full := writeItems(t, dir, "42")
	path := filepath.Join(dir, "truncated.snap")
	for n := range len(full) {
		if err := os.WriteFile(path, full[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		rv, got, err := readItems(t, path)
		if !errors.Is(err, snapshot.ErrCorrupt) || rv != "" || got != nil {
			t.Fatalf("%d of %d bytes: Read = %q, %v, %v; want ErrCorrupt and nothing served", n, len(full), rv, got, err)
		}
	}
}

func TestRead_aChangedByteAnywhereIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	_, full := writeItems(t, dir, "42")
	path := filepath.Join(dir, "flipped.snap")
	for i := range full {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(full)
			b[i] ^= mask
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			rv, got, err := readItems(t, path)
			if !errors.Is(err, snapshot.ErrCorrupt) || rv != "" || got != nil {
				t.Fatalf("byte %d ^ %#x: Read = %q, %v, %v; want ErrCorrupt and nothing served", i, mask, rv, got, err)
			}
		}
	}
}

func TestRead_refusesWhatIsNotAnIntactSnapshot(t *testing.T) {
	dir := t.TempDir()
	_, full := writeItems(t, dir, "42")
	for _, tc := range []struct {
		name, content, wantMsg string
	}{
		{"trailing bytes", string(full) + "x", "size mismatch"},
		{"another file", strings.Repeat("secret-token-0123 ", 10), "not a ctrlkit snapshot"},
		{"a later format version", string(full[:8]) + "\x00\x03" + string(full[10:]), "unknown format version 3"},
		{"the previous format version", string(full[:8]) + "\x00\x01" + string(full[10:]), "format version 1, written by an older ctrlkit"},
		{"empty", "", "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "bad.snap")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := readItems(t, path)
			if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Read = %v; want ErrCorrupt saying %q", err, tc.wantMsg)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("Read = %v: the error quotes the file", err)
			}
		})
	}
}

func TestRead_anObjectThatDoesNotDecodeIsCorrupt(t *testing.T) {
	path, _ := writeItems(t, t.TempDir(), "42")
	calls := 0
	_, got, err := snapshot.Read(t.Context(), path, testID(), func(b []byte) (item, error) {
		calls++
		if calls == 2 {
			return item{}, errors.New("no such field")
		}
		return item{}, nil
	})
	if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "object 1 of 3: object does not decode: no such field") || got != nil {
		t.Fatalf("Read = %v, %v; want ErrCorrupt naming object 1", got, err)
	}
	if calls != 2 {
		t.Errorf("decode called %d times; want it to stop at the first failure", calls)
	}
}

func TestRead_aMissingFileIsNotFound(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{filepath.Join(dir, "none.snap"), filepath.Join(dir, "no-dir", "none.snap")} {
		_, _, err := readItems(t, path)
		if !errors.Is(err, snapshot.ErrNotFound) || !errors.Is(err, fs.ErrNotExist) || errors.Is(err, snapshot.ErrCorrupt) {
			t.Errorf("Read(%s) = %v; want ErrNotFound", path, err)
		}
	}
}

func TestRead_holdsOneObjectAtATime(t *testing.T) {
	const n, size = 64, 64 << 10 // a 4 MiB file
	path := filepath.Join(t.TempDir(), "big.snap")
	objects := make([][]byte, n)
	for i := range objects {
		objects[i] = bytes.Repeat([]byte{byte(i)}, size)
	}
	identity := func(b []byte) ([]byte, error) { return b, nil }
	if err := snapshot.Write(path, testID(), "1", objects, identity); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, got, err := snapshot.Read(t.Context(), path, testID(), func(b []byte) ([]byte, error) { return []byte{b[0]}, nil })
	runtime.ReadMemStats(&after)
	if err != nil || len(got) != n {
		t.Fatalf("Read = %d objects, %v", len(got), err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("reading a %d-byte file allocated %d bytes; want well under the file's size", n*size, alloc)
	}
}

func TestWrite_aFailedWriteLeavesThePreviousSnapshot(t *testing.T) {
	dir := t.TempDir()
	path, _ := writeItems(t, dir, "1")
	boom := errors.New("boom")
	enc, _ := snapshot.JSON[item]()
	failing := func(it item) ([]byte, error) {
		if it.Name == "c" {
			return nil, boom
		}
		return enc(it)
	}
	err := snapshot.Write(path, testID(), "2", items, failing)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "encode object 2") {
		t.Fatalf("Write = %v; want the encode error naming object 2", err)
	}
	if rv, got, err := readItems(t, path); err != nil || rv != "1" || !slices.Equal(got, items) {
		t.Fatalf("after a failed write Read = %q, %v, %v; want the previous snapshot", rv, got, err)
	}
	if names := entries(t, dir); !slices.Equal(names, []string{snapshot.KeyFile, "items.snap"}) {
		t.Errorf("a failed write left %v in the directory, want only the key and the snapshot", names)
	}
}

func TestWrite_anUnwritableDirectoryIsAClearError(t *testing.T) {
	enc, _ := snapshot.JSON[item]()
	missing := filepath.Join(t.TempDir(), "no-dir", "items.snap")
	if err := snapshot.Write(missing, testID(), "1", items, enc); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Write into a missing directory = %v; want ErrNotExist naming %s", err, missing)
	}
	readOnly := t.TempDir()
	if err := os.Chmod(readOnly, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(readOnly, 0o700) })
	if os.Geteuid() == 0 { // root writes into a 0500 directory; sysfs refuses even root
		readOnly = "/sys"
	}
	path := filepath.Join(readOnly, "items.snap")
	if err := snapshot.Write(path, testID(), "1", items, enc); !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), path) {
		t.Errorf("Write into a read-only directory = %v; want ErrPermission naming %s", err, path)
	}
}

func TestWriteRead_badArguments(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.snap")
	enc, _ := snapshot.JSON[item]()
	noCluster := testID()
	noCluster.Cluster = ""
	for _, tc := range []struct {
		name, want string
		err        error
	}{
		{"empty resource version", "empty resource version", snapshot.Write(path, testID(), "", items, enc)},
		{"no cluster", "identity has no Cluster", snapshot.Write(path, noCluster, "1", items, enc)},
		{"nil encode", "nil encode", snapshot.Write[item](path, testID(), "1", items, nil)},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: Write = %v; want an error saying %q", tc.name, tc.err, tc.want)
		}
	}
	if _, _, err := snapshot.Read[item](t.Context(), path, testID(), nil); err == nil || !strings.Contains(err.Error(), "nil decode") {
		t.Errorf("Read with a nil decode = %v", err)
	}
}

// configMap builds a realistic ConfigMap of about 1 KB.
func configMap(i int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("web-config-%06d", i), Namespace: fmt.Sprintf("team-%02d", i%50),
			UID:             types.UID(fmt.Sprintf("8c6f1f2e-6b1a-4a5e-9d7c-%012d", i)),
			ResourceVersion: fmt.Sprint(1000000 + i), Generation: 1,
			CreationTimestamp: metav1.Unix(1_700_000_000+int64(i), 0).Rfc3339Copy(),
			Labels:            map[string]string{"app.kubernetes.io/name": "web", "app.kubernetes.io/part-of": "shop", "tier": "frontend"},
			Annotations:       map[string]string{"config.example.com/checksum": fmt.Sprintf("sha256:%064x", i)},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
				Time: ptrTime(metav1.Unix(1_700_000_000+int64(i), 0).Rfc3339Copy()), FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{".":{},"f:app.properties":{},"f:log.level":{}}}`)},
			}},
		},
		Data: map[string]string{
			"app.properties": strings.Repeat(fmt.Sprintf("key%d=value for entry %d\n", i%7, i), 12),
			"log.level":      "info",
		},
	}
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }

func marshalConfigMap(c *corev1.ConfigMap) ([]byte, error) { return c.Marshal() }

func unmarshalConfigMap(b []byte) (*corev1.ConfigMap, error) {
	c := new(corev1.ConfigMap)
	return c, c.Unmarshal(b)
}

// writeMany writes a snapshot of 5000 items at resource version 7.
func writeMany(t *testing.T) (string, []item) {
	t.Helper()
	many := make([]item, 5000)
	for i := range many {
		many[i] = item{Name: fmt.Sprintf("item-%05d", i), Value: i}
	}
	path := filepath.Join(t.TempDir(), "many.snap")
	enc, _ := snapshot.JSON[item]()
	if err := snapshot.Write(path, testID(), "7", many, enc); err != nil {
		t.Fatal(err)
	}
	return path, many
}

// A large snapshot is decoded on several goroutines: the objects come back
// in order, and a damaged or undecodable object is still refused.
func TestRead_largeSnapshotsDecodeInParallelInOrder(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Fatalf("GOMAXPROCS is %d: this test needs two to take the parallel path", runtime.GOMAXPROCS(0))
	}
	path, many := writeMany(t)
	_, dec := snapshot.JSON[item]()
	rv, got, err := snapshot.Read(t.Context(), path, testID(), dec)
	if err != nil || rv != "7" || !slices.Equal(got, many) {
		t.Fatalf("Read = %q, %d objects (equal: %t), %v", rv, len(got), slices.Equal(got, many), err)
	}

	refuse := func(n int) func([]byte) (item, error) {
		return func(b []byte) (item, error) {
			it, err := dec(b)
			if err == nil && it.Value == n {
				err = errors.New("refused")
			}
			return it, err
		}
	}
	_, _, err = snapshot.Read(t.Context(), path, testID(), refuse(3333))
	if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "object 3333 of 5000") {
		t.Fatalf("an undecodable object in the middle: %v, want ErrCorrupt naming object 3333", err)
	}

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x20
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := snapshot.Read(t.Context(), path, testID(), dec); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("a flipped byte in the middle: %v, want ErrCorrupt", err)
	}
}

// Objects decode while the checksum (the MAC) is computed, but nothing
// reaches begin or each before it holds: damaged bytes that a decoder chokes
// on (here it panics) end the read as a bad MAC, with nothing handed over; on an
// intact file such a panic is an object that does not decode.
func TestReadEach_decodesBesideTheChecksumAndHandsOverNothingItRefuses(t *testing.T) {
	leakcheck.Check(t)
	if runtime.GOMAXPROCS(0) < 2 {
		t.Fatalf("GOMAXPROCS is %d: this test needs two to take the parallel path", runtime.GOMAXPROCS(0))
	}
	path, _ := writeMany(t)
	_, dec := snapshot.JSON[item]()
	panicky := func(b []byte) (item, error) {
		it, err := dec(b)
		if err != nil || it.Value == 4000 {
			panic(fmt.Sprintf("cannot decode %q", b))
		}
		return it, nil
	}
	calls := 0
	count := func(string, int) error { calls++; return nil }
	each := func([]item) error { calls++; return nil }
	err := snapshot.ReadEach(t.Context(), path, testID(), panicky, count, each)
	if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "object 4000 of 5000") || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("a decode panicking on object 4000 of an intact file: %v; want ErrCorrupt naming it", err)
	}

	intact, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(intact, []byte(`"value":10}`)) // an early record: decoded before the MAC is known
	if at < 0 {
		t.Fatal("no record with value 10")
	}
	for _, damage := range []struct {
		name string
		at   int
		to   byte
	}{
		{"bytes that still decode (\"Xalue\": an unknown field)", at + 1, 'X'},
		{"bytes the decoder panics on (1X: not JSON)", at + len(`"value":1`), 'X'},
	} {
		b := bytes.Clone(intact)
		b[damage.at] = damage.to
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		calls = 0
		err = snapshot.ReadEach(t.Context(), path, testID(), panicky, count, each)
		if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "MAC mismatch") || calls != 0 {
			t.Fatalf("%s: ReadEach = %v after %d calls of begin and each; want a MAC mismatch and none", damage.name, err, calls)
		}
	}
}

// ReadEach hands the objects over in batches, in order, after begin; a
// refused object ends it after the batches before it, an error from each
// stops it at once, and a panic in each leaves no goroutine behind.
func TestReadEach_handsOverBatchesInOrderAndStopsOnErrors(t *testing.T) {
	leakcheck.Check(t)
	path, many := writeMany(t)
	_, dec := snapshot.JSON[item]()
	for _, procs := range []int{1, 2} { // the sequential and the parallel path
		t.Run(fmt.Sprint("GOMAXPROCS=", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			var got []item
			var rv string
			count, batches := -1, 0
			err := snapshot.ReadEach(t.Context(), path, testID(), dec, func(v string, n int) error {
				if got != nil {
					t.Error("begin called after a batch")
				}
				rv, count = v, n
				return nil
			}, func(b []item) error {
				batches++
				got = append(got, b...)
				return nil
			})
			if err != nil || rv != "7" || count != len(many) || !slices.Equal(got, many) || batches < 2 {
				t.Fatalf("ReadEach = %v: rv %q, count %d, %d objects in %d batches (equal: %t)", err, rv, count, len(got), batches, slices.Equal(got, many))
			}

			got = got[:0]
			refuse := func(b []byte) (item, error) {
				it, err := dec(b)
				if err == nil && it.Value == 3333 {
					err = errors.New("refused")
				}
				return it, err
			}
			err = snapshot.ReadEach(t.Context(), path, testID(), refuse, func(string, int) error { return nil },
				func(b []item) error { got = append(got, b...); return nil })
			if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "object 3333 of 5000") || !slices.Equal(got, many[:len(got)]) || len(got) > 3333 {
				t.Fatalf("an undecodable object: %v after %d objects; want ErrCorrupt naming object 3333, after a prefix of at most 3333", err, len(got))
			}

			boom := errors.New("boom")
			calls := 0
			err = snapshot.ReadEach(t.Context(), path, testID(), dec, func(string, int) error { return nil },
				func([]item) error { calls++; return boom })
			if !errors.Is(err, boom) || calls != 1 {
				t.Fatalf("each failing: ReadEach = %v after %d calls; want boom after 1", err, calls)
			}
			if err := snapshot.ReadEach(t.Context(), path, testID(), dec, func(string, int) error { return boom },
				func([]item) error { t.Error("each called after begin failed"); return nil }); !errors.Is(err, boom) {
				t.Fatalf("begin failing: ReadEach = %v; want boom", err)
			}

			func() {
				defer func() {
					if recover() == nil {
						t.Error("a panic in each was not passed on")
					}
				}()
				_ = snapshot.ReadEach(t.Context(), path, testID(), dec, func(string, int) error { return nil },
					func([]item) error { panic("each") })
			}()
		})
	}
	var calls int
	err := snapshot.ReadEach(t.Context(), filepath.Join(t.TempDir(), "none.snap"), testID(), dec,
		func(string, int) error { calls++; return nil }, func([]item) error { calls++; return nil })
	if !errors.Is(err, snapshot.ErrNotFound) || calls != 0 {
		t.Fatalf("no file: ReadEach = %v with %d calls; want ErrNotFound and none", err, calls)
	}
}
