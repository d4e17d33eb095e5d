//go:build !unix

package snapshot

import (
	"io/fs"
	"os"
)

// Without Unix owners and modes, nothing tells a directory or a file that
// only this process's user can change from one that another user could
// have planted: snapshots are refused (a cold start) rather than trusted.

func privateDir(string) (string, error) {
	return "", checkDir("")
}

func checkDir(string) error {
	return untrusted("snapshots need a Unix system, where the owner of a directory can be checked")
}

func openPrivate(string) (*os.File, fs.FileInfo, error) {
	return nil, nil, untrusted("snapshots need a Unix system, where the owner of a file can be checked")
}
