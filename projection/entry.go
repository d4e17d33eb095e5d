package projection

import (
	"fmt"
	"reflect"
	"unsafe"
)

// decodeEntry decodes one map entry message (key 1, value 2) into the map
// at p; the map is made, sized for every entry of the message b from start
// on, at the first entry.
func (f *field) decodeEntry(entry []byte, p unsafe.Pointer, b []byte, start, depth int) error {
	var key, payload []byte
	var n uint64
	for i := 0; i < len(entry); {
		tag, j, err := varint(entry, i)
		if err != nil {
			return fmt.Errorf("projection: %s: map entry: %w", f.path, err)
		}
		num, w := tag>>3, wireType(tag&7)
		switch {
		case num == 1 && w == wireBytes:
			var s, e int
			s, e, err = lengthDelimited(entry, j)
			key, i = entry[s:e:e], e
		case num == 2 && w == f.val.wire && w == wireBytes:
			var s, e int
			s, e, err = lengthDelimited(entry, j)
			payload, i = entry[s:e:e], e
		case num == 2 && w == f.val.wire:
			var end int
			if end, err = skip(entry, j, w); err == nil {
				n = fixedOrVarint(entry[j:end], w)
				i = end
			}
		case num == 1 || num == 2:
			return fmt.Errorf("projection: %s: map entry field %d: %w %d", f.path, num, ErrWireType, w)
		default:
			i, err = skip(entry, j, w)
		}
		if err != nil {
			return fmt.Errorf("projection: %s: map entry: %w", f.path, err)
		}
	}
	if f.fast {
		m := (*map[string]string)(p)
		if *m == nil {
			*m = make(map[string]string, count(b, start, uint64(f.num)))
		}
		(*m)[string(key)] = string(payload)
		return nil
	}
	m := reflect.NewAt(f.typ, p).Elem()
	if m.IsNil() {
		m.Set(reflect.MakeMapWithSize(f.typ, count(b, start, uint64(f.num))))
	}
	k := reflect.New(f.typ.Key()).Elem()
	k.SetString(string(key))
	v := reflect.New(f.typ.Elem())
	if err := f.val.store(v.UnsafePointer(), n, payload, f.path, depth); err != nil {
		return err
	}
	m.SetMapIndex(k, v.Elem())
	return nil
}

// fixedOrVarint decodes the varint or little-endian fixed value b.
func fixedOrVarint(b []byte, w wireType) uint64 {
	if w == wireVarint {
		v, _, _ := varint(b, 0)
		return v
	}
	return fixed(b)
}
