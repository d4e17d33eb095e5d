//go:build unix

package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ctrlkit/ctrlkit/internal/safefile"
)

// A snapshot is served as the cache, so nobody but this process's user may
// be able to put one in its place (see PrepareDir for the whole rule and
// why the folders above the directory are not checked). The directory is
// ours and writable by no one else, or, when the one configured is shared,
// a private folder of ours inside it; files in it are opened without
// following a link and without blocking, and read only if they are regular
// files of ours; the key is readable by us alone.

// privateDir is PrepareDir's choice for dir, which exists.
func privateDir(dir string) (string, error) {
	fi, err := statDir(dir)
	if err != nil {
		return "", err
	}
	if fi.Mode().Perm()&0o022 == 0 {
		if err := private(dir, fi); err != nil {
			return "", err
		}
		return dir, nil
	}
	uid := os.Geteuid()
	sub := filepath.Join(dir, fmt.Sprintf("ctrlkit-%d", uid))
	err = os.Mkdir(sub, 0o700) // never through a link: an existing one is EEXIST
	switch {
	case errors.Is(err, fs.ErrPermission):
		return "", untrusted("directory %s is writable by other users (mode %04o), so the snapshots go into a private folder "+
			"in it, %s, but you (uid %d) cannot create it there; use a directory only you can write", dir, fi.Mode().Perm(), sub, uid)
	case err != nil && !errors.Is(err, fs.ErrExist):
		return "", err
	}
	sfi, err := os.Lstat(sub)
	if err != nil {
		return "", err
	}
	switch owner, mode := safefile.Owner(sfi), sfi.Mode(); {
	case mode&fs.ModeSymlink != 0:
		return "", untrusted("folder %s, where the snapshots go since %s is writable by other users, is a symbolic link, which "+
			"another user could have made to lead them elsewhere; remove it (a private folder is made in its place at the next "+
			"start), or use a directory only you can write", sub, dir)
	case !mode.IsDir():
		return "", untrusted("folder %s, where the snapshots go since %s is writable by other users, is not a directory (%s); "+
			"remove it (a private folder is made in its place at the next start), or use a directory only you can write",
			sub, dir, safefile.Type(mode))
	case owner != uid:
		return "", untrusted("folder %s, where the snapshots go since %s is writable by other users, is owned by uid %d, not by "+
			"you (uid %d): another user made it first and could have planted snapshots in it; remove it (a private folder is "+
			"made in its place at the next start), or use a directory only you can write", sub, dir, owner, uid)
	case mode.Perm()&0o022 != 0:
		return "", untrusted("folder %s, where the snapshots go since %s is writable by other users, is writable by other "+
			"users too (mode %04o); remove it (a private folder is made in its place at the next start), or run \"chmod 700 %s\"",
			sub, dir, mode.Perm(), sub)
	}
	return sub, nil
}

// checkDir checks that dir is a directory of ours that no other user can
// write (case 1 of PrepareDir). A missing dir is an error matching
// fs.ErrNotExist; one that is not safe matches ErrUntrusted.
func checkDir(dir string) error {
	fi, err := statDir(dir)
	if err != nil {
		return err
	}
	return private(dir, fi)
}

// statDir returns what dir is: a directory, reached through dir if it is a
// symbolic link that no other user could have made (one in a folder that
// no other user can write).
func statDir(dir string) (fs.FileInfo, error) {
	dir = filepath.Clean(dir)
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		in := filepath.Dir(dir)
		pfi, err := os.Stat(in)
		if err != nil {
			return nil, err
		}
		if pfi.Mode().Perm()&0o022 != 0 {
			return nil, untrusted("directory %s is a symbolic link in %s, which other users can write (mode %04o): one of "+
				"them could have made it to lead the snapshots elsewhere; use the directory it leads to, or a real one",
				dir, in, pfi.Mode().Perm())
		}
		if fi, err = os.Stat(dir); err != nil {
			return nil, err
		}
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	return fi, nil
}

// private checks that the directory dir, described by fi, is ours and
// that no other user can write it.
func private(dir string, fi fs.FileInfo) error {
	uid := os.Geteuid()
	switch owner, perm := safefile.Owner(fi), fi.Mode().Perm(); {
	case owner != uid:
		return untrusted("directory %s is owned by uid %d, not by you (uid %d): another user could have planted "+
			"its snapshots or key; use a fresh directory (one that does not exist yet, or that you created)", dir, owner, uid)
	case perm&0o022 != 0:
		return untrusted("directory %s is writable by other users (mode %04o): they could plant or swap its "+
			"snapshots or key; run \"chmod 700 %s\", or keep the snapshots in the private folder that PrepareDir "+
			"makes in it", dir, perm, dir)
	}
	return nil
}

// openPrivate opens path for reading if it is a regular file of ours that
// no other user can write: it does not follow a symbolic link, and does not
// wait for a writer (a FIFO) or a device. A missing file is an error
// matching fs.ErrNotExist; any other refusal matches ErrUntrusted. The
// errors name the file, never its content.
func openPrivate(path string) (*os.File, fs.FileInfo, error) {
	f, fi, err := safefile.OpenRegular(path)
	switch {
	case errors.Is(err, safefile.ErrLink):
		return nil, nil, untrusted("%s is a symbolic link: only a regular file of yours is read; remove the link", path)
	case errors.Is(err, safefile.ErrNotRegular):
		return nil, nil, untrusted("%v: only a regular file of yours is read; remove it", err)
	case err != nil:
		return nil, nil, err
	}
	uid := os.Geteuid()
	switch owner, mode := safefile.Owner(fi), fi.Mode(); {
	case owner != uid:
		err = untrusted("%s is owned by uid %d, not by you (uid %d); remove it", path, owner, uid)
	case mode.Perm()&0o022 != 0:
		err = untrusted("%s is writable by other users (mode %04o); remove it", path, mode.Perm())
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}
