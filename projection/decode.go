package projection

import (
	"fmt"
	"math"
	"reflect"
	"time"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxDepth bounds the nesting of messages decoded, so a recursive type
// cannot be made to exhaust the stack.
const maxDepth = 100

// Decode decodes the protobuf encoding of one full object (F's Marshal
// output: the raw bytes inside the API server's runtime.Unknown envelope)
// into a new P. Fields P lacks are skipped; fields P has, sent with another
// wire type, malformed or truncated input are errors naming the field's path.
// P's TypeMeta is left empty: protobuf sends it in the envelope (see
// DecodeEnvelope).
func (p *Plan[P]) Decode(data []byte) (P, error) {
	if p.jsonOnly {
		var zero P
		return zero, ErrNoProtobuf
	}
	v := reflect.New(p.elem)
	if err := p.root.decode(data, v.UnsafePointer(), 0); err != nil {
		var zero P
		return zero, err
	}
	return v.Interface().(P), nil
}

// DecodeEnvelope decodes a protobuf response body for one object: the
// "k8s\x00" magic and the runtime.Unknown around the object's bytes (see
// Unwrap). It fills P's kind and apiVersion, if P has them, from the
// envelope. An envelope whose kind is not F's type name is an error.
func (p *Plan[P]) DecodeEnvelope(data []byte) (P, error) {
	env, err := Unwrap(data)
	if err == nil && env.Kind != "" && env.Kind != p.fName {
		err = fmt.Errorf("projection: the body holds a %s, the plan decodes a %s", env.Kind, p.fName)
	}
	if err != nil {
		var zero P
		return zero, err
	}
	out, err := p.Decode(env.Raw)
	if err != nil {
		return out, err
	}
	base := reflect.ValueOf(out).UnsafePointer()
	if p.kind >= 0 {
		*(*string)(unsafe.Add(base, p.kind)) = env.Kind
	}
	if p.apiVersion >= 0 {
		*(*string)(unsafe.Add(base, p.apiVersion)) = env.APIVersion
	}
	return out, nil
}

// decode decodes message b into the struct at base.
func (m *message) decode(b []byte, base unsafe.Pointer, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("projection: %s: messages nested deeper than %d", m.path, maxDepth)
	}
	for i := 0; i < len(b); {
		start := i
		tag, j, err := varint(b, i)
		if err != nil {
			return fmt.Errorf("projection: %s: tag: %w", m.path, err)
		}
		num, w := tag>>3, wireType(tag&7)
		f := m.lookup(num)
		if f == nil {
			if i, err = skip(b, j, w); err != nil {
				return fmt.Errorf("projection: %s: field %d: %w", m.path, num, err)
			}
			continue
		}
		if i, err = f.decode(b, start, j, w, base, depth); err != nil {
			return err
		}
	}
	return nil
}

// decode decodes one record of field f: its tag at b[start:], its value at
// b[i:] with wire type w. It returns the index after the record.
func (f *field) decode(b []byte, start, i int, w wireType, base unsafe.Pointer, depth int) (int, error) {
	var v uint64
	var payload []byte
	var err error
	switch {
	case w == f.val.wire:
	case w == wireBytes && f.shape == list && f.val.wire != wireBytes: // packed scalars
	default:
		return i, fmt.Errorf("projection: %s: field %d: %w %d, want %d", f.path, f.num, ErrWireType, w, f.val.wire)
	}
	switch w {
	case wireVarint:
		v, i, err = varint(b, i)
	case wireFixed64, wireFixed32:
		var end int
		if end, err = skip(b, i, w); err == nil {
			v, i = fixed(b[i:end]), end
		}
	default:
		var s, e int
		if s, e, err = lengthDelimited(b, i); err == nil {
			payload, i = b[s:e], e
		}
	}
	if err != nil {
		return i, fmt.Errorf("projection: %s: %w", f.path, err)
	}
	at := unsafe.Add(base, f.off)
	switch f.shape {
	case embedded:
		return i, f.val.sub.decode(payload, base, depth+1)
	case mapping:
		return i, f.decodeEntry(payload, at, b, start, depth)
	case list:
		if w == wireBytes && f.val.wire != wireBytes {
			return i, f.decodePacked(payload, at)
		}
		at = f.appendElem(at, b, start, false)
	}
	return i, f.val.store(at, v, payload, f.path, depth)
}

func fixed(b []byte) uint64 {
	var v uint64
	for k := len(b) - 1; k >= 0; k-- {
		v = v<<8 | uint64(b[k])
	}
	return v
}

