package datadir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// The data directory holds the admin token and private keys, so it must be
// ours alone: another local user who could write into it (or swap it for a
// folder of their own) could plant a token or read the one we make. The rules:
//
//   - the directory is owned by us and not writable by group or others; we
//     create it 0700 when it does not exist;
//   - every folder above it is owned by us or root, and writable by others only
//     with the sticky bit (as /tmp is), so nobody else can rename it away;
//   - every file we read back is a regular file owned by us, with no group or
//     other permission bits;
//   - every file we write is first created under a fresh random name with
//     O_EXCL and mode 0600, then renamed into place, so a file planted under the
//     final or a temporary name is replaced, never written through.
//
// The apiserver package of ctrlkit's root module repeats the directory rules
// (it writes apiserver.log into the folder before this binary runs); the two
// must agree.

// Prepare makes dir ready for use: it creates it (mode 0700) if it does not
// exist, resolves symbolic links, and checks that only the current user can
// change it. It returns the absolute, resolved path, which callers use from
// then on. The error names the folder and how to fix it.
func Prepare(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	if err := checkDir(real); err != nil {
		return "", err
	}
	return real, checkParents(real)
}

// checkDir accepts a directory owned by us and not writable by group or others.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data dir %s is not a directory", dir)
	}
	uid := os.Getuid()
	if owner := ownerOf(fi); owner != uid {
		return fmt.Errorf("data dir %s is owned by uid %d, not by you (uid %d): another user could have planted "+
			"its token, keys or kubeconfig; use a fresh directory (one that does not exist yet, or that you created)",
			dir, owner, uid)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("data dir %s is writable by other users (mode %04o): they could plant or swap its files; "+
			"run \"chmod 700 %s\", or use a fresh directory", dir, perm, dir)
	}
	return nil
}

// checkParents accepts folders above dir that no other user can rename dir
// out of: owned by us or root, and writable by others only with the sticky bit.
func checkParents(dir string) error {
	uid := os.Getuid()
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		owner, mode := ownerOf(fi), fi.Mode()
		if (owner != uid && owner != 0) || (mode.Perm()&0o022 != 0 && mode&fs.ModeSticky == 0) {
			return fmt.Errorf("data dir %s is inside %s (owner uid %d, mode %04o), where another user could rename "+
				"or replace it; use a directory under one that only you (or root) can write, such as your home",
				dir, p, owner, mode.Perm())
		}
		if filepath.Dir(p) == p {
			return nil
		}
	}
}

func ownerOf(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// readPrivate reads a file of the data directory, refusing one that is not a
// regular file owned by us with no group or other permissions: its contents
// (a token, a key, the state) could come from, or be known to, another user.
func readPrivate(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symbolic link; ctrlkit-apiserver reads only files of its own: use a fresh data directory", path)
		}
		return nil, err
	}
	defer f.Close()
	if err := checkPrivateFile(f); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// checkPrivate applies readPrivate's rule to a file without reading it.
func checkPrivate(path string) error {
	_, err := readPrivate(path)
	return err
}

func checkPrivateFile(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	uid := os.Getuid()
	if owner, perm := ownerOf(fi), fi.Mode().Perm(); !fi.Mode().IsRegular() || owner != uid || perm&0o077 != 0 {
		return fmt.Errorf("%s is not private to you (owner uid %d, mode %s; want uid %d, -rw-------): "+
			"ctrlkit-apiserver never reuses a token, key or state that another user could have written or read; "+
			"use a fresh data directory", f.Name(), owner, fi.Mode(), uid)
	}
	return nil
}

// WritePrivate writes data to path with mode 0600: into a new file with a
// random name (O_EXCL) in the same folder, then renamed over path. Nothing
// already at path or at any temporary name is opened, so a planted file
// keeps none of what is written and passes on neither its owner nor its mode.
func WritePrivate(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
