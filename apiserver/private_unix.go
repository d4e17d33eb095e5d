//go:build unix

package apiserver

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/ctrlkit/ctrlkit/internal/safefile"
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
	switch owner, perm := safefile.Owner(fi), fi.Mode().Perm(); {
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
	if err := safeAncestors(real); err != nil {
		return "", fmt.Errorf("apiserver: data dir %s: %w", real, err)
	}
	return real, nil
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
	if err == nil && (!fi.Mode().IsRegular() || safefile.Owner(fi) != os.Getuid()) {
		err = fmt.Errorf("apiserver: server log %s is not a file of yours (owner uid %d, mode %s); use a fresh data dir",
			path, safefile.Owner(fi), fi.Mode())
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

// trustedSources checks that no other user could have changed the testenv
// sources in src, which are built and then run: src and everything under it
// must be ours (or root's), not writable by group or others, and no link;
// and no folder above src may let another user rename or replace it (a
// sticky folder such as /tmp is fine).
func trustedSources(src string) error {
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		return fmt.Errorf("testenv sources: %w", err)
	}
	if real, err = filepath.Abs(real); err != nil {
		return fmt.Errorf("testenv sources: %w", err)
	}
	if err := safeAncestors(real); err != nil {
		return fmt.Errorf("testenv sources %s: %w", real, err)
	}
	uid := os.Getuid()
	return filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("testenv sources: %w", err)
		}
		fi, err := d.Info()
		if err != nil {
			return fmt.Errorf("testenv sources: %w", err)
		}
		switch owner, mode := safefile.Owner(fi), fi.Mode(); {
		case mode&fs.ModeSymlink != 0:
			return fmt.Errorf("testenv sources: %s is a symbolic link; ctrlkit builds only a plain copy of testenv", p)
		case owner != uid && owner != 0:
			return fmt.Errorf("testenv sources: %s is owned by uid %d, not by you (uid %d) or root: another user could "+
				"have planted code that the build would run; build from a copy of your own", p, owner, uid)
		case mode.Perm()&0o022 != 0:
			return fmt.Errorf("testenv sources: %s is writable by other users (mode %04o): they could plant code that "+
				"the build would run; run \"chmod -R go-w %s\"", p, mode.Perm(), real)
		}
		return nil
	})
}

// privateCacheDir creates dir (0700) if need be and checks that only we can
// put binaries into it: the binaries it holds are run. It must be ours (or
// root's), not writable by others, and not inside a folder where another
// user could replace it.
func privateCacheDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("apiserver: cache dir: %w", err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		return fmt.Errorf("apiserver: cache dir: %w", err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("apiserver: cache dir: %w", err)
	}
	uid := os.Getuid()
	switch owner, perm := safefile.Owner(fi), fi.Mode().Perm(); {
	case owner != uid && owner != 0:
		return fmt.Errorf("apiserver: cache dir %s is owned by uid %d, not by you (uid %d) or root: another user could "+
			"have planted the binaries it holds, which are run; set $%s to a folder of your own", real, owner, uid, EnvCacheDir)
	case perm&0o022 != 0:
		return fmt.Errorf("apiserver: cache dir %s is writable by other users (mode %04o): they could plant the binaries "+
			"it holds, which are run; run \"chmod go-w %s\", or set $%s to a folder of your own", real, perm, real, EnvCacheDir)
	}
	if err := safeAncestors(real); err != nil {
		return fmt.Errorf("apiserver: cache dir %s: %w", real, err)
	}
	return nil
}

// safeAncestors checks that no folder above the absolute path p lets
// another user rename or replace what is below it (safefile.Ancestors).
func safeAncestors(p string) error { return safefile.Ancestors(p) }
