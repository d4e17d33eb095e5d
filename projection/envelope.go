package projection

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
)

// magic starts every protobuf body the API server sends.
var magic = []byte("k8s\x00")

// ErrNotProtobuf reports a body without the "k8s\x00" magic.
var ErrNotProtobuf = errors.New(`projection: not a Kubernetes protobuf body (no "k8s\x00" magic)`)

// Envelope is the runtime.Unknown the API server wraps around every object
// it sends as protobuf.
type Envelope struct {
	// APIVersion and Kind are the object's TypeMeta.
	APIVersion, Kind string
	// Raw is the object's own protobuf encoding; it shares the body's
	// memory.
	Raw []byte
	// ContentEncoding and ContentType describe Raw; the API server leaves
	// the encoding empty.
	ContentEncoding, ContentType string
}

// Unwrap reads a protobuf body: the "k8s\x00" magic, then a runtime.Unknown
// (typeMeta 1 {apiVersion 1, kind 2}, raw 2, contentEncoding 3,
// contentType 4). A body whose content encoding is set (compressed) is an
// error: Raw would not be protobuf.
func Unwrap(data []byte) (Envelope, error) {
	var env Envelope
	if !bytes.HasPrefix(data, magic) {
		return env, ErrNotProtobuf
	}
	b := data[len(magic):]
	err := fields(b, "Unknown", func(num uint64, v []byte) error {
		switch num {
		case 1:
			return fields(v, "Unknown.typeMeta", func(num uint64, v []byte) error {
				if num == 1 {
					env.APIVersion = reuse(v)
				} else if num == 2 {
					env.Kind = reuse(v)
				}
				return nil
			})
		case 2:
			env.Raw = v
		case 3:
			env.ContentEncoding = string(v)
		case 4:
			env.ContentType = string(v)
		}
		return nil
	})
	if err == nil && env.ContentEncoding != "" {
		err = fmt.Errorf("projection: Unknown.contentEncoding is %q; only unencoded objects are supported", env.ContentEncoding)
	}
	return env, err
}

// typeStrings holds the apiVersion and kind strings envelopes were read
// with, one per slot chosen by a hash of the bytes: the envelopes of a list
// or a watch stream repeat their type, and reusing its strings saves two
// allocations per object. The types of a manager's informers, their
// streams interleaved, mostly keep their own slots; two that share one
// take turns, and a read that misses allocates twice (the string and the
// slot's pointer to it) instead of once.
var typeStrings [256]atomic.Pointer[string]

// maxTypeString bounds what the table keeps: real apiVersions and kinds
// are far shorter, and a slot must not hold a large string for good.
const maxTypeString = 256

// reuse returns v as a string: the table's if equal (allocating nothing),
// else a new one, which the table then keeps if it is short.
func reuse(v []byte) string {
	if len(v) > maxTypeString {
		return string(v)
	}
	h := uint32(2166136261) // FNV-1a
	for _, c := range v {
		h = (h ^ uint32(c)) * 16777619
	}
	slot := &typeStrings[h%uint32(len(typeStrings))]
	if s := slot.Load(); s != nil && *s == string(v) {
		return *s
	}
	s := string(v)
	slot.Store(&s)
	return s
}

// fields calls fn with each length-delimited field of message b and skips
// the others.
func fields(b []byte, path string, fn func(num uint64, v []byte) error) error {
	for i := 0; i < len(b); {
		tag, j, err := varint(b, i)
		if err != nil {
			return fmt.Errorf("projection: %s: tag: %w", path, err)
		}
		if wireType(tag&7) != wireBytes {
			if i, err = skip(b, j, wireType(tag&7)); err != nil {
				return fmt.Errorf("projection: %s: field %d: %w", path, tag>>3, err)
			}
			continue
		}
		s, e, err := lengthDelimited(b, j)
		if err != nil {
			return fmt.Errorf("projection: %s: field %d: %w", path, tag>>3, err)
		}
		if err := fn(tag>>3, b[s:e:e]); err != nil {
			return err
		}
		i = e
	}
	return nil
}
