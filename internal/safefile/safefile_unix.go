//go:build unix

package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// ErrLink and ErrNotRegular report what OpenRegular refused.
var (
	ErrLink       = errors.New("a symbolic link")
	ErrNotRegular = errors.New("not a regular file")
)

// Owner is the uid that owns the file fi describes, or -1 when fi does not
// say.
func Owner(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// group is the gid of the file fi describes, or -1 when fi does not say.
func group(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Gid)
	}
	return -1
}

// othersMayWrite reports whether a user other than the owner may write
// the file fi describes: anyone (o+w), or its group (g+w) unless that
// group is the current user's private group. Systems that give each user
// a group of their own (Debian, Ubuntu, Fedora: "user private groups")
// set umask 002, so what a user installs (go install into ~/go/bin, pip
// install --user) is group-writable by that group alone.
func othersMayWrite(fi fs.FileInfo) bool {
	perm := fi.Mode().Perm()
	return perm&0o002 != 0 || perm&0o020 != 0 && !privateGroup(group(fi))
}

// privateGroup reports whether gid is the current user's private group:
// the process's own gid, whose group has the user's name.
func privateGroup(gid int) bool {
	return gid >= 0 && gid == os.Getgid() && ownGroup()
}

// ownGroup reports whether the process's gid names a group of the
// current user's name, read once.
var ownGroup = sync.OnceValue(func() bool {
	u, err := user.Current()
	if err != nil {
		return false
	}
	g, err := user.LookupGroupId(strconv.Itoa(os.Getgid()))
	return err == nil && g.Name == u.Username
})

// OpenRegular opens path for reading if it is a regular file: a symbolic
// link is not followed (an error matching ErrLink), a FIFO or a device is
// not waited on, nor read (an error matching ErrNotRegular, naming its
// type). It returns the open file and what it describes; a missing file is
// an error matching fs.ErrNotExist. Errors name the path, never the
// content.
func OpenRegular(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, nil, fmt.Errorf("%s is %w", path, ErrLink)
		}
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is %w (%s)", path, ErrNotRegular, Type(fi.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// Type names the type of a file that is not a regular one.
func Type(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

// Ancestors checks that no folder above the absolute path p lets another
// user rename or replace what is below it: each is the current user's or
// root's, and writable by others (othersMayWrite) only if sticky (as /tmp
// is).
func Ancestors(p string) error {
	uid := os.Getuid()
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		owner, mode := Owner(fi), fi.Mode()
		if (owner != uid && owner != 0) || (othersMayWrite(fi) && mode&fs.ModeSticky == 0) {
			return fmt.Errorf("it is inside %s (owner uid %d, mode %04o), where another user could rename or replace it; "+
				"use a folder under one that only you (or root) can write, such as your home", d, owner, mode.Perm())
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}

// Trusted checks that no other user could have planted or swapped the
// file at p, which is about to be run or obeyed: it (links resolved) is
// the current user's or root's and writable by no other user (othersMayWrite), and
// no folder above it, or above p as given (a link there could be swapped),
// lets another user rename or replace it (Ancestors).
func Trusted(p string) error {
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	if err := Ancestors(abs); err != nil {
		return fmt.Errorf("%s: %w", abs, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	uid := os.Getuid()
	switch owner, perm := Owner(fi), fi.Mode().Perm(); {
	case owner != uid && owner != 0:
		return fmt.Errorf("%s is owned by uid %d, not by you (uid %d) or root: another user could have planted it", real, owner, uid)
	case othersMayWrite(fi):
		return fmt.Errorf("%s is writable by other users (mode %04o, group %d): they could have swapped it (chmod go-w %s)", real, perm, group(fi), real)
	}
	if real != abs {
		if err := Ancestors(real); err != nil {
			return fmt.Errorf("%s: %w", real, err)
		}
	}
	return nil
}
