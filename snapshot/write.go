package snapshot

import (
	"bufio"
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
// The directory must exist and be this user's alone: give Write a path in
// the directory PrepareDir returns (otherwise the error matches
// ErrUntrusted). The snapshot is
// authenticated with the directory's key (KeyFile), which the first Write
// into the directory makes, so that Read refuses a file written without
// it. The file is readable by its owner only (mode 0600): a cache may hold
// Secrets. Write blocks on file IO; it does not modify objects. A failure
// of encode is returned, wrapped, naming the object's index.
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
	if filepath.Base(path) == KeyFile {
		return fmt.Errorf("snapshot: write %s: the name of the directory's key", path)
	}
	dir := filepath.Dir(path)
	if err := checkDir(dir); err != nil {
		return fmt.Errorf("snapshot: write %s: %w", path, err)
	}
	key, err := loadOrCreateKey(dir)
	if err != nil {
		return fmt.Errorf("snapshot: write %s: %w", path, err)
	}
	h := header{id: id, rv: resourceVersion, count: uint64(len(objects))}
	return writeAtomic(path, func(f *os.File) error {
		return writeSnapshot(f, key, h, objects, encode)
	}, os.Rename)
}

// writerAt is a file being written: the header goes in last, at its start.
type writerAt interface {
	io.Writer
	io.WriterAt
}

// writeSnapshot writes the whole format to w, authenticated with key: room
// for the header and its MAC, the records, the trailer, then the header
// (which holds the records' size) and its MAC in their room.
func writeSnapshot[T any](w writerAt, key []byte, h header, objects []T, encode func(T) ([]byte, error)) error {
	h.size = 0
	bw := bufio.NewWriterSize(w, 256<<10)
	if _, err := bw.Write(make([]byte, len(encodeHeader(h))+macLen)); err != nil {
		return err
	}
	sum := newRecordsMAC(key)
	var lenBuf [binary.MaxVarintLen64]byte
	for i, obj := range objects {
		b, err := encode(obj)
		if err != nil {
			return fmt.Errorf("snapshot: encode object %d: %w", i, err)
		}
		for _, p := range [][]byte{lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(b)))], b} {
			if _, err := bw.Write(p); err != nil {
				return err
			}
			sum.Write(p)
			h.size += uint64(len(p))
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	hb := encodeHeader(h)
	hm := headerMAC(key, hb)
	sum.Write(hm)
	if _, err := w.Write(sum.Sum(nil)); err != nil {
		return err
	}
	_, err := w.WriteAt(append(hb, hm...), 0)
	return err
}

// writeAtomic writes a file at path with body, through a temporary file in
// the same directory and rename (os.Rename; tests pass one that fails, as a
// crash before the rename would).
func writeAtomic(path string, body func(*os.File) error, rename func(oldpath, newpath string) error) error {
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
