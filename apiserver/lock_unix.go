//go:build unix

package apiserver

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on path, blocking until it is
// free. The lock also ends when the process dies, so a killed build never
// leaves a stale lock behind.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
