//go:build unix

package apiserver

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// The data directory holds the admin token (system:masters) and private
// keys, so only the current user may be able to change it. ctrlkit-apiserver
// enforces the same rules itself (testenv's internal/datadir, which has the
// full reasoning); Start checks them first because it writes apiserver.log
// into the folder before the binary runs, and so that the error comes before
// any build or start.

// prepareDataDir creates dir (mode 0700) if it does not exist and checks that
// it is ours and not writable by others, nor inside a folder where another
// user could rename it. It returns the absolute path with links resolved.
func prepareDataDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("apiserver: data dir: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("apiserver: data dir: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("apiserver: data dir: %w", err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("apiserver: data dir: %w", err)
	}
	uid := os.Getuid()
	switch owner, perm := ownerOf(fi), fi.Mode().Perm(); {
	case !fi.IsDir():
		return "", fmt.Errorf("apiserver: data dir %s is not a directory", real)
	case owner != uid:
		return "", fmt.Errorf("apiserver: data dir %s is owned by uid %d, not by you (uid %d): another user could "+
			"have planted its token, keys or kubeconfig; use a fresh directory (one that does not exist yet, or that you created)",
			real, owner, uid)
	case perm&0o022 != 0:
		return "", fmt.Errorf("apiserver: data dir %s is writable by other users (mode %04o): they could plant or "+
			"swap its files; run \"chmod 700 %s\", or use a fresh directory", real, perm, real)
	}
	for p := filepath.Dir(real); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("apiserver: data dir: %w", err)
		}
		owner, mode := ownerOf(fi), fi.Mode()
		if (owner != uid && owner != 0) || (mode.Perm()&0o022 != 0 && mode&fs.ModeSticky == 0) {
			return "", fmt.Errorf("apiserver: data dir %s is inside %s (owner uid %d, mode %04o), where another user "+
				"could rename or replace it; use a directory under one that only you (or root) can write, such as your home",
				real, p, owner, mode.Perm())
		}
		if filepath.Dir(p) == p {
			return real, nil
		}
	}
}

// openLog opens (or creates, mode 0600) the server log for appending. It
// refuses a symbolic link or a file of another user, and takes group and
// other permissions off a log of ours that an older ctrlkit made 0644.
func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("apiserver: server log (a symbolic link is refused; use a fresh data dir): %w", err)
	}
	fi, err := f.Stat()
	if err == nil && (!fi.Mode().IsRegular() || ownerOf(fi) != os.Getuid()) {
		err = fmt.Errorf("apiserver: server log %s is not a file of yours (owner uid %d, mode %s); use a fresh data dir",
			path, ownerOf(fi), fi.Mode())
	}
	if err == nil && fi.Mode().Perm()&0o077 != 0 {
		err = f.Chmod(0o600)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func ownerOf(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
