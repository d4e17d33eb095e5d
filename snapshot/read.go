package snapshot

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"reflect"
	"runtime"
	"sync"
)

// Read reads the snapshot at path and returns its resource version and its
// objects, decoded with decode, if it is a complete, intact snapshot of
// exactly the identity want (an empty want.Type or want.Fingerprint is T's,
// as in Write). Otherwise it returns no objects and an error that says why
// and matches one of ErrNotFound, ErrMismatch (a *MismatchError) or
// ErrCorrupt; an I/O error other than a missing file matches none of them.
// No input makes it panic (other than a panic in decode).
//
// Read streams: besides the objects it returns it holds one object's bytes
// at a time, or a few chunks of them when it decodes a large snapshot on
// several goroutines (see the package documentation). decode must not keep
// the slice it is given and must be safe for concurrent use. The identity is
// checked before any object is decoded; the objects are returned only after
// the checksum of the whole file has been verified.
func Read[T any](path string, want Identity, decode func([]byte) (T, error)) (string, []T, error) {
	if decode == nil {
		return "", nil, errors.New("snapshot: nil decode function")
	}
	want = want.withType(reflect.TypeFor[T]())
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return "", nil, fmt.Errorf("snapshot: read: %w", err)
	}
	defer f.Close()
	rv, objects, err := read(f, want, decode)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	return rv, objects, nil
}

// read reads a whole snapshot from f.
func read[T any](f *os.File, want Identity, decode func([]byte) (T, error)) (string, []T, error) {
	st, err := f.Stat()
	if err != nil {
		return "", nil, fmt.Errorf("snapshot: read: %w", err)
	}
	size := st.Size()
	if size < int64(prefixLen+headerCRCLen+trailerLen) {
		return "", nil, corrupt("truncated: %d bytes is shorter than any snapshot", size)
	}
	bodyLen := size - trailerLen // what the trailer's checksum covers
	sum := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(io.LimitReader(f, bodyLen), sum), 256<<10)
	r := &recordReader{br: br, remaining: bodyLen}

	h, err := r.header()
	if err != nil {
		return "", nil, err
	}
	if err := mismatch(h.id, want); err != nil {
		return "", nil, err
	}
	objects, err := readObjects(r, h.count, decode)
	if err != nil && !errors.Is(err, errUndecodable) {
		return "", nil, err
	}
	var trailer [trailerLen]byte
	if _, rerr := f.ReadAt(trailer[:], bodyLen); rerr != nil {
		return "", nil, fmt.Errorf("snapshot: read the checksum: %w", rerr)
	}
	if !bytes.Equal(trailer[:], sum.Sum(nil)) {
		return "", nil, corrupt("checksum mismatch")
	}
	if err != nil { // intact bytes that decode does not accept
		return "", nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return h.rv, objects, nil
}

// maxPrealloc bounds the objects slice allocated from the header's count.
const maxPrealloc = 1 << 16

// errUndecodable marks an object that decode refused; read reports it only
// if the checksum holds (otherwise the corruption is the better reason).
var errUndecodable = errors.New("object does not decode")

// readObjects reads count records and decodes them, on as many goroutines
// as GOMAXPROCS for a large snapshot (decoding dominates a read). After the
// first object that does not decode it still reads the rest, so that the
// checksum can be verified, and returns an error wrapping errUndecodable.
func readObjects[T any](r *recordReader, count uint64, decode func([]byte) (T, error)) ([]T, error) {
	if count > uint64(r.remaining) { // every record takes at least one byte
		return nil, corrupt("%d objects cannot fit in %d bytes", count, r.remaining)
	}
	workers := runtime.GOMAXPROCS(0)
	if workers > 1 && count >= 4*chunkObjects {
		return readObjectsParallel(r, count, decode, workers)
	}
	// The count is trusted only once the checksum holds: preallocate at most
	// a bounded number, so that a crafted count cannot exhaust memory.
	objects := make([]T, 0, min(count, maxPrealloc))
	var decodeErr error
	for i := range count {
		b, err := r.record()
		if err != nil {
			return nil, fmt.Errorf("object %d of %d: %w", i, count, err)
		}
		if decodeErr != nil {
			continue
		}
		obj, err := decode(b)
		if err != nil {
			decodeErr = fmt.Errorf("object %d of %d: %w: %w", i, count, errUndecodable, err)
			continue
		}
		objects = append(objects, obj)
	}
	return objects, r.finish(decodeErr)
}

// finish checks that nothing follows the last record and returns decodeErr.
func (r *recordReader) finish(decodeErr error) error {
	if r.remaining != 0 {
		return corrupt("%d unexpected bytes after the last object", r.remaining)
	}
	return decodeErr
}

// chunkObjects is how many records a decoding goroutine takes at a time.
const chunkObjects = 512

