package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The fixed parts of the file format (version 1; see the package doc).
const (
	magic         = "CKSNAPv\x00"
	formatVersion = 1
	// prefixLen is the magic, the format version and the header length.
	prefixLen = len(magic) + 2 + 4
	// headerCRCLen is the CRC-32C after the header.
	headerCRCLen = 4
	// trailerLen is the SHA-256 at the end of the file.
	trailerLen = 32
	// maxHeaderLen bounds the header a reader allocates before checking it.
	maxHeaderLen = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sentinel errors that classify why a snapshot was refused; Read's errors
// match exactly one of them with errors.Is (I/O errors other than a missing
// file match none).
var (
	// ErrNotFound: there is no snapshot at the path.
	ErrNotFound = errors.New("snapshot: not found")
	// ErrMismatch: the snapshot is intact but of another identity; the error
	// is a *MismatchError naming the field.
	ErrMismatch = errors.New("snapshot: identity mismatch")
	// ErrCorrupt: the file is not a complete, intact snapshot of a format
	// this package reads (bad magic, unknown format version, bad checksum,
	// truncated or trailing bytes), or an object in it does not decode.
	ErrCorrupt = errors.New("snapshot: corrupt")
)

// corrupt returns an error matching ErrCorrupt that says why.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// header is what the file says about its content.
type header struct {
	id    Identity
	rv    string
	count uint64
}

// encodeHeader returns the file's first bytes: prefix, header and its CRC.
func encodeHeader(h header) []byte {
	var body []byte
	for _, f := range h.id.fields() {
		body = appendString(body, *f.v)
	}
	body = appendString(body, h.rv)
	body = binary.AppendUvarint(body, h.count)

	b := make([]byte, 0, prefixLen+len(body)+headerCRCLen)
	b = append(b, magic...)
	b = binary.BigEndian.AppendUint16(b, formatVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// checkPrefix checks the magic and the format version and returns the
// header's length, which it checks against the bytes the file has left.
func checkPrefix(p []byte, remaining int64) (int, error) {
	if string(p[:len(magic)]) != magic {
		return 0, corrupt("not a snapshot file (bad magic %q)", p[:len(magic)])
	}
	if v := binary.BigEndian.Uint16(p[len(magic):]); v != formatVersion {
		return 0, corrupt("unknown format version %d (this package reads version %d)", v, formatVersion)
	}
	n := binary.BigEndian.Uint32(p[len(magic)+2:])
	if n > maxHeaderLen || int64(n) > remaining {
		return 0, corrupt("header length %d exceeds the file", n)
	}
	return int(n), nil
}

// decodeHeader parses the header body; its checksum was checked.
func decodeHeader(body []byte) (header, error) {
	var h header
	d := decoder{b: body}
	for _, f := range h.id.fields() {
		*f.v = d.string()
	}
	h.rv = d.string()
	h.count = d.uvarint()
	if d.err != nil {
		return header{}, d.err
	}
	if len(d.b) != 0 {
		return header{}, corrupt("%d unexpected bytes after the header", len(d.b))
	}
	return h, nil
}

// decoder reads uvarints and strings from a byte slice; the first failure
// sticks in err and makes further reads return zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = corrupt("bad varint in the header")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = corrupt("header string of %d bytes exceeds the header", n)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
