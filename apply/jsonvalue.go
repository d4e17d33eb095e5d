package apply

import (
	"encoding"
	"encoding/base64"
	"encoding/json"
	"maps"
	"math"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
)

// Holds compares values as encoding/json would encode them. Mostly in
// place (match.go); where it cannot, it compares JSON values as
// encoding/json's Unmarshal into an any gives them (map[string]any, []any,
// string, float64, bool, nil). jsonValue computes the one json.Marshal and
// json.Unmarshal would give for a Go value by walking it with reflection,
// without the bytes or the intermediate decode. This file also holds the
// rules both follow: a struct's fields by their JSON names, omitempty and
// omitzero, the types that encode themselves.
// Values whose encoding their type decides (json.Marshaler,
// encoding.TextMarshaler: metav1.Time, resource.Quantity,
// intstr.IntOrString, ...), float32s, maps with non-string keys and
// fields with the ",string" option go through encoding/json itself, so the
// result is always encoding/json's.

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	isZeroerType      = reflect.TypeFor[interface{ IsZero() bool }]()
)

// selfCoding says which of a type and its pointer type encode themselves
// (json.Marshaler, encoding.TextMarshaler).
type selfCoding uint8

const (
	selfEncodes selfCoding = 1 << iota // the type itself
	ptrEncodes                         // its pointer type
)

// encodingOf is t's encoding, kept per type (reflect's Implements walks
// method tables, PointerTo looks in a global map). A type that cannot have
// methods is answered at once.
func encodingOf(t reflect.Type) selfCoding {
	if t.PkgPath() == "" {
		switch t.Kind() {
		case reflect.Struct, reflect.Pointer, reflect.Interface:
			// unnamed, yet with methods: promoted ones, or a named type's
		default:
			return 0 // predeclared, or an unnamed slice, map, array, ...
		}
	}
	return encodings.get(t, func() selfCoding {
		var e selfCoding
		if t.Implements(jsonMarshalerType) || t.Implements(textMarshalerType) {
			e |= selfEncodes
		}
		if p := reflect.PointerTo(t); p.Implements(jsonMarshalerType) || p.Implements(textMarshalerType) {
			e |= ptrEncodes
		}
		return e
	})
}

var encodings typeCache[selfCoding]

// typeCache keeps a value per type: a plain map read, copied on write,
// since the types a program compares are few and read on every value
// (a sync.Map's lookup cost several times as much).
type typeCache[V any] struct {
	m  atomic.Pointer[map[reflect.Type]V]
	mu sync.Mutex
}

// get returns t's value, computing it the first time.
func (c *typeCache[V]) get(t reflect.Type, compute func() V) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[t]; ok {
			return v
		}
	}
	v := compute() // outside the lock: compute may read the cache (a struct's fields)
	c.mu.Lock()
	defer c.mu.Unlock()
	next := map[reflect.Type]V{}
	if old := c.m.Load(); old != nil {
		if v, ok := (*old)[t]; ok {
			return v // another goroutine's, which others may hold already
		}
		next = maps.Clone(*old)
	}
	next[t] = v
	c.m.Store(&next)
	return v
}

// selfEncoding reports whether encoding/json would let v's type (or, v
// being addressable, its pointer type) encode v.
func selfEncoding(v reflect.Value) bool {
	e := encodingOf(v.Type())
	return e&selfEncodes != 0 || (e&ptrEncodes != 0 && v.Kind() != reflect.Pointer && v.CanAddr())
}

// jsonValue is v as json.Marshal and then json.Unmarshal into an any would
// give it; not ok when json.Marshal would fail (a channel, a NaN, ...).
func jsonValue(v reflect.Value) (any, bool) {
	if !v.IsValid() {
		return nil, true // a nil interface
	}
	if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return nil, true
	}
	if selfEncoding(v) {
		return viaJSON(v)
	}
	switch v.Kind() {
	case reflect.Bool:
		return v.Bool(), true
	case reflect.String:
		return v.String(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(v.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return float64(v.Uint()), true
	case reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, false
		}
		return f, true
	case reflect.Pointer, reflect.Interface:
		return jsonValue(v.Elem())
	case reflect.Slice:
		if v.IsNil() {
			return nil, true
		}
		if isBytes(v.Type()) {
			return base64.StdEncoding.EncodeToString(v.Bytes()), true
		}
		return jsonList(v)
	case reflect.Array:
		return jsonList(v)
	case reflect.Map:
		return jsonMap(v)
	case reflect.Struct:
		return jsonStruct(v)
	case reflect.Float32:
		return viaJSON(v) // formatted with 32 bits: only encoding/json knows the decimal it picks
	}
	return nil, false
}

