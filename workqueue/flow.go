package workqueue

import (
	"reflect"
	"strings"
)

// defaultFlowKey returns the flow of a key when Options.FlowKey is not set:
// the namespace. For string keys that is the part before the first "/"
// ("" for cluster-scoped "name" keys); for struct keys with a string field
// named Namespace (object.ObjectName) it is that field. Keys of any other
// type all share one flow.
func defaultFlowKey[K comparable]() func(K) string {
	var zero K
	if _, ok := any(zero).(string); ok {
		return func(k K) string { return namespaceOf(any(k).(string)) }
	}
	t := reflect.TypeFor[K]()
	if t.Kind() == reflect.Struct {
		if f, ok := t.FieldByName("Namespace"); ok && f.Type.Kind() == reflect.String && f.IsExported() && byValue(t, f.Index) {
			idx := f.Index
			return func(k K) string { return reflect.ValueOf(k).FieldByIndex(idx).String() }
		}
	}
	return func(K) string { return "" }
}

// byValue reports whether the field at index path idx of struct type t is
// reached through embedded structs only, never a pointer that could be nil.
func byValue(t reflect.Type, idx []int) bool {
	for _, i := range idx[:len(idx)-1] {
		t = t.Field(i).Type
		if t.Kind() != reflect.Struct {
			return false
		}
	}
	return true
}

// namespaceOf returns the namespace part of a "namespace/name" key.
func namespaceOf(key string) string {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return ""
}
