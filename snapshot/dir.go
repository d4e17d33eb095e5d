package snapshot

import (
	"errors"
	"fmt"
	"os"
)

// PrepareDir returns the directory to keep snapshots in, given dir, the one
// configured, which it creates (mode 0700, with any missing parent) if it
// does not exist. The rule:
//
//  1. dir itself, when it is a directory of this process's user that no
//     other user can write (mode without group or other write);
//  2. else, when other users can write dir (an emptyDir volume's mount
//     point, root's and mode 0777; /tmp), the folder "ctrlkit-<uid>" in it
//     (uid: this process's effective user ID), made with os.Mkdir, mode
//     0700, if it is missing. It must be a real directory, never a
//     symbolic link (which could lead to another private directory of this
//     user's), of this user and writable by no one else: one that another
//     user made first is refused;
//  3. else (another user's directory that others cannot write) nothing.
//
// A refusal matches ErrUntrusted and names the folder and the fix; the
// caller then reads and writes nothing there (an informer starts cold).
// dir may be a symbolic link only in a folder that no other user can write.
// Read and Write check the directory of the path they are given as in case
// 1, each time, and neither create nor choose a folder: give them paths in
// the directory PrepareDir returns. PrepareDir does not create the key. It
// blocks on file IO.
//
// The folders above the directory are not checked: they may be another
// user's or writable by others, sticky or not (an emptyDir's mount point
// is not sticky). Such a user can rename entries there, so it can move or
// delete the directory, or put a folder or a link of its own in its place
// at any time, also between a check and a read. That makes the caches
// start cold, or at worst leads a read to another directory of this user's
// that passes the checks; but a file is read only if it opens without
// following a link, is a regular file of this user that no other user can
// write, and its MACs hold under the key beside it, itself a regular file
// of this user that no one else can read (KeyFile). No other user can
// write such a file, nor reach one inside this user's private folders to
// link it, nor make a MAC without the key: the only snapshots that can be
// served are ones this user wrote, of exactly the identity wanted, which
// an informer brings up to date by watching from their resource version as
// after any restart. What Write writes where such a swap leads is a file
// of mode 0600, made with O_EXCL: no other user can read it.
func PrepareDir(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("snapshot: directory: %w", err)
	}
	use, err := privateDir(dir)
	if err != nil && !errors.Is(err, ErrUntrusted) {
		err = fmt.Errorf("snapshot: directory: %w", err)
	}
	return use, err
}