// viaJSON is jsonValue by encoding/json itself.
func viaJSON(v reflect.Value) (any, bool) {
	x := v.Interface()
	if v.CanAddr() {
		x = v.Addr().Interface() // encoding/json calls pointer methods of addressable values
	}
	b, err := json.Marshal(x)
	if err != nil {
		return nil, false
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return nil, false
	}
	return out, true
}

func jsonList(v reflect.Value) (any, bool) {
	out := make([]any, v.Len())
	for i := range out {
		var ok bool
		if out[i], ok = jsonValue(v.Index(i)); !ok {
			return nil, false
		}
	}
	return out, true
}

func jsonMap(v reflect.Value) (any, bool) {
	if v.IsNil() {
		return nil, true
	}
	if v.Type().Key().Kind() != reflect.String {
		return viaJSON(v) // integer and TextMarshaler keys
	}
	if v.CanInterface() { // the maps objects are full of, without reflect's copies
		switch m := v.Interface().(type) {
		case map[string]string:
			out := make(map[string]any, len(m))
			for k, e := range m {
				out[k] = e
			}
			return out, true
		case map[string][]byte:
			out := make(map[string]any, len(m))
			for k, e := range m {
				if e == nil {
					out[k] = nil
				} else {
					out[k] = base64.StdEncoding.EncodeToString(e)
				}
			}
			return out, true
		}
	}
	out := make(map[string]any, v.Len())
	for it := v.MapRange(); it.Next(); {
		e, ok := jsonValue(it.Value())
		if !ok {
			return nil, false
		}
		out[it.Key().String()] = e
	}
	return out, true
}

func jsonStruct(v reflect.Value) (any, bool) {
	info := structInfoOf(v.Type())
	if info.viaJSON {
		return viaJSON(v)
	}
	out := make(map[string]any, min(len(info.fields), 8)) // most of a type's optional fields are unset
	for i := range info.fields {
		f := &info.fields[i]
		fv, present := f.value(v)
		if !present {
			continue
		}
		e, ok := jsonValue(fv)
		if !ok {
			return nil, false
		}
		out[f.name] = e
	}
	return out, true
}

// structInfo is how encoding/json encodes a struct type: its fields by
// their JSON names, embedded structs' fields promoted.
type structInfo struct {
	fields []jsonField
	byName map[string]*jsonField
	// viaJSON: a field has the ",string" option; leave the struct to
	// encoding/json.
	viaJSON bool
}

// jsonField is one field of a struct as encoding/json sees it.
type jsonField struct {
	name                string
	index               []int
	omitEmpty, omitZero bool
	tagged              bool // its name comes from its tag
}

var structInfos typeCache[*structInfo]

func structInfoOf(t reflect.Type) *structInfo {
	return structInfos.get(t, func() *structInfo { return newStructInfo(t) })
}

func newStructInfo(t reflect.Type) *structInfo {
	info := &structInfo{byName: map[string]*jsonField{}}
	var all []jsonField
	info.viaJSON = !collectFields(t, nil, map[reflect.Type]bool{}, &all)
	// encoding/json's rule for a name several fields give: the shallowest
	// wins, among equally shallow ones a single tagged one; else none.
	depth := map[string]int{}
	for _, f := range all {
		if d, ok := depth[f.name]; !ok || len(f.index) < d {
			depth[f.name] = len(f.index)
		}
	}
	for _, f := range all {
		if len(f.index) != depth[f.name] {
			continue
		}
		var rivals, tagged int
		for _, g := range all {
			if g.name == f.name && len(g.index) == len(f.index) {
				rivals++
				if g.tagged {
					tagged++
				}
			}
		}
		if rivals == 1 || (tagged == 1 && f.tagged) {
			info.fields = append(info.fields, f)
		}
	}
	for i := range info.fields {
		info.byName[info.fields[i].name] = &info.fields[i]
	}
	return info
}