// chunk is consecutive records, from the first-th on, copied out of the
// reader, and what decoding them gave.
type chunk[T any] struct {
	first uint64
	data  []byte
	ends  []int // ends[i] is where record i ends in data
	out   []T
	err   error
}

func (c *chunk[T]) decode(count uint64, decode func([]byte) (T, error)) {
	c.out = make([]T, 0, len(c.ends))
	start := 0
	for i, end := range c.ends {
		obj, err := decode(c.data[start:end])
		if err != nil {
			c.err = fmt.Errorf("object %d of %d: %w: %w", c.first+uint64(i), count, errUndecodable, err)
			break
		}
		c.out = append(c.out, obj)
		start = end
	}
	c.data, c.ends = nil, nil
}

// readObjectsParallel is readObjects with workers goroutines decoding
// chunks while this one reads (and hashes) the file. The chunks waiting
// for a worker are bounded, and so is the memory beside the objects.
func readObjectsParallel[T any](r *recordReader, count uint64, decode func([]byte) (T, error), workers int) ([]T, error) {
	jobs := make(chan *chunk[T], workers)
	spare := make(chan []byte, 2*workers) // decoded chunks' buffers, for the next chunks (decode keeps no slice)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c := range jobs {
				buf := c.data
				c.decode(count, decode)
				select {
				case spare <- buf[:0]:
				default:
				}
			}
		})
	}
	var chunks []*chunk[T]
	var readErr error
	size := 0 // the last chunk's bytes: the next is sized as it was, to copy each record once
	for i := uint64(0); i < count && readErr == nil; {
		c := &chunk[T]{first: i, ends: make([]int, 0, chunkObjects)}
		select {
		case c.data = <-spare:
		default:
			c.data = make([]byte, 0, size+size/8)
		}
		for ; len(c.ends) < chunkObjects && i < count; i++ {
			b, err := r.record()
			if err != nil {
				readErr = fmt.Errorf("object %d of %d: %w", i, count, err)
				break
			}
			c.data = append(c.data, b...)
			c.ends = append(c.ends, len(c.data))
		}
		size = len(c.data)
		chunks = append(chunks, c)
		jobs <- c
	}
	close(jobs)
	wg.Wait()
	if readErr != nil {
		return nil, readErr
	}
	objects := make([]T, 0, count) // every record has been read: the count is real
	for _, c := range chunks {
		if c.err != nil {
			return nil, r.finish(c.err)
		}
		objects = append(objects, c.out...)
	}
	return objects, r.finish(nil)
}

// recordReader reads the checksummed part of a file, never past its end.
type recordReader struct {
	br *bufio.Reader
	// remaining is the number of bytes left before the trailer.
	remaining int64
	// buf holds the last record; it is reused.
	buf []byte
}

// read reads exactly n bytes into r.buf.
func (r *recordReader) read(n int64, what string) ([]byte, error) {
	if n > r.remaining {
		return nil, corrupt("truncated: %s of %d bytes, %d left", what, n, r.remaining)
	}
	if int64(cap(r.buf)) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	if _, err := io.ReadFull(r.br, b); err != nil {
		return nil, fmt.Errorf("snapshot: read %s: %w", what, err)
	}
	r.remaining -= n
	return b, nil
}

// header reads and checks the prefix and the header.
func (r *recordReader) header() (header, error) {
	p, err := r.read(int64(prefixLen), "prefix")
	if err != nil {
		return header{}, err
	}
	prefix := bytes.Clone(p)
	n, err := checkPrefix(prefix, r.remaining-headerCRCLen)
	if err != nil {
		return header{}, err
	}
	hb, err := r.read(int64(n+headerCRCLen), "header")
	if err != nil {
		return header{}, err
	}
	crc := crc32.Update(crc32.Checksum(prefix, castagnoli), castagnoli, hb[:n])
	if crc != binary.BigEndian.Uint32(hb[n:]) {
		return header{}, corrupt("header checksum mismatch")
	}
	return decodeHeader(hb[:n])
}

// record reads one length-prefixed record; the slice is valid until the next.
func (r *recordReader) record() ([]byte, error) {
	var n uint64
	for shift, i := uint(0), 0; ; shift, i = shift+7, i+1 {
		if i == binary.MaxVarintLen64 || r.remaining == 0 {
			return nil, corrupt("truncated or bad record length")
		}
		c, err := r.br.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("snapshot: read a record length: %w", err)
		}
		r.remaining--
		n |= uint64(c&0x7f) << shift
		if c < 0x80 {
			break
		}
	}
	if n > uint64(r.remaining) {
		return nil, corrupt("truncated: record of %d bytes, %d left", n, r.remaining)
	}
	return r.read(int64(n), "record")
}
