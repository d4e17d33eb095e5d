package snapshot

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// KeyFile is the name of the file, in each snapshot directory, that holds
// the key the directory's snapshots are authenticated with: 32 random bytes,
// mode 0600, made by the first Write into the directory. Removing it makes
// the snapshots there start cold once (no snapshot holds without it); the
// next Write makes a new one.
const KeyFile = "ctrlkit-snapshot.key"

const keyLen = 32

// readKey reads dir's key. It refuses, with an error matching ErrUntrusted,
// a key that is not a regular file of ours of keyLen bytes that only we can
// read. A missing key is an error matching fs.ErrNotExist.
func readKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, KeyFile)
	f, fi, err := openPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	defer f.Close()
	switch {
	case fi.Mode().Perm()&0o077 != 0:
		return nil, untrusted("key %s can be read by other users (mode %04o), who could forge snapshots; remove it "+
			"(the next snapshot makes a new one, the current ones start cold once)", path, fi.Mode().Perm())
	case fi.Size() != keyLen:
		return nil, untrusted("key %s has %d bytes, not %d; remove it (the next snapshot makes a new one, "+
			"the current ones start cold once)", path, fi.Size(), keyLen)
	}
	key := make([]byte, keyLen)
	if _, err := io.ReadFull(f, key); err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	return key, nil
}

// loadOrCreateKey returns dir's key, making one if there is none: it
// writes random bytes to a new temporary file (os.CreateTemp: mode 0600,
// O_EXCL, which never opens a file or a link that was there), syncs it and
// links it to KeyFile, which fails if a key appeared meanwhile (another
// writer's, which it then reads): a reader never sees a key half-written.
func loadOrCreateKey(dir string) ([]byte, error) {
	key, err := readKey(dir)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	key = make([]byte, keyLen)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+KeyFile+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	defer os.Remove(tmp.Name()) // the link, if made, stays
	_, err = tmp.Write(key)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	if err := os.Link(tmp.Name(), filepath.Join(dir, KeyFile)); errors.Is(err, fs.ErrExist) {
		return readKey(dir)
	} else if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return nil, fmt.Errorf("key: sync directory: %w", err)
	}
	return key, nil
}
