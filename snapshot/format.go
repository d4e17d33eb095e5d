package snapshot

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
)

// The fixed parts of the file format (version 2; see the package doc).
const (
	magic         = "CKSNAPv\x00"
	formatVersion = 2
	// prefixLen is the magic, the format version and the header length.
	prefixLen = len(magic) + 2 + 4
	// macLen is an HMAC-SHA256: the header's, after it, and the trailer.
	macLen = sha256.Size
	// minFileLen is the smallest file that can be a snapshot: a prefix,
	// the two fixed fields of an empty header, its MAC and the trailer.
	minFileLen = prefixLen + 16 + 2*macLen
	// maxHeaderLen bounds the header a reader allocates before checking it.
	maxHeaderLen = 1 << 20
)

// The labels that start the two MACs, so that neither can stand for the
// other.
const (
	headerLabel  = "ctrlkit snapshot header v2\x00"
	recordsLabel = "ctrlkit snapshot records v2\x00"
)

// Sentinel errors that classify why a snapshot was refused; Read's errors
// match exactly one of them with errors.Is (I/O errors other than a missing
// file match none).
var (
	// ErrNotFound: there is no snapshot at the path.
	ErrNotFound = errors.New("snapshot: not found")
	// ErrMismatch: the snapshot is authentic but of another identity; the
	// error is a *MismatchError naming the field.
	ErrMismatch = errors.New("snapshot: identity mismatch")
	// ErrCorrupt: the file is not a complete, authentic snapshot of the
	// format this package reads (not a snapshot at all, an older or newer
	// format version, a MAC that does not hold because the file was
	// damaged or written without the directory's key, a size other than
	// its header says), or an object in it does not decode.
	ErrCorrupt = errors.New("snapshot: corrupt")
	// ErrUntrusted: the file was not read, or the directory not used,
	// because another user could have written it or what it leads to: the
	// directory is another user's, writable by others, or a symbolic link
	// in a folder others can write (PrepareDir: its private folder
	// "ctrlkit-<uid>" is a link, not a directory, another user's or
	// writable by others); the file is a symbolic link, not a regular
	// file, another user's or writable by others; or the directory's key
	// is missing, another user's or readable by others.
	ErrUntrusted = errors.New("snapshot: untrusted")
)

// corrupt returns an error matching ErrCorrupt that says why. Its text
// never quotes the file's bytes.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// untrusted returns an error matching ErrUntrusted that says why.
func untrusted(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUntrusted, fmt.Sprintf(format, args...))
}

// header is what the file says about its content.
type header struct {
	id    Identity
	rv    string
	count uint64
	// size is the records' length in bytes: the file's size less the
	// prefix, the header, its MAC and the trailer.
	size uint64
}

// encodeHeader returns the file's first bytes: the prefix and the header,
// whose last 16 bytes are the count and the size (fixed width, so that a
// writer can fill in the size once the records are written).
func encodeHeader(h header) []byte {
	var body []byte
	for _, f := range h.id.fields() {
		body = appendString(body, *f.v)
	}
	body = appendString(body, h.rv)
	body = binary.BigEndian.AppendUint64(body, h.count)
	body = binary.BigEndian.AppendUint64(body, h.size)

	b := make([]byte, 0, prefixLen+len(body))
	b = append(b, magic...)
	b = binary.BigEndian.AppendUint16(b, formatVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	return append(b, body...)
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// headerMAC returns the MAC of the prefix and header b under key.
func headerMAC(key, b []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(headerLabel))
	m.Write(b)
	return m.Sum(nil)
}

// newRecordsMAC returns the trailer's MAC under key, to be fed the records
// and then the header's MAC (which the writer knows only after the records).
func newRecordsMAC(key []byte) hash.Hash {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(recordsLabel))
	return m
}

// checkPrefix checks the magic and the format version and returns the
// header's length, which it checks against the bytes the file has left.
// Its errors say what is wrong without quoting the bytes: the file may be
// anything.
func checkPrefix(p []byte, remaining int64) (int, error) {
	if string(p[:len(magic)]) != magic {
		return 0, corrupt("not a ctrlkit snapshot")
	}
	switch v := binary.BigEndian.Uint16(p[len(magic):]); {
	case v == 1:
		return 0, corrupt("format version 1, written by an older ctrlkit without a key (this package reads version %d)", formatVersion)
	case v != formatVersion:
		return 0, corrupt("unknown format version %d (this package reads version %d)", v, formatVersion)
	}
	n := binary.BigEndian.Uint32(p[len(magic)+2:])
	if n > maxHeaderLen || int64(n) > remaining {
		return 0, corrupt("header length %d exceeds the file", n)
	}
	return int(n), nil
}

// decodeHeader parses the header body; its MAC was checked.
func decodeHeader(body []byte) (header, error) {
	var h header
	d := decoder{b: body}
	for _, f := range h.id.fields() {
		*f.v = d.string()
	}
	h.rv = d.string()
	if d.err != nil {
		return header{}, d.err
	}
	if len(d.b) != 16 {
		return header{}, corrupt("header of %d bytes after its strings, want 16", len(d.b))
	}
	h.count = binary.BigEndian.Uint64(d.b)
	h.size = binary.BigEndian.Uint64(d.b[8:])
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
