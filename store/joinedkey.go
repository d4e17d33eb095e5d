//go:build !race && !msan && !asan

package store

import (
	"unsafe"

	"github.com/ctrlkit/ctrlkit/object"
)

// joinedKey returns name's key ("namespace/name") without building it,
// when name's parts lie side by side in memory around a '/': when they
// were cut from one key string (handler.Names cuts them from an
// informer's event key, the very string the store keeps as its map key).
// The returned string is then that key, so a map lookup compares it by
// pointer instead of reading the stored key's bytes, which are rarely in
// the processor's cache by the time a reconcile reads. Its bytes are
// exactly Namespace + "/" + Name in any case: the only bytes it adds are
// the one '/' checked between the parts. It is used only as a lookup key
// and never kept.
//
// Builds with -race, -msan or -asan check that a string made with
// unsafe.String lies in one allocation; two parts allocated apart that
// happen to sit a '/' apart would fail that check though the key read is
// right, so those builds leave the fast path out (joinedkey_checked.go).
func joinedKey(name object.ObjectName) (string, bool) {
	if name.Namespace == "" || name.Name == "" {
		return "", false
	}
	ns := unsafe.StringData(name.Namespace)
	slash := unsafe.Add(unsafe.Pointer(ns), len(name.Namespace))
	if unsafe.Add(slash, 1) != unsafe.Pointer(unsafe.StringData(name.Name)) || *(*byte)(slash) != '/' {
		return "", false
	}
	return unsafe.String(ns, len(name.Namespace)+1+len(name.Name)), true
}
