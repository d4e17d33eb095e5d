package snapshot

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
)

// Write writes a snapshot of objects, current at resourceVersion, to path,
// atomically: the file at path is either the previous one or the complete
// new one, even if the process dies or the machine loses power mid-write.
// It writes a temporary file in path's directory, syncs it, renames it to
// path and syncs the directory; on any failure it removes the temporary
// file and leaves path as it was.
//
// encode turns one object into bytes (JSON[T] for any type, or a protobuf
// Marshal for built-in types); Read must be given the matching decode. An
// empty id.Type or id.Fingerprint is filled in from T. id needs Cluster,
// Version and Resource, and resourceVersion must not be empty: a snapshot
// is only useful to watch from.
//
// The file is readable by its owner only (mode 0600): a cache may hold
// Secrets. Write blocks on file IO; it does not modify objects. A failure of encode
// is returned, wrapped, naming the object's index.
func Write[T any](path string, id Identity, resourceVersion string, objects []T, encode func(T) ([]byte, error)) error {
	id = id.withType(reflect.TypeFor[T]())
	if err := id.validate(); err != nil {
		return err
	}
	if resourceVersion == "" {
		return errors.New("snapshot: empty resource version")
	}
	if encode == nil {
		return errors.New("snapshot: nil encode function")
	}
	h := header{id: id, rv: resourceVersion, count: uint64(len(objects))}
	return writeAtomic(path, func(w io.Writer) error {
		return writeSnapshot(w, h, objects, encode)
	}, os.Rename)
}

// writeSnapshot writes the whole format to w.
func writeSnapshot[T any](w io.Writer, h header, objects []T, encode func(T) ([]byte, error)) error {
	sum := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, sum), 256<<10)
	if _, err := bw.Write(encodeHeader(h)); err != nil {
		return err
	}
	var lenBuf [binary.MaxVarintLen64]byte
	for i, obj := range objects {
		b, err := encode(obj)
		if err != nil {
			return fmt.Errorf("snapshot: encode object %d: %w", i, err)
		}
		if _, err := bw.Write(lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(b)))]); err != nil {
			return err
		}
		if _, err := bw.Write(b); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(sum.Sum(nil)) // not through bw: the sum covers what precedes it
	return err
}

// writeAtomic writes a file at path with body, through a temporary file in
// the same directory and rename (os.Rename; tests pass one that fails, as a
// crash before the rename would).
func writeAtomic(path string, body func(io.Writer) error, rename func(oldpath, newpath string) error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("snapshot: write %s: create a temporary file: %w", path, err)
	}
	tmp := f.Name()
	committed := false
	defer func() {
		if !committed {
			f.Close()      // may already be closed; the error is irrelevant then
			os.Remove(tmp) // best effort: the write has already failed
		}
	}()
	if err := body(f); err != nil {
		return fmt.Errorf("snapshot: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("snapshot: write %s: sync: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("snapshot: write %s: close: %w", path, err)
	}
	if err := rename(tmp, path); err != nil {
		return fmt.Errorf("snapshot: write %s: rename: %w", path, err)
	}
	committed = true
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("snapshot: write %s: sync directory: %w", path, err)
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
