package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

type row struct {
	Name string `json:"name"`
}

func testIdentity() Identity {
	return Identity{Cluster: "c", Version: "v1", Resource: "rows"}
}

var rows = []row{{"a"}, {"b"}, {"c"}}

// failAfter passes n bytes to w, then fails, as a full disk or an IO error would.
type failAfter struct {
	w writerAt
	n int
}

var errDisk = errors.New("no space left on device")

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		n, _ := f.w.Write(p[:f.n])
		f.n = 0
		return n, errDisk
	}
	f.n -= len(p)
	return f.w.Write(p)
}

func (f *failAfter) WriteAt(p []byte, off int64) (int, error) {
	if len(p) > f.n {
		f.n = 0
		return 0, errDisk
	}
	f.n -= len(p)
	return f.w.WriteAt(p, off)
}

// TestWriteAtomic_aCrashMidWriteLeavesThePreviousSnapshot writes a first
// snapshot, then a second one that fails at every point of its bytes, then one
// whose process "dies" just before the rename (its temporary file left behind,
// as a kill would leave it): the first snapshot stays intact and readable.
func TestWriteAtomic_aCrashMidWriteLeavesThePreviousSnapshot(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rows.snap")
	enc, dec := JSON[row]()
	if err := Write(path, testIdentity(), "1", rows, enc); err != nil {
		t.Fatal(err)
	}
	key, err := readKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := header{id: testIdentity().withType(reflect.TypeFor[row]()), rv: "2", count: uint64(len(rows))}
	body := func(n int) func(*os.File) error {
		return func(f *os.File) error { return writeSnapshot(&failAfter{w: f, n: n}, key, h, rows, enc) }
	}
	mustReadFirst := func(when string) {
		t.Helper()
		rv, got, err := Read(t.Context(), path, testIdentity(), dec)
		if err != nil || rv != "1" || !slices.Equal(got, rows) {
			t.Fatalf("%s: Read = %q, %v, %v; want the first snapshot", when, rv, got, err)
		}
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	for n := range int(info.Size()) { // the second snapshot has the first's size: only the rv differs
		err := writeAtomic(path, body(n), os.Rename)
		if !errors.Is(err, errDisk) {
			t.Fatalf("a write failing after %d bytes returned %v; want the writer's error", n, err)
		}
		mustReadFirst("after a write failing at byte " + strconv.Itoa(n))
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("failed writes left %d entries; want only the snapshot and the key", len(entries))
	}

	killed := errors.New("killed before the rename")
	var leftover string
	err = writeAtomic(path, body(1<<20), func(tmp, _ string) error {
		leftover = tmp
		b, err := os.ReadFile(tmp) // keep what a kill would leave: a complete temporary file
		if err != nil {
			return err
		}
		if err := os.WriteFile(tmp+".kept", b, 0o600); err != nil {
			return err
		}
		return killed
	})
	if !errors.Is(err, killed) {
		t.Fatalf("writeAtomic = %v; want the rename's error", err)
	}
	mustReadFirst("after a crash before the rename")
	if !strings.HasPrefix(filepath.Base(leftover), ".rows.snap.tmp-") || filepath.Dir(leftover) != dir {
		t.Errorf("temporary file %s; want a hidden file beside the snapshot", leftover)
	}
	if _, _, err := Read(t.Context(), leftover+".kept", testIdentity(), dec); err != nil {
		t.Errorf("the temporary file is not a complete snapshot: %v", err)
	}
	if err := Write(path, testIdentity(), "3", rows, enc); err != nil {
		t.Fatalf("a write after a crash: %v", err)
	}
	if rv, _, err := Read(t.Context(), path, testIdentity(), dec); err != nil || rv != "3" {
		t.Fatalf("Read = %q, %v; want 3", rv, err)
	}
}

func reflectTypeRow() reflect.Type { return reflect.TypeFor[row]() }
