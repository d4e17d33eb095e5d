//go:build unix

package snapshot_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/snapshot"
)

// otherUID is the owner given to files and folders "of another user".
const otherUID = 65534 // nobody

// giveAway makes path another user's when the test runs as root (which can
// chown), without following a link; as another user it does nothing, and
// the cases that need it are root's only.
func giveAway(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("giveAway(%s) needs root", path)
	}
	if err := os.Lchown(path, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, path string, mode fs.FileMode) string {
	t.Helper()
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	chmodT(t, path, mode)
	return path
}

func chmodT(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil { // not subject to the umask
		t.Fatal(err)
	}
}

// readWithin reads path as readItems does, failing the test if Read has not
// returned within a minute (a bound, not a synchronisation: Read must never
// wait for a writer). A Read left blocked on a FIFO is released at cleanup.
func readWithin(t *testing.T, path string) (string, []item, error) {
	t.Helper()
	type result struct {
		rv  string
		got []item
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, dec := snapshot.JSON[item]()
		rv, got, err := snapshot.Read(t.Context(), path, testID(), dec)
		done <- result{rv, got, err}
	}()
	select {
	case r := <-done:
		return r.rv, r.got, r.err
	case <-time.After(time.Minute):
		t.Cleanup(func() {
			if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil { // a writer lets a blocked open return
				f.Close()
			}
			<-done
		})
		t.Fatalf("Read(%s) has not returned after a minute", path)
		return "", nil, nil
	}
}

// withSnapshot writes a snapshot of items into dir and returns dir.
func withSnapshot(t *testing.T, dir string) string {
	t.Helper()
	writeItems(t, dir, "42")
	return dir
}

// In a directory of its own, Read reads only a regular file of its user
// that no other user can write, opened without following a link or
// waiting for a writer, beside a key only that user can read: anything
// else is refused unread, and the error never quotes what a link leads to.
func TestRead_refusesAFileAnotherUserCouldHaveMadeUnread(t *testing.T) {
	const secretText = "admin-token-0123456789abcdef"
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte(strings.Repeat(secretText+`,admin,admin,"system:masters"`+"\n", 3)), 0o600); err != nil {
		t.Fatal(err)
	}
	root := os.Geteuid() == 0
	if root {
		giveAway(t, secret)
	}
	key := func(p string) string { return filepath.Join(filepath.Dir(p), snapshot.KeyFile) }
	type fileCase struct {
		name  string
		spoil func(t *testing.T, path string)
		want  string
	}
	cases := []fileCase{
		{"a link to another user's secret file", func(t *testing.T, p string) { replaceWithLink(t, p, secret) },
			"is a symbolic link"},
		{"a link to a snapshot of its own", func(t *testing.T, p string) {
			if err := os.Link(p, p+".real"); err != nil {
				t.Fatal(err)
			}
			replaceWithLink(t, p, p+".real")
		}, "is a symbolic link"},
		{"a FIFO", func(t *testing.T, p string) {
			remove(t, p)
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file (a FIFO)"},
		{"a directory", func(t *testing.T, p string) { remove(t, p); mkdir(t, p, 0o700) }, "not a regular file (a directory)"},
		{"writable by others", func(t *testing.T, p string) { chmodT(t, p, 0o666) }, "is writable by other users (mode 0666)"},
		{"no key", func(t *testing.T, p string) { remove(t, key(p)) }, "no key"},
		{"a key others can read", func(t *testing.T, p string) { chmodT(t, key(p), 0o644) }, "can be read by other users"},
		{"a key that is a link", func(t *testing.T, p string) {
			b, err := os.ReadFile(key(p))
			if err != nil {
				t.Fatal(err)
			}
			elsewhere := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(elsewhere, b, 0o600); err != nil {
				t.Fatal(err)
			}
			replaceWithLink(t, key(p), elsewhere)
		}, "is a symbolic link"},
		{"a key of the wrong size", func(t *testing.T, p string) {
			if err := os.Truncate(key(p), 8); err != nil {
				t.Fatal(err)
			}
		}, "has 8 bytes, not 32"},
	}
	if root {
		cases = append(cases,
			fileCase{"owned by another user", func(t *testing.T, p string) { giveAway(t, p) }, "owned by uid 65534, not by you"},
			fileCase{"a key of another user", func(t *testing.T, p string) { giveAway(t, key(p)) }, "owned by uid 65534, not by you"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path, _ := writeItems(t, t.TempDir(), "42")
			c.spoil(t, path)
			rv, got, err := readWithin(t, path)
			if !errors.Is(err, snapshot.ErrUntrusted) || !strings.Contains(err.Error(), c.want) || rv != "" || got != nil {
				t.Fatalf("Read = %q, %v, %v; want ErrUntrusted saying %q, nothing served", rv, got, err, c.want)
			}
			if strings.Contains(err.Error(), secretText[:5]) {
				t.Errorf("the error quotes the secret file: %v", err)
			}
		})
	}
}

func replaceWithLink(t *testing.T, path, target string) {
	t.Helper()
	remove(t, path)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// formatV1 returns objs at rv as format version 1 stored them: a CRC-32C
// after the header and a bare SHA-256 of the file as its trailer, which
// anyone can compute.
func formatV1(objs []item, rv string) []byte {
	id := testID()
	id.Type = reflect.TypeFor[item]().String()
	id.Fingerprint = snapshot.Fingerprint(reflect.TypeFor[item]())
	var body []byte
	for _, s := range []string{id.Cluster, id.Server, id.Group, id.Version, id.Resource, id.Namespace,
		id.LabelSelector, id.FieldSelector, id.Shards, id.Type, id.Fingerprint, rv} {
		body = append(binary.AppendUvarint(body, uint64(len(s))), s...)
	}
	body = binary.AppendUvarint(body, uint64(len(objs)))
	b := []byte("CKSNAPv\x00\x00\x01")
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	for _, o := range objs {
		j, err := json.Marshal(o)
		if err != nil {
			panic(err)
		}
		b = append(binary.AppendUvarint(b, uint64(len(j))), j...)
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// A snapshot that was not written with the directory's key is refused: one
// in the previous format (no key, a trailer anyone can compute), one
// written into another directory (another key) and copied in, and one whose
// records were changed and its trailer recomputed as a SHA-256.
func TestRead_refusesSnapshotsWrittenWithoutTheKey(t *testing.T) {
	planted := append(slices.Clone(items), item{"ghost", 9})
	for _, c := range []struct {
		name string
		file func(t *testing.T, valid []byte) []byte
		want string
	}{
		{"the previous format, which anyone could write", func(*testing.T, []byte) []byte { return formatV1(planted, "42") },
			"format version 1, written by an older ctrlkit"},
		{"written with another directory's key", func(t *testing.T, _ []byte) []byte {
			_, b := writeItems(t, t.TempDir(), "42")
			return b
		}, "header MAC mismatch"},
		{"records changed and the trailer recomputed as a SHA-256", func(t *testing.T, valid []byte) []byte {
			b := valid[:len(valid)-sha256.Size]
			i := strings.Index(string(b), `"value":2`)
			if i < 0 {
				t.Fatal(`no "value":2 in the snapshot`)
			}
			b = slices.Concat(b[:i], []byte(`"value":7`), b[i+len(`"value":2`):])
			sum := sha256.Sum256(b)
			return append(b, sum[:]...)
		}, "MAC mismatch"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, valid := writeItems(t, t.TempDir(), "42")
			if err := os.WriteFile(path, c.file(t, valid), 0o600); err != nil {
				t.Fatal(err)
			}
			rv, got, err := readItems(t, path)
			if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), c.want) || rv != "" || got != nil {
				t.Fatalf("Read = %q, %v, %v; want ErrCorrupt saying %q, nothing served", rv, got, err, c.want)
			}
		})
	}
}

// A file far larger than its header says, here 2 GiB (sparse), is refused
// from its header alone: nothing of it is read or allocated beyond a few
// buffers, whether it is no snapshot at all or a real snapshot's header
// followed by a record that claims the whole file.
func TestRead_refusesAnOversizedFileWithoutReadingIt(t *testing.T) {
	const size = 2 << 30
	path, _ := writeMany(t) // enough objects for the parallel path, which reads ahead
	valid, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	headerEnd := 8 + 2 + 4 + int(binary.BigEndian.Uint32(valid[10:])) + sha256.Size // the header and its MAC
	for _, c := range []struct {
		name  string
		start []byte
		want  string
	}{
		{"no snapshot", nil, "not a ctrlkit snapshot"},
		{"a snapshot's header, then a record of 2 GiB", binary.AppendUvarint(slices.Clone(valid[:headerEnd]), size-uint64(headerEnd)-64),
			fmt.Sprintf("the file holds %d", size-headerEnd-sha256.Size)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(path, c.start, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, size); err != nil {
				t.Fatal(err)
			}
			_, dec := snapshot.JSON[item]()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			rv, got, err := snapshot.Read(t.Context(), path, testID(), dec)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), c.want) || rv != "" || got != nil {
				t.Fatalf("Read = %q, %d objects, %v; want ErrCorrupt saying %q", rv, len(got), err, c.want)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
				t.Errorf("refusing a %d-byte file allocated %d bytes; want a few buffers", size, alloc)
			}
		})
	}
}

