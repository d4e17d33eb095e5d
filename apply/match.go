package apply

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Holds walks the configuration (its Go value, typically client-go's
// generated *XApplyConfiguration, or its JSON value for one that encodes
// itself) beside the cached object, where the owned field set points, and
// compares what it reaches as encoding/json would encode both.

// level is where in the object a walk is: what a level counts as the
// configuration's fields leaves out what names the object, as
// desiredFields drops it.
type level uint8

const (
	nested   level = iota
	top            // apiVersion and kind are not state
	metadata       // nor are name, namespace and creationTimestamp
)

// identity reports whether a field of name at lv is not compared.
func (lv level) identity(name string) bool {
	switch lv {
	case top:
		return name == "apiVersion" || name == "kind"
	case metadata:
		return name == "name" || name == "namespace" || name == "creationTimestamp"
	}
	return false
}

// walkedObject is v through non-nil pointers and interfaces, and whether
// it is an object the walk compares field by field (a struct or a
// string-keyed map that encoding/json does not leave to the type).
func walkedObject(v reflect.Value) (reflect.Value, bool) {
	v = deref(v)
	return v, v.IsValid() && !selfEncoding(v) &&
		(v.Kind() == reflect.Struct && !structInfoOf(v.Type()).viaJSON ||
			v.Kind() == reflect.Map && v.Type().Key().Kind() == reflect.String && !v.IsNil())
}

// deref is v through non-nil pointers and interfaces whose type does not
// encode itself.
func deref(v reflect.Value) reflect.Value {
	for v.IsValid() && (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && !v.IsNil() && !selfEncoding(v) {
		v = v.Elem()
	}
	return v
}

// isList reports whether encoding/json writes v (dereferenced) as a list.
func isList(v reflect.Value) bool {
	return v.IsValid() && !selfEncoding(v) &&
		(v.Kind() == reflect.Slice && !v.IsNil() && !isBytes(v.Type()) || v.Kind() == reflect.Array)
}

// matchApplied reports whether the part of v that the field set owned
// names equals the configuration's part c, as JSON (at level lv: without
// what names the object): jsonEqual(project(jsonValue(v), owned),
// jsonValue(c)), computed in place. It compares each value it reaches,
// building nothing; only values that encode themselves (metav1.Time,
// resource.Quantity, ...) and shapes it does not walk go through jsonValue
// and project.
func matchApplied(v reflect.Value, owned map[string]any, c reflect.Value, lv level) bool {
	if isLeaf(owned) {
		return equalApplied(v, c)
	}
	cObj, cIsObj := walkedObject(c)
	vObj, vIsObj := walkedObject(v)
	switch {
	case cIsObj && vIsObj:
		return matchFieldsApplied(vObj, owned, cObj, lv)
	case lv == nested && isList(cObj):
		if ok, judged := matchListApplied(v, owned, cObj); judged {
			return ok
		}
	}
	w, ok := jsonValue(c)
	if !ok {
		return false
	}
	switch m, _ := w.(map[string]any); lv {
	case top:
		dropIdentity(m)
	case metadata:
		dropNames(m, metadata)
	}
	x, ok := jsonValue(v)
	if !ok {
		return false
	}
	p, ok := project(x, owned)
	return ok && jsonEqual(p, w)
}

// matchFieldsApplied is matchApplied of two objects: the fields c sets
// (but for the level's identity) are the ones owned names, each matching
// v's.
func matchFieldsApplied(v reflect.Value, owned map[string]any, c reflect.Value, lv level) bool {
	if lv == nested {
		if vm, cm, ok := stringMaps(v, c); ok {
			return matchEntriesApplied(vm, owned, cm, func(a, b string) bool { return a == b })
		}
		if vm, cm, ok := bytesMaps(v, c); ok { // a Secret's data
			return matchEntriesApplied(vm, owned, cm, sameBytes)
		}
	}
	n := 0
	for k, sub := range owned {
		if k == "." {
			continue
		}
		name, ok := strings.CutPrefix(k, "f:")
		if !ok || lv.identity(name) {
			return false
		}
		cf, inC := fieldOf(c, name)
		vf, inV := fieldOf(v, name)
		if !inC || !inV {
			return false
		}
		subset, _ := sub.(map[string]any)
		sublv := nested
		if lv == top && name == "metadata" {
			sublv = metadata
		}
		if !matchApplied(vf, subset, cf, sublv) {
			return false
		}
		n++
	}
	return n == setFields(c, lv)
}

// matchEntriesApplied is matchFieldsApplied of two maps of plain values
// (no reflection, no lookup of a reflect.Value by name): every entry owned
// names is in both and equal, and c has no other.
func matchEntriesApplied[E any](vm map[string]E, owned map[string]any, cm map[string]E, equal func(a, b E) bool) bool {
	n := 0
	for k, sub := range owned {
		if k == "." {
			continue
		}
		name, ok := strings.CutPrefix(k, "f:")
		cs, inC := cm[name]
		vs, inV := vm[name]
		if sub, _ := sub.(map[string]any); !ok || !inC || !inV || !isLeaf(sub) || !equal(cs, vs) {
			return false
		}
		n++
	}
	return n == len(cm)
}

// stringMaps returns v and c as map[string]string when both are.
func stringMaps(v, c reflect.Value) (vm, cm map[string]string, ok bool) {
	return mapsOf[string](v, c)
}

// bytesMaps returns v and c as map[string][]byte when both are.
func bytesMaps(v, c reflect.Value) (vm, cm map[string][]byte, ok bool) {
	return mapsOf[[]byte](v, c)
}

// mapsOf returns v and c as map[string]E when both are.
func mapsOf[E any](v, c reflect.Value) (vm, cm map[string]E, ok bool) {
	if v.Kind() != reflect.Map || c.Kind() != reflect.Map || !v.CanInterface() || !c.CanInterface() {
		return nil, nil, false
	}
	vm, vok := v.Interface().(map[string]E)
	cm, cok := c.Interface().(map[string]E)
	return vm, cm, vok && cok
}

// sameBytes reports whether encoding/json writes a and b alike: the same
// bytes, and nil (null) only beside nil.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// setFields counts the fields of the object c that encoding/json writes,
// but for the level's identity; at the top, metadata counts only when it
// sets more than the object's name (desiredFields drops it then).
func setFields(c reflect.Value, lv level) int {
	if c.Kind() == reflect.Map {
		if lv == nested {
			return c.Len()
		}
		n := 0
		for it := c.MapRange(); it.Next(); {
			if !lv.identity(it.Key().String()) {
				n++
			}
		}
		return n
	}
	info := structInfoOf(c.Type())
	n := 0
	for i := range info.fields {
		f := &info.fields[i]
		fv, present := f.value(c)
		switch {
		case !present || lv.identity(f.name):
		case lv == top && f.name == "metadata":
			if md, isObj := walkedObject(fv); !isObj || setFields(md, metadata) > 0 {
				n++
			}
		default:
			n++
		}
	}
	return n
}

// matchListApplied is matchApplied of two lists: the elements of v that
// owned names, in v's order, match c's one for one. Not judged as picked
// says.
func matchListApplied(v reflect.Value, owned map[string]any, c reflect.Value) (ok, judged bool) {
	if v = deref(v); !isList(v) {
		return false, false
	}
	// The elements owned must be as many as the configuration's, or the
	// apply changes what the manager owns: decided before any element is
	// looked for, so a forged entry claiming many elements costs a count.
	if ownedElements(owned) != c.Len() {
		return false, true
	}
	var buf [8]pick
	picks, found, judged := picked(v, owned, buf[:0])
	if !found || !judged {
		return false, judged
	}
	for j, p := range picks {
		if !matchApplied(v.Index(p.i), p.sub, c.Index(j), nested) {
			return false, true
		}
	}
	return true, true
}

// equalApplied is equalValue(v, jsonValue(c)): the strings, bytes and
// string maps objects are full of compared as they are, the rest through
// c's JSON value.
func equalApplied(v, c reflect.Value) bool {
	v, c = deref(v), deref(c)
	if v.IsValid() && c.IsValid() && !selfEncoding(v) && !selfEncoding(c) {
		switch vk, ck := v.Kind(), c.Kind(); {
		case vk == reflect.String && ck == reflect.String:
			return v.String() == c.String()
		case vk == reflect.Bool && ck == reflect.Bool:
			return v.Bool() == c.Bool()
		case vk == reflect.Slice && ck == reflect.Slice && isBytes(v.Type()) && isBytes(c.Type()):
			return sameBytes(v.Bytes(), c.Bytes())
		case vk == reflect.Struct && ck == reflect.Struct && !structInfoOf(v.Type()).viaJSON && !structInfoOf(c.Type()).viaJSON:
			return equalStructsApplied(v, c)
		case vk == reflect.Map && ck == reflect.Map:
			if vm, cm, ok := stringMaps(v, c); ok {
				return (vm == nil) == (cm == nil) && maps.Equal(vm, cm)
			}
			if vm, cm, ok := bytesMaps(v, c); ok {
				return (vm == nil) == (cm == nil) && maps.EqualFunc(vm, cm, sameBytes)
			}
		}
	}
	w, ok := jsonValue(c)
	return ok && equalValue(v, w)
}

// equalStructsApplied is equalApplied of two structs: the same fields set,
// each equal.
func equalStructsApplied(v, c reflect.Value) bool {
	n := 0
	for _, f := range structInfoOf(c.Type()).fields {
		cf, inC := f.value(c)
		if !inC {
			continue
		}
		vf, inV := fieldOf(v, f.name)
		if !inV || !equalApplied(vf, cf) {
			return false
		}
		n++
	}
	return n == setFields(v, nested)
}

// fieldOf is the value of a struct's field or a string-keyed map's entry
// by its JSON name, and whether encoding/json writes it.
func fieldOf(v reflect.Value, name string) (reflect.Value, bool) {
	if v.Kind() == reflect.Struct {
		f := structInfoOf(v.Type()).byName[name]
		if f == nil {
			return reflect.Value{}, false
		}
		return f.value(v)
	}
	child := v.MapIndex(reflect.ValueOf(name).Convert(v.Type().Key()))
	return child, child.IsValid()
}

// ownedElements is the number of a list's elements a field set names (its
// keys but ".").
func ownedElements(owned map[string]any) int {
	n := len(owned)
	if _, ok := owned["."]; ok {
		n--
	}
	return n
}

// pick is an element of a list that a field set names, and the field set
// of its own.
type pick struct {
	i   int
	sub map[string]any
}

// picked appends to picks the elements of the list v that owned names, in
// the list's order. Not found when one is missing; not judged for an
// element named twice, or by keys when the list's elements are not objects
// the walk compares field by field: the JSON values' projection decides
// those.
func picked(v reflect.Value, owned map[string]any, picks []pick) (_ []pick, found, judged bool) {
	for k, sub := range owned {
		if k == "." {
			continue
		}
		i, judged := elementAt(v, k)
		if !judged || i < 0 {
			return nil, false, judged
		}
		subset, _ := sub.(map[string]any)
		picks = append(picks, pick{i, subset})
	}
	slices.SortFunc(picks, func(a, b pick) int { return a.i - b.i })
	for j := 1; j < len(picks); j++ {
		if picks[j].i == picks[j-1].i {
			return nil, false, false
		}
	}
	return picks, true, true
}

// elementAt is elementOf on the list v, without converting it: the index
// of the element the path element k names, or -1. Not judged for keys
// ("k:{...}") when an element is not a struct or string-keyed map, nor
// when two elements have k's key or value: the server's apply would merge
// them into one, so what the first holds says nothing of the result (the
// list came from anyone who may update the object).
func elementAt(v reflect.Value, k string) (i int, judged bool) {
	switch {
	case strings.HasPrefix(k, "k:"):
		var buf [4]keyField
		keys, ok := parseKeys(k[2:], buf[:0])
		if !ok {
			return -1, true
		}
		at := -1
		for i := range v.Len() {
			e, isObj := walkedObject(v.Index(i))
			if !isObj {
				return -1, false
			}
			if hasKeyFields(e, keys) {
				if at >= 0 {
					return -1, false
				}
				at = i
			}
		}
		return at, true
	case strings.HasPrefix(k, "v:"):
		var want any
		if json.Unmarshal([]byte(k[2:]), &want) != nil {
			return -1, true
		}
		at := -1
		for i := range v.Len() {
			if equalValue(v.Index(i), want) {
				if at >= 0 {
					return -1, false
				}
				at = i
			}
		}
		return at, true
	case strings.HasPrefix(k, "i:"):
		if i, err := strconv.Atoi(k[2:]); err == nil && i >= 0 && i < v.Len() {
			return i, true
		}
	}
	return -1, true
}

// keyField is one field of a "k:{...}" path element: a list element's key.
type keyField struct {
	name  string
	value any
}

// parseKeys reads the object of a "k:" path element into keys. Its usual
// form (string values without escapes) is read here; anything else by
// encoding/json.
func parseKeys(s string, keys []keyField) ([]keyField, bool) {
	p := fieldSetParser{raw: []byte(s), str: s}
	if p.next('{') && !p.next('}') {
		for {
			name, ok := p.key()
			if !ok || !p.next(':') {
				break
			}
			p.skipSpace()
			if p.i >= len(p.raw) || p.raw[p.i] != '"' {
				break // a number, a bool, null: encoding/json's
			}
			value, ok := p.key()
			if !ok {
				break
			}
			if slices.ContainsFunc(keys, func(k keyField) bool { return k.name == name }) {
				break // named twice: encoding/json keeps the last
			}
			keys = append(keys, keyField{name, value})
			if p.next('}') {
				if p.skipSpace(); p.i == len(p.raw) {
					return keys, true
				}
				break
			}
			if !p.next(',') {
				break
			}
		}
	}
	var m map[string]any
	if json.Unmarshal([]byte(s), &m) != nil {
		return nil, false
	}
	keys = keys[:0]
	for name, value := range m {
		keys = append(keys, keyField{name, value})
	}
	return keys, true
}

// hasKeyFields reports whether the object e has every key's value: hasKeys
// on e's JSON value. A field e does not write counts as null.
func hasKeyFields(e reflect.Value, keys []keyField) bool {
	for _, k := range keys {
		f, present := fieldOf(e, k.name)
		if !present {
			if k.value != nil {
				return false
			}
			continue
		}
		if !equalValue(f, k.value) {
			return false
		}
	}
	return true
}

// isBytes reports whether encoding/json writes a slice of type t as a
// base64 string.
func isBytes(t reflect.Type) bool {
	return t.Elem().Kind() == reflect.Uint8 && encodingOf(t.Elem()) == 0
}

// equalValue is jsonEqual(jsonValue(v), want), compared in place.
func equalValue(v reflect.Value, want any) bool {
	if !v.IsValid() || (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return want == nil
	}
	if selfEncoding(v) {
		x, ok := viaJSON(v)
		return ok && jsonEqual(x, want)
	}
	switch v.Kind() {
	case reflect.Bool:
		w, ok := want.(bool)
		return ok && w == v.Bool()
	case reflect.String:
		w, ok := want.(string)
		return ok && w == v.String()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		w, ok := want.(float64)
		return ok && w == float64(v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		w, ok := want.(float64)
		return ok && w == float64(v.Uint())
	case reflect.Float64:
		f := v.Float()
		w, ok := want.(float64)
		return ok && !math.IsNaN(f) && !math.IsInf(f, 0) && w == f
	case reflect.Pointer, reflect.Interface:
		return equalValue(v.Elem(), want)
	case reflect.Slice:
		if v.IsNil() {
			return want == nil
		}
		if isBytes(v.Type()) {
			return equalBytes(v.Bytes(), want)
		}
		return equalList(v, want)
	case reflect.Array:
		return equalList(v, want)
	case reflect.Map:
		return equalMap(v, want)
	case reflect.Struct:
		return equalStruct(v, want)
	}
	x, ok := jsonValue(v) // a float32: formatted as encoding/json does
	return ok && jsonEqual(x, want)
}

// equalBytes reports whether want is b's base64 encoding (a nil b: null),
// encoding a chunk at a time on the stack.
func equalBytes(b []byte, want any) bool {
	if b == nil {
		return want == nil
	}
	s, ok := want.(string)
	if !ok || len(s) != base64.StdEncoding.EncodedLen(len(b)) {
		return false
	}
	var buf [64]byte
	for len(b) > 0 {
		n := min(48, len(b)) // a multiple of 3: no padding but at the end
		m := base64.StdEncoding.EncodedLen(n)
		base64.StdEncoding.Encode(buf[:m], b[:n])
		if string(buf[:m]) != s[:m] {
			return false
		}
		b, s = b[n:], s[m:]
	}
	return true
}

func equalList(v reflect.Value, want any) bool {
	w, ok := want.([]any)
	if !ok || w == nil || len(w) != v.Len() {
		return false
	}
	for i := range w {
		if !equalValue(v.Index(i), w[i]) {
			return false
		}
	}
	return true
}

func equalMap(v reflect.Value, want any) bool {
	if v.IsNil() {
		return want == nil
	}
	if v.Type().Key().Kind() != reflect.String {
		x, ok := jsonValue(v) // integer and TextMarshaler keys
		return ok && jsonEqual(x, want)
	}
	w, ok := want.(map[string]any)
	if !ok || w == nil || len(w) != v.Len() {
		return false
	}
	if v.CanInterface() {
		switch m := v.Interface().(type) {
		case map[string]string:
			for k, s := range m {
				if ws, ok := w[k].(string); !ok || ws != s {
					return false
				}
			}
			return true
		case map[string][]byte:
			for k, b := range m {
				if wb, ok := w[k]; !ok || !equalBytes(b, wb) {
					return false
				}
			}
			return true
		}
	}
	for it := v.MapRange(); it.Next(); {
		wv, ok := w[it.Key().String()]
		if !ok || !equalValue(it.Value(), wv) {
			return false
		}
	}
	return true
}

func equalStruct(v reflect.Value, want any) bool {
	info := structInfoOf(v.Type())
	if info.viaJSON {
		x, ok := viaJSON(v)
		return ok && jsonEqual(x, want)
	}
	w, ok := want.(map[string]any)
	if !ok || w == nil {
		return false
	}
	n := 0
	for i := range info.fields {
		f := &info.fields[i]
		fv, present := f.value(v)
		if !present {
			continue
		}
		wv, ok := w[f.name]
		if !ok || !equalValue(fv, wv) {
			return false
		}
		n++
	}
	return n == len(w)
}
