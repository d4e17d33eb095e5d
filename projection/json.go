package projection

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"unsafe"
)

// errJSON reports JSON that is not well formed where the decoder looks.
var errJSON = errors.New("malformed JSON")

// jsonObject is the JSON plan of one of P's structs: its members by name.
// A member P lacks is skipped by a scan that only balances brackets and
// finds the ends of strings; a member P has is decoded by encoding/json
// unless it is a struct of P's own (or a pointer to one), decoded member by
// member, or a string without escapes, copied directly.
type jsonObject struct {
	path   string
	fields map[string]*jsonField
}

type jsonField struct {
	name string
	off  uintptr
	typ  reflect.Type // the field's type
	ptr  bool         // a pointer to a struct decoded by sub
	sub  *jsonObject
	str  bool // kind string
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

// jsonPlan builds the JSON plan of P's struct t, memoized by type.
func jsonPlan(t reflect.Type, path string, memo map[reflect.Type]*jsonObject) *jsonObject {
	if o, ok := memo[t]; ok {
		return o
	}
	o := &jsonObject{path: path, fields: map[string]*jsonField{}}
	memo[t] = o
	for _, pf := range pFields(t, 0, nil) {
		f := &jsonField{name: pf.name, off: pf.off, typ: pf.typ, str: pf.typ.Kind() == reflect.String}
		st := pf.typ
		if st.Kind() == reflect.Pointer {
			st, f.ptr = st.Elem(), true
		}
		if st.Kind() == reflect.Struct && !reflect.PointerTo(st).Implements(jsonUnmarshaler) {
			f.sub = jsonPlan(st, path+"."+pf.name, memo)
		} else {
			f.ptr = false
		}
		o.fields[pf.name] = f
	}
	return o
}

// lookup is the field named key, exactly: as the API server and client-go
// decode (sigs.k8s.io/json), not as encoding/json, which also takes a key
// differing in case, so that an object carrying both "name" and "Name"
// would project otherwise than client-go reads it.
func (o *jsonObject) lookup(key []byte) *jsonField {
	return o.fields[string(key)]
}

// decode decodes the JSON value at b[i:] (an object or null) into the
// struct at base and returns the index after it.
func (o *jsonObject) decode(b []byte, i int, base unsafe.Pointer, depth int) (int, error) {
	if depth > maxDepth {
		return i, fmt.Errorf("projection: %s: objects nested deeper than %d", o.path, maxDepth)
	}
	if bytes.HasPrefix(b[i:], []byte("null")) {
		return i + 4, nil
	}
	if b[i] != '{' {
		return i, fmt.Errorf("projection: %s: %w: %q where an object starts", o.path, errJSON, b[i])
	}
	i = space(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		key, next, err := o.key(b, i)
		if err != nil {
			return next, err
		}
		if i, err = o.member(b, next, o.lookup(key), base, depth); err != nil {
			return i, err
		}
		if i = space(b, i); i >= len(b) {
			return i, fmt.Errorf("projection: %s: %w", o.path, ErrTruncated)
		}
		switch b[i] {
		case ',':
			i = space(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return i, fmt.Errorf("projection: %s: %w: %q after a member", o.path, errJSON, b[i])
		}
	}
}

// key reads a member's name and the colon after it; it returns the index
// of the value.
func (o *jsonObject) key(b []byte, i int) ([]byte, int, error) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, fmt.Errorf("projection: %s: %w: no member name", o.path, errJSON)
	}
	end, escaped, err := skipString(b, i)
	if err != nil {
		return nil, end, fmt.Errorf("projection: %s: %w", o.path, err)
	}
	key := b[i+1 : end-1]
	if escaped {
		var s string
		if err := json.Unmarshal(b[i:end], &s); err != nil {
			return nil, end, fmt.Errorf("projection: %s: %w", o.path, err)
		}
		key = []byte(s)
	}
	i = space(b, end)
	if i >= len(b) || b[i] != ':' {
		return nil, i, fmt.Errorf("projection: %s: %w: no colon after %q", o.path, errJSON, key)
	}
	return key, space(b, i+1), nil
}

// member decodes the value at b[i:] into field f of the struct at base, or
// skips it when f is nil.
func (o *jsonObject) member(b []byte, i int, f *jsonField, base unsafe.Pointer, depth int) (int, error) {
	if i >= len(b) {
		return i, fmt.Errorf("projection: %s: %w", o.path, ErrTruncated)
	}
	if f == nil {
		end, err := skipValue(b, i)
		if err != nil {
			return end, fmt.Errorf("projection: %s: %w", o.path, err)
		}
		return end, nil
	}
	p := unsafe.Add(base, f.off)
	if f.sub != nil && b[i] == '{' {
		if f.ptr {
			pp := (*unsafe.Pointer)(p)
			if *pp == nil {
				*pp = reflect.New(f.typ.Elem()).UnsafePointer()
			}
			p = *pp
		}
		return f.sub.decode(b, i, p, depth+1)
	}
	end, err := skipValue(b, i)
	if err != nil {
		return end, fmt.Errorf("projection: %s.%s: %w", o.path, f.name, err)
	}
	if f.str && b[i] == '"' && bytes.IndexByte(b[i+1:end-1], '\\') < 0 && valid(b[i+1:end-1]) {
		*(*string)(p) = string(b[i+1 : end-1])
		return end, nil
	}
	if err := json.Unmarshal(b[i:end], reflect.NewAt(f.typ, p).Interface()); err != nil {
		return end, fmt.Errorf("projection: %s.%s: %w", o.path, f.name, err)
	}
	return end, nil
}

// valid reports whether s holds no control characters and only ASCII (so
// that copying it is what encoding/json would decode).
func valid(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c >= 0x80 {
			return false
		}
	}
	return true
}

func delimiter(c byte) bool {
	return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\r' || c == '\n'
}

func space(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] (a
// quote) and whether it holds escapes.
func skipString(b []byte, i int) (int, bool, error) {
	escaped := false
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			return i + 1, escaped, nil
		}
	}
	return len(b), escaped, ErrTruncated
}

// skipValue returns the index after the value starting at b[i]: a string,
// an object or array (brackets balanced, strings skipped whole), or a
// literal or number (up to the next delimiter).
func skipValue(b []byte, i int) (int, error) {
	switch b[i] {
	case '"':
		end, _, err := skipString(b, i)
		return end, err
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, _, err := skipString(b, i)
				if err != nil {
					return end, err
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return i, ErrTruncated
	}
	start := i
	for i < len(b) && !delimiter(b[i]) {
		i++
	}
	if i == start {
		return i, fmt.Errorf("%w: %q where a value starts", errJSON, b[i])
	}
	return i, nil
}
