//go:build !race && !msan && !asan

package store

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/ctrlkit/ctrlkit/object"
)

// joinedKey gives back the very string a name was cut from, and nothing
// when the parts are not that string's around a '/'. make test runs this
// without -race, whose builds leave joinedKey out.
func TestJoinedKey_isTheStringTheNameWasCutFrom(t *testing.T) {
	key := strings.Clone("ns/name")
	k, ok := joinedKey(object.ObjectName{Namespace: key[:2], Name: key[3:]})
	if !ok || k != key || unsafe.StringData(k) != unsafe.StringData(key) {
		t.Errorf("joinedKey of a name cut from %q = %q, %v; want that string itself", key, k, ok)
	}
	longer := strings.Clone("x ns/name y")
	if k, ok := joinedKey(object.ObjectName{Namespace: longer[2:4], Name: longer[5:9]}); !ok || k != "ns/name" {
		t.Errorf("joinedKey of a name cut from the middle of %q = %q, %v; want ns/name", longer, k, ok)
	}
	for _, n := range []object.ObjectName{
		{Namespace: strings.Clone("ns"), Name: strings.Clone("name")},
		{Namespace: key[:2], Name: key[2:]}, // "ns" and "/name": no separator between
		{Namespace: "ns-name"[:2], Name: "ns-name"[3:]},
		{Namespace: key[:2]},
		{Name: key[3:]},
	} {
		if k, ok := joinedKey(n); ok {
			t.Errorf("joinedKey(%#v) = %q, want none", n, k)
		}
	}
}