// ReadEach stops when its context ends: before it opens the file, and
// between batches, on the sequential and the parallel path.
func TestReadEach_stopsWhenTheContextEnds(t *testing.T) {
	leakcheck.Check(t)
	path, _ := writeMany(t)
	_, dec := snapshot.JSON[item]()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls := 0
	err := snapshot.ReadEach(ctx, path, testID(), dec, func(string, int) error { calls++; return nil },
		func([]item) error { calls++; return nil })
	if !errors.Is(err, context.Canceled) || calls != 0 {
		t.Fatalf("an ended context: ReadEach = %v after %d calls; want context.Canceled and none", err, calls)
	}
	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprint("GOMAXPROCS=", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			batches := 0
			err := snapshot.ReadEach(ctx, path, testID(), dec, func(string, int) error { return nil },
				func([]item) error { batches++; cancel(); return nil })
			if !errors.Is(err, context.Canceled) || batches != 1 {
				t.Fatalf("cancelled in the first batch: ReadEach = %v after %d batches; want context.Canceled after 1", err, batches)
			}
		})
	}
}

// Writers racing into a new directory make one key between them, mode
// 0600, and every snapshot they write reads back.
func TestWrite_concurrentWritersMakeOneKey(t *testing.T) {
	dir := t.TempDir()
	enc, dec := snapshot.JSON[item]()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			errs[i] = snapshot.Write(filepath.Join(dir, fmt.Sprint(i, ".snap")), testID(), "1", items, enc)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Write %d: %v", i, err)
		}
		if _, got, err := snapshot.Read(t.Context(), filepath.Join(dir, fmt.Sprint(i, ".snap")), testID(), dec); err != nil || !slices.Equal(got, items) {
			t.Fatalf("Read %d = %v, %v", i, got, err)
		}
	}
	fi, err := os.Lstat(filepath.Join(dir, snapshot.KeyFile))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Size() != 32 {
		t.Fatalf("key: %v, %v; want a regular file of 32 bytes, mode 0600", fi, err)
	}
	if names := entries(t, dir); len(names) != len(errs)+1 {
		t.Fatalf("directory holds %v; want the key and %d snapshots", names, len(errs))
	}
}
