package object

import (
	"errors"
	"fmt"
	"strings"
)

// Errors returned by the key functions. Callers classify them with errors.Is.
var (
	// ErrEmptyName reports an object or key without a name.
	ErrEmptyName = errors.New("object: empty name")
	// ErrInvalidKey reports a key that is not "name" or "namespace/name",
	// or a namespace or name that would not survive a round trip through
	// such a key (because it contains a "/").
	ErrInvalidKey = errors.New("object: invalid key")
)

// ObjectName is the typed form of a store key: a namespace (empty for
// cluster-scoped objects) and a name. Its zero value is not a valid name.
type ObjectName struct {
	Namespace string
	Name      string
}

// NameOf returns the name of obj. It does not validate it; see
// ObjectName.Validate.
func NameOf(obj Object) ObjectName {
	return ObjectName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// String returns the key form of n: "namespace/name", or "name" when the
// namespace is empty. It does not validate n.
func (n ObjectName) String() string {
	if n.Namespace == "" {
		return n.Name
	}
	return n.Namespace + "/" + n.Name
}

// Validate reports whether n can be written as a key and read back: the name
// must not be empty, and neither part may contain a "/". The errors wrap
// ErrEmptyName or ErrInvalidKey.
func (n ObjectName) Validate() error {
	if n.Name == "" {
		if n.Namespace == "" {
			return ErrEmptyName
		}
		return fmt.Errorf("%w in namespace %q", ErrEmptyName, n.Namespace)
	}
	if strings.IndexByte(n.Namespace, '/') >= 0 {
		return fmt.Errorf("%w: namespace %q contains '/'", ErrInvalidKey, n.Namespace)
	}
	if strings.IndexByte(n.Name, '/') >= 0 {
		return fmt.Errorf("%w: name %q contains '/'", ErrInvalidKey, n.Name)
	}
	return nil
}

// ParseObjectName is the inverse of ObjectName.String: it accepts "name" and
// "namespace/name" with non-empty parts, and returns an error wrapping
// ErrInvalidKey for anything else ("", "a/", "/a", "a/b/c").
func ParseObjectName(key string) (ObjectName, error) {
	ns, name, found := strings.Cut(key, "/")
	if !found {
		ns, name = "", key
	}
	n := ObjectName{Namespace: ns, Name: name}
	switch {
	case name == "" || (found && ns == ""):
		return ObjectName{}, fmt.Errorf("%w %q: empty part", ErrInvalidKey, key)
	case strings.IndexByte(name, '/') >= 0:
		return ObjectName{}, fmt.Errorf("%w %q: more than two parts", ErrInvalidKey, key)
	}
	return n, nil
}

// MetaNamespaceKeyFunc returns the store key of obj: "namespace/name", or
// "name" for a cluster-scoped object. It fails on an empty name, or on a
// namespace or name containing "/", since such a key could not be split back.
func MetaNamespaceKeyFunc(obj Object) (string, error) {
	n := NameOf(obj)
	if err := n.Validate(); err != nil {
		return "", err
	}
	return n.String(), nil
}

// SplitMetaNamespaceKey splits a key made by MetaNamespaceKeyFunc into its
// namespace ("" for a cluster-scoped key) and name. A key with more than two
// parts or an empty part is an error wrapping ErrInvalidKey.
func SplitMetaNamespaceKey(key string) (namespace, name string, err error) {
	n, err := ParseObjectName(key)
	if err != nil {
		return "", "", err
	}
	return n.Namespace, n.Name, nil
}

// KeyMatches reports whether key is MetaNamespaceKeyFunc(obj) without
// building that key: for code that was handed a key and its object and
// must not trust the pair.
func KeyMatches(key string, obj Object) bool {
	ns, name := obj.GetNamespace(), obj.GetName()
	if name == "" || strings.Contains(name, "/") || strings.Contains(ns, "/") {
		return false
	}
	if ns == "" {
		return key == name
	}
	return len(key) == len(ns)+1+len(name) && key[len(ns)] == '/' && key[:len(ns)] == ns && key[len(ns)+1:] == name
}
