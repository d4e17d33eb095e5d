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
					env.APIVersion = reuse(&lastAPIVersion, v)
				} else if num == 2 {
					env.Kind = reuse(&lastKind, v)
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

// lastAPIVersion and lastKind are the type an envelope was last read with:
// the envelopes of a list or a watch stream repeat it, and reusing its
// strings saves two allocations per object.
var lastAPIVersion, lastKind atomic.Pointer[string]

// reuse returns v as a string: last's if equal (allocating nothing), else a
// new one, which last then keeps.
func reuse(last *atomic.Pointer[string], v []byte) string {
	if s := last.Load(); s != nil && *s == string(v) {
		return *s
	}
	s := string(v)
	last.Store(&s)
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
