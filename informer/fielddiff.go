package informer

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// FieldChange is one field of a cached object found changed in place.
type FieldChange struct {
	// Path names the field as its JSON does: ".spec.replicas",
	// `.metadata.labels["app"]`, ".spec.containers[0].image".
	Path string
	// Was and Now render the field's value as it was cached and as it is
	// now, shortened; "(absent)" for a map entry or pointer that was or is
	// not there.
	Was, Now string
}

// maxChanges is the most FieldChanges one comparison reports.
const maxChanges = 8

// maxDepth bounds the walk (API objects are trees a few dozen levels deep).
const maxDepth = 128

var (
	quantityType     = reflect.TypeFor[resource.Quantity]()
	unstructuredType = reflect.TypeFor[unstructured.Unstructured]() // its one field, Object, is the JSON object
)

// segment is one step of the path from the object to a field: a struct
// field (typ, field), a slice or array index, or a map key.
type segment struct {
	typ   reflect.Type // struct: field of typ; nil: index or key
	field int
	index int
	key   reflect.Value // valid for a map key
	obj   bool          // the key is of a JSON object (map[string]any): ".key"
}

// fieldWalker compares a cached object with its copy, field by field,
// reading both and writing neither. It allocates only for what it reports.
type fieldWalker struct {
	path    []segment
	changes []FieldChange
}

// diffObjects returns the fields where cached differs from its copy (at
// most maxChanges), or nil when they are equal. A Quantity's cached string
// form (which its String method fills in lazily) is ignored, so reading a
// cached quantity is never taken for a change.
func diffObjects(cached, copied any) []FieldChange {
	w := walkers.Get().(*fieldWalker)
	w.walk(reflect.ValueOf(cached), reflect.ValueOf(copied), 0)
	changes := w.changes
	w.path, w.changes = w.path[:0], nil
	walkers.Put(w)
	return changes
}

// walkers keep their path's buffer from one comparison to the next.
var walkers = sync.Pool{New: func() any { return &fieldWalker{path: make([]segment, 0, 32)} }}

func (w *fieldWalker) full() bool { return len(w.changes) >= maxChanges }

// walk compares a (the cached value) with b (its copy).
func (w *fieldWalker) walk(a, b reflect.Value, depth int) {
	if w.full() || depth > maxDepth {
		return
	}
	if a.IsValid() != b.IsValid() {
		w.report(a, b)
		return
	}
	if !a.IsValid() {
		return
	}
	if a.Type() != b.Type() {
		w.report(a, b)
		return
	}
	switch a.Kind() {
	case reflect.Pointer:
		w.walkPointer(a, b, depth)
	case reflect.Interface:
		w.walkInterface(a, b, depth)
	case reflect.Slice:
		w.walkSlice(a, b, depth)
	case reflect.Array:
		for k := range a.Len() {
			w.push(segment{index: k})
			w.walk(a.Index(k), b.Index(k), depth+1)
			w.pop()
		}
	case reflect.Map:
		w.walkMap(a, b, depth)
	case reflect.Struct:
		w.walkStruct(a, b, depth)
	default:
		if !sameScalar(a, b) {
			w.report(a, b)
		}
	}
}

// sameScalar compares two values of one type whose kind holds no other
// value: a number, a string, a bool, or a func, chan or unsafe pointer
// (the same one or not).
func sameScalar(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		x, y := a.Float(), b.Float()
		return x == y || (x != x && y != y) // two NaNs are the same value
	case reflect.Complex64, reflect.Complex128:
		return a.Complex() == b.Complex()
	case reflect.String:
		return a.String() == b.String()
	}
	return a.Pointer() == b.Pointer()
}

func (w *fieldWalker) walkPointer(a, b reflect.Value, depth int) {
	switch {
	case a.IsNil() && b.IsNil():
	case a.IsNil() || b.IsNil():
		w.report(a, b)
	case a.Pointer() != b.Pointer():
		w.walk(a.Elem(), b.Elem(), depth+1)
	}
}

func (w *fieldWalker) walkInterface(a, b reflect.Value, depth int) {
	switch {
	case a.IsNil() && b.IsNil():
	case a.IsNil() || b.IsNil() || a.Elem().Type() != b.Elem().Type():
		w.report(a, b)
	default:
		w.walk(a.Elem(), b.Elem(), depth+1)
	}
}

func (w *fieldWalker) walkSlice(a, b reflect.Value, depth int) {
	switch {
	case a.IsNil() != b.IsNil() || a.Len() != b.Len():
		w.report(a, b)
	case a.Pointer() == b.Pointer():
	case a.Type().Elem().Kind() == reflect.Uint8:
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			w.report(a, b)
		}
	default:
		for k := range a.Len() {
			w.push(segment{index: k})
			w.walk(a.Index(k), b.Index(k), depth+1)
			w.pop()
		}
	}
}

