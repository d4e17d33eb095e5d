//go:build race || msan || asan

package store

import "github.com/ctrlkit/ctrlkit/object"

// joinedKey never finds a joined key in builds that check unsafe.String's
// allocations (see joinedkey.go): getByName builds the key instead.
func joinedKey(object.ObjectName) (string, bool) { return "", false }
