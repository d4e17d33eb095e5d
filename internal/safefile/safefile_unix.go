//go:build unix

package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
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