func (w *fieldWalker) walkMap(a, b reflect.Value, depth int) {
	if a.IsNil() != b.IsNil() {
		w.report(a, b)
		return
	}
	if a.Pointer() == b.Pointer() {
		return
	}
	obj := a.Type().Key().Kind() == reflect.String && a.Type().Elem().Kind() == reflect.Interface
	found := 0
	it := a.MapRange()
	for it.Next() {
		if w.full() {
			return
		}
		k := it.Key()
		bv := b.MapIndex(k) // a missing key is the invalid Value
		if bv.IsValid() {
			found++
		}
		w.push(segment{key: k, obj: obj})
		w.walk(it.Value(), bv, depth+1)
		w.pop()
	}
	if found == b.Len() {
		return // b has no key that a lacks
	}
	it = b.MapRange()
	for it.Next() {
		if w.full() {
			return
		}
		if k := it.Key(); !a.MapIndex(k).IsValid() {
			w.push(segment{key: k, obj: obj})
			w.report(reflect.Value{}, it.Value())
			w.pop()
		}
	}
}

func (w *fieldWalker) walkStruct(a, b reflect.Value, depth int) {
	t := a.Type()
	if t == quantityType {
		w.walkQuantity(a, b)
		return
	}
	for k := range t.NumField() {
		w.push(segment{typ: t, field: k})
		w.walk(a.Field(k), b.Field(k), depth+1)
		w.pop()
	}
}

// walkQuantity compares two quantities by value and format, never reading
// the string form that Quantity.String caches in place.
func (w *fieldWalker) walkQuantity(a, b reflect.Value) {
	sub := fieldWalker{}
	t := a.Type()
	for k := range t.NumField() {
		if t.Field(k).Name == "s" {
			continue
		}
		sub.walk(a.Field(k), b.Field(k), 1)
	}
	if len(sub.changes) > 0 {
		w.report(a, b)
	}
}

func (w *fieldWalker) push(s segment) { w.path = append(w.path, s) }
func (w *fieldWalker) pop()           { w.path = w.path[:len(w.path)-1] }

// report records that the field at the current path differs: a is the
// cached value, b the copy's (either may be absent).
func (w *fieldWalker) report(a, b reflect.Value) {
	w.changes = append(w.changes, FieldChange{Path: renderPath(w.path), Was: render(b), Now: render(a)})
}

func renderPath(path []segment) string {
	var sb strings.Builder
	for _, s := range path {
		switch {
		case s.typ != nil:
			if name := jsonName(s.typ, s.field); name != "" {
				sb.WriteString(".")
				sb.WriteString(name)
			}
		case s.key.IsValid():
			if s.obj {
				sb.WriteString(".")
				sb.WriteString(s.key.String())
			} else {
				sb.WriteString("[")
				sb.WriteString(renderKey(s.key))
				sb.WriteString("]")
			}
		default:
			sb.WriteString("[" + strconv.Itoa(s.index) + "]")
		}
	}
	if sb.Len() == 0 {
		return "."
	}
	return sb.String()
}

func renderKey(k reflect.Value) string {
	if k.Kind() == reflect.String {
		return strconv.Quote(k.String())
	}
	return render(k)
}

// jsonNames caches each struct type's field names as JSON spells them ("":
// an inlined field, which adds no step to the path).
var jsonNames sync.Map // reflect.Type -> []string

func jsonName(t reflect.Type, field int) string {
	if names, ok := jsonNames.Load(t); ok {
		return names.([]string)[field]
	}
	names := make([]string, t.NumField())
	for k := range names {
		f := t.Field(k)
		tag, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case strings.Contains(","+opts+",", ",inline,"), tag == "" && f.Anonymous, t == unstructuredType:
			names[k] = ""
		case tag != "" && tag != "-":
			names[k] = tag
		default:
			names[k] = f.Name
		}
	}
	jsonNames.Store(t, names)
	return names[field]
}

// render shows a value in a report: absent, nil, a scalar, or a short form
// of a composite one.
func render(v reflect.Value) string {
	if !v.IsValid() {
		return "(absent)"
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice:
		if v.IsNil() {
			return "nil"
		}
	}
	if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
		return fmt.Sprintf("(%d bytes)", v.Len()) // perhaps a Secret's: never shown
	}
	switch v.Kind() {
	case reflect.String:
		return shorten(strconv.Quote(v.String()))
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Pointer:
		return "&" + render(v.Elem())
	case reflect.Interface:
		return render(v.Elem())
	}
	if v.Type() == quantityType && v.CanInterface() {
		q := v.Interface().(resource.Quantity) // a copy: its String fills in the copy only
		return q.String()
	}
	if v.CanInterface() {
		return shorten(fmt.Sprintf("%v", v.Interface()))
	}
	return shorten(fmt.Sprintf("(%s)", v.Type()))
}

func shorten(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max-3] + "..."
}