// store stores one decoded value at p: a varint or fixed value v, or a
// length-delimited payload.
func (v *value) store(p unsafe.Pointer, n uint64, payload []byte, path string, depth int) error {
	if v.ptr {
		pp := (*unsafe.Pointer)(p)
		if *pp == nil {
			*pp = reflect.New(v.typ).UnsafePointer()
		}
		p = *pp
	}
	switch v.kind {
	case kString:
		*(*string)(p) = string(payload)
	case kBytes:
		*(*[]byte)(p) = append([]byte{}, payload...)
	case kBool:
		*(*bool)(p) = n != 0
	case kInt32:
		*(*int32)(p) = int32(n)
	case kInt64:
		*(*int64)(p) = int64(n)
	case kUint32:
		*(*uint32)(p) = uint32(n)
	case kUint64:
		*(*uint64)(p) = n
	case kFloat32:
		*(*float32)(p) = math.Float32frombits(uint32(n))
	case kFloat64:
		*(*float64)(p) = math.Float64frombits(n)
	case kMessage:
		return v.sub.decode(payload, p, depth+1)
	case kTime:
		return decodeTime(payload, (*metav1.Time)(p), path)
	case kUnmarshal:
		u := reflect.NewAt(v.typ, p).Interface().(interface{ Unmarshal([]byte) error })
		if err := u.Unmarshal(payload); err != nil {
			return fmt.Errorf("projection: %s: %w", path, err)
		}
	}
	return nil
}

// decodeTime decodes a Timestamp as metav1.Time does: seconds only, in
// local time; empty is the zero time.
func decodeTime(b []byte, t *metav1.Time, path string) error {
	var seconds uint64
	for i := 0; i < len(b); {
		tag, j, err := varint(b, i)
		if err == nil && tag == 1<<3|uint64(wireVarint) {
			seconds, i, err = varint(b, j)
		} else if err == nil {
			i, err = skip(b, j, wireType(tag&7))
		}
		if err != nil {
			return fmt.Errorf("projection: %s: %w", path, err)
		}
	}
	if len(b) == 0 {
		*t = metav1.Time{}
		return nil
	}
	*t = metav1.Time{Time: time.Unix(int64(seconds), 0).Local()}
	return nil
}

// sliceHeader is the layout of every Go slice.
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// appendElem makes room for one more element in the slice at p and returns
// the new element's address. A full slice grows to hold every record of f
// in message b from start on; for packed scalars, b is the payload and
// start the index after the value being added: it grows by at most the
// bytes left, plus one.
func (f *field) appendElem(p unsafe.Pointer, b []byte, start int, packed bool) unsafe.Pointer {
	h := (*sliceHeader)(p)
	if h.len == h.cap {
		n := len(b) - start + 1
		if !packed {
			n = count(b, start, uint64(f.num))
		}
		s := reflect.NewAt(f.typ, p).Elem()
		grown := reflect.MakeSlice(f.typ, h.len, h.len+max(n, 1))
		reflect.Copy(grown, s)
		s.Set(grown)
	}
	elem := unsafe.Add(h.data, uintptr(h.len)*f.typ.Elem().Size())
	h.len++
	return elem
}

// decodePacked appends the packed scalars of payload to the slice at p.
func (f *field) decodePacked(payload []byte, p unsafe.Pointer) error {
	for i := 0; i < len(payload); {
		var n uint64
		var err error
		if f.val.wire == wireVarint {
			n, i, err = varint(payload, i)
		} else {
			var end int
			if end, err = skip(payload, i, f.val.wire); err == nil {
				n, i = fixed(payload[i:end]), end
			}
		}
		if err != nil {
			return fmt.Errorf("projection: %s: %w", f.path, err)
		}
		if err := f.val.store(f.appendElem(p, payload, i, true), n, nil, f.path, 0); err != nil {
			return err
		}
	}
	return nil
}

// DecodeJSON decodes the JSON encoding of one full object into a new P.
// Members P lacks are skipped by a scan that balances brackets and finds
// the ends of strings but checks nothing else; members P has decode as
// encoding/json decodes them (names matched exactly, then ignoring case).
// Unlike Decode it fills kind and apiVersion, which JSON carries in the
// object.
func (p *Plan[P]) DecodeJSON(data []byte) (P, error) {
	v := reflect.New(p.elem)
	var zero P
	i := space(data, 0)
	if i == len(data) {
		return zero, fmt.Errorf("projection: %s: %w", p.json.path, ErrTruncated)
	}
	end, err := p.json.decode(data, i, v.UnsafePointer(), 0)
	if err != nil {
		return zero, err
	}
	if space(data, end) != len(data) {
		return zero, fmt.Errorf("projection: %s: %w: data after the object", p.json.path, errJSON)
	}
	return v.Interface().(P), nil
}