// collectFields appends the fields of struct type t, at index prefix, to
// all, walking into embedded structs; not ok for a field with the ",string"
// option.
func collectFields(t reflect.Type, prefix []int, seen map[reflect.Type]bool, all *[]jsonField) bool {
	if seen[t] {
		return true // encoding/json ignores a struct embedded in itself
	}
	seen[t] = true
	defer delete(seen, t)
	for i := range t.NumField() {
		sf := t.Field(i)
		ft := sf.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if sf.Anonymous {
			if !sf.IsExported() && ft.Kind() != reflect.Struct {
				continue
			}
		} else if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if !validTagName(name) {
			name = ""
		}
		index := append(append([]int(nil), prefix...), i)
		if name == "" && sf.Anonymous && ft.Kind() == reflect.Struct {
			if !collectFields(ft, index, seen, all) {
				return false
			}
			continue
		}
		f := jsonField{name: name, index: index, tagged: name != ""}
		if name == "" {
			f.name = sf.Name
		}
		for o := range strings.SplitSeq(opts, ",") {
			switch o {
			case "omitempty":
				f.omitEmpty = true
			case "omitzero":
				f.omitZero = true
			case "string":
				return false
			}
		}
		*all = append(*all, f)
	}
	return true
}

// value is the field's value in struct v, and whether encoding/json writes
// it: not through a nil embedded pointer, and not when omitempty or
// omitzero omits it.
func (f *jsonField) value(v reflect.Value) (reflect.Value, bool) {
	for n, i := range f.index {
		if n > 0 {
			if v.Kind() == reflect.Pointer {
				if v.IsNil() {
					return reflect.Value{}, false
				}
				v = v.Elem()
			}
		}
		v = v.Field(i)
	}
	if f.omitEmpty && isEmpty(v) || f.omitZero && isZero(v) {
		return reflect.Value{}, false
	}
	return v, true
}

// isEmpty is encoding/json's omitempty test.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// isZero is encoding/json's omitzero test: the type's IsZero method if it
// has one, else the zero value.
func isZero(v reflect.Value) bool {
	t := v.Type()
	switch {
	case (t.Kind() == reflect.Pointer || t.Kind() == reflect.Interface) && v.IsNil():
		return true
	case t.Kind() == reflect.Interface && v.Elem().Kind() == reflect.Pointer && v.Elem().IsNil():
		return t.Implements(isZeroerType)
	case t.Implements(isZeroerType):
		return v.Interface().(interface{ IsZero() bool }).IsZero()
	case reflect.PointerTo(t).Implements(isZeroerType):
		if !v.CanAddr() {
			c := reflect.New(t).Elem()
			c.Set(v)
			v = c
		}
		return v.Addr().Interface().(interface{ IsZero() bool }).IsZero()
	}
	return v.IsZero()
}

// validTagName is encoding/json's test of a name in a json tag; it uses
// the Go field's name instead of an invalid one.
func validTagName(s string) bool {
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

// jsonEqual reports whether two JSON values (as jsonValue gives them) are
// equal: reflect.DeepEqual for these few types, without reflection.
func jsonEqual(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) || (a == nil) != (b == nil) {
			return false
		}
		for k, av := range a {
			bv, ok := b[k]
			if !ok || !jsonEqual(av, bv) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) || (a == nil) != (b == nil) {
			return false
		}
		for i := range a {
			if !jsonEqual(a[i], b[i]) {
				return false
			}
		}
		return true
	case string:
		b, ok := b.(string)
		return ok && a == b
	case float64:
		b, ok := b.(float64)
		return ok && a == b
	case bool:
		b, ok := b.(bool)
		return ok && a == b
	case nil:
		return b == nil
	}
	return reflect.DeepEqual(a, b)
}
