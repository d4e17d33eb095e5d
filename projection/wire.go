package projection

import (
	"errors"
	"fmt"
)

// wireType is a protobuf wire type.
type wireType uint8

const (
	wireVarint  wireType = 0
	wireFixed64 wireType = 1
	wireBytes   wireType = 2
	wireFixed32 wireType = 5
)

// The decoding errors below are always returned wrapped, after
// "projection: " and the path of the field.
var (
	// ErrTruncated reports input that ends inside a field.
	ErrTruncated = errors.New("truncated input")
	// ErrVarintOverflow reports a varint longer than ten bytes.
	ErrVarintOverflow = errors.New("varint overflows 64 bits")
	// ErrWireType reports a field sent with a wire type its plan does not
	// expect, or a wire type protobuf does not define.
	ErrWireType = errors.New("unexpected wire type")
)

// varint reads the varint at b[i:] and returns it and the index after it.
func varint(b []byte, i int) (uint64, int, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if i >= len(b) {
			return 0, i, ErrTruncated
		}
		c := b[i]
		i++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, i, nil
		}
	}
	return 0, i, ErrVarintOverflow
}

// lengthDelimited reads the length at b[i:] and returns the payload's
// bounds.
func lengthDelimited(b []byte, i int) (int, int, error) {
	n, i, err := varint(b, i)
	if err != nil {
		return 0, 0, err
	}
	if n > uint64(len(b)-i) {
		return 0, 0, ErrTruncated
	}
	return i, i + int(n), nil
}

// skip returns the index after the value of wire type w at b[i:].
func skip(b []byte, i int, w wireType) (int, error) {
	switch w {
	case wireVarint:
		_, i, err := varint(b, i)
		return i, err
	case wireFixed64, wireFixed32:
		n := 8
		if w == wireFixed32 {
			n = 4
		}
		if len(b)-i < n {
			return i, ErrTruncated
		}
		return i + n, nil
	case wireBytes:
		_, end, err := lengthDelimited(b, i)
		return end, err
	}
	return i, fmt.Errorf("%w %d", ErrWireType, w)
}

// count returns how many records of field num the message b holds from
// index i on (for sizing a slice or map once). It stops at the first
// malformed record; decoding reports it.
func count(b []byte, i int, num uint64) int {
	n := 0
	for i < len(b) {
		tag, j, err := varint(b, i)
		if err != nil {
			return n
		}
		if tag>>3 == num {
			n++
		}
		if i, err = skip(b, j, wireType(tag&7)); err != nil {
			return n
		}
	}
	return n
}
