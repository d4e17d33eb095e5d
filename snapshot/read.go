package snapshot

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sync"
)

// Read reads the snapshot at path and returns its resource version and its
// objects, decoded with decode, if it is a complete, authentic snapshot of
// exactly the identity want (an empty want.Type or want.Fingerprint is T's,
// as in Write). Otherwise it returns no objects and an error that says why
// and matches one of ErrNotFound, ErrMismatch (a *MismatchError),
// ErrCorrupt or ErrUntrusted; an I/O error other than a missing file
// matches none of them, and once ctx ends Read returns its error. No input
// makes it panic; a decode that panics on an object is that object not
// decoding (ErrCorrupt naming it). No error quotes the file's bytes (an
// error of decode is passed on as decode wrote it).
//
// Read trusts only what this process's user wrote: it refuses (ErrUntrusted)
// a directory that is not this user's alone (another user's, writable by
// others, or a link in a folder others can write: give it a path in the
// directory PrepareDir returns) and a file at
// path that is a symbolic link, not a regular file (a FIFO: it never waits
// for a writer), another user's or writable by others, without reading it;
// and it serves a snapshot only if its MACs hold under the directory's key
// (KeyFile), which only Write with that key produces.
//
// Read streams: besides the objects it returns it holds one object's bytes
// at a time, or a few chunks of them when it decodes a large snapshot on
// several goroutines (see the package documentation); it reads no more than
// the authentic header says the file holds, and refuses a file of another
// size before reading its records. decode must not keep the slice it is
// given and must be safe for concurrent use. No object is served before the
// identity and the MAC of the whole file are verified; a large snapshot's
// objects decode beside the MAC, so decode may be given bytes the MAC then
// refuses, and must return on any input. Until the MAC holds, the objects
// decoded so far are kept (at most all of them, beside the slice Read
// fills: the objects twice for a value type T, briefly), and lost if it
// fails.
func Read[T any](ctx context.Context, path string, want Identity, decode func([]byte) (T, error)) (string, []T, error) {
	var rv string
	var objects []T
	err := ReadEach(ctx, path, want, decode, func(version string, count int) error {
		rv, objects = version, make([]T, 0, count)
		return nil
	}, func(batch []T) error {
		objects = append(objects, batch...)
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	return rv, objects, nil
}

// ReadEach reads the snapshot at path as Read does but hands the objects
// over as they are decoded, so that a caller can apply some while the next
// decode: once the identity and the MAC of the whole file have been
// verified (the objects decode meanwhile, see Read), it calls begin with
// the resource version and the number of objects, then each with
// consecutive batches of them in the file's order, on the caller's
// goroutine. The batches are the caller's to keep. An
// object that decode refuses (a decoder stricter than the one the file was
// written for), records that do not add up to the header's count (a file
// Write did not write: its MAC holds) or a read error end the read
// after the batches before them were handed over: a caller applying
// batches as they come must be ready to drop them. An error from begin or
// each stops the read, which returns it; so does the end of ctx, between
// blocks of the file and between batches (a decode under way is not
// interrupted).
func ReadEach[T any](ctx context.Context, path string, want Identity, decode func([]byte) (T, error), begin func(rv string, count int) error, each func([]T) error) error {
	if decode == nil || begin == nil || each == nil {
		return errors.New("snapshot: nil decode, begin or each function")
	}
	if err := stopped(ctx); err != nil {
		return err
	}
	want = want.withType(reflect.TypeFor[T]())
	dir := filepath.Dir(path)
	if filepath.Base(path) == KeyFile {
		return fmt.Errorf("snapshot: read %s: the name of the directory's key", path)
	}
	err := checkDir(dir)
	var f *os.File
	var fi fs.FileInfo
	if err == nil {
		f, fi, err = openPrivate(path)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, ErrUntrusted):
		return err // it names the directory or the file
	case err != nil:
		return fmt.Errorf("snapshot: read: %w", err)
	}
	defer f.Close()
	if err := readEach(ctx, f, fi.Size(), dir, want, decode, begin, each); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// stopped returns ctx's error, wrapped, once it has ended.
func stopped(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("snapshot: read stopped: %w", err)
	}
	return nil
}

// readEach reads a whole snapshot of size bytes from f, in dir: the prefix,
// the header, authenticated with dir's key and checked against size, then
// the objects, handed over once the trailer's MAC, computed meanwhile,
// holds.
func readEach[T any](ctx context.Context, f *os.File, size int64, dir string, want Identity, decode func([]byte) (T, error), begin func(string, int) error, each func([]T) error) error {
	if size < int64(minFileLen) {
		return corrupt("truncated: %d bytes is shorter than any snapshot", size)
	}
	r := &recordReader{br: bufio.NewReaderSize(io.LimitReader(f, size-macLen), 256<<10), remaining: size - macLen}
	h, key, hm, err := r.header(dir)
	if err != nil {
		return err
	}
	if err := mismatch(h.id, want); err != nil {
		return err
	}
	if h.count > h.size { // every record takes at least one byte
		return corrupt("%d objects cannot fit in %d bytes", h.count, h.size)
	}
	// The MAC is computed on a goroutine of its own while the records are
	// read and decoded; nothing is handed over before it holds.
	v := startVerify(ctx, f, size-macLen-int64(h.size), int64(h.size), key, hm)
	defer v.stop()
	start := func() error {
		if err := v.wait(); err != nil {
			return err
		}
		return begin(h.rv, int(h.count))
	}
	return readObjects(ctx, r, h.count, decode, v.done, start, each)
}

// decodeOne decodes b, turning a panic of decode into an error: bytes may
// be decoded before the MAC refuses them (see readObjectsParallel),
// and a decoder that chokes on them must not crash the reader.
func decodeOne[T any](decode func([]byte) (T, error), b []byte) (obj T, err error) {
	defer func() {
		switch p := recover().(type) {
		case nil:
		case error:
			err = fmt.Errorf("decode panicked: %w", p)
		default:
			err = fmt.Errorf("decode panicked: %v", p)
		}
	}()
	return decode(b)
}

// undecodable is the error for object i of count, which decode refused.
func undecodable(i, count uint64, err error) error {
	return fmt.Errorf("%w: object %d of %d: object does not decode: %w", ErrCorrupt, i, count, err)
}

// readObjects reads count records, decodes them and hands them to each in
// batches of chunkObjects, after start (which waits for the MAC, then
// calls begin) returned nil; on as many goroutines as GOMAXPROCS for a
// large snapshot (decoding dominates a read), which read and decode while
// the MAC is computed (until verified is closed). It stops before each
// batch once ctx has ended.
func readObjects[T any](ctx context.Context, r *recordReader, count uint64, decode func([]byte) (T, error), verified <-chan struct{}, start func() error, each func([]T) error) error {
	workers := runtime.GOMAXPROCS(0)
	if workers > 1 && count >= 4*chunkObjects {
		return readObjectsParallel(ctx, r, count, decode, verified, start, each, workers)
	}
	if err := start(); err != nil {
		return err
	}
	batch := make([]T, 0, min(count, chunkObjects))
	for i := range count {
		b, err := r.record()
		if err != nil {
			return fmt.Errorf("object %d of %d: %w", i, count, err)
		}
		obj, err := decodeOne(decode, b)
		if err != nil {
			return undecodable(i, count, err)
		}
		batch = append(batch, obj)
		if len(batch) == chunkObjects {
			if err := stopped(ctx); err != nil {
				return err
			}
			if err := each(batch); err != nil {
				return err
			}
			batch = make([]T, 0, min(count-i-1, chunkObjects))
		}
	}
	if len(batch) > 0 {
		if err := stopped(ctx); err != nil {
			return err
		}
		if err := each(batch); err != nil {
			return err
		}
	}
	return r.finish()
}

// finish checks that nothing follows the last record.
func (r *recordReader) finish() error {
	if r.remaining != 0 {
		return corrupt("%d unexpected bytes after the last object", r.remaining)
	}
	return nil
}

// chunkObjects is how many records a decoding goroutine takes at a time,
// and the size of the batches handed over.
const chunkObjects = 512

// chunk is consecutive records, from the first-th on, copied out of the
// reader, and what decoding them gave (once done is closed).
type chunk[T any] struct {
	first uint64
	data  []byte
	ends  []int // ends[i] is where record i ends in data
	out   []T
	err   error
	done  chan struct{}
}

func (c *chunk[T]) decode(count uint64, decode func([]byte) (T, error)) {
	defer close(c.done)
	c.out = make([]T, 0, len(c.ends))
	start := 0
	for i, end := range c.ends {
		obj, err := decodeOne(decode, c.data[start:end])
		if err != nil {
			c.err = undecodable(c.first+uint64(i), count, err)
			break
		}
		c.out = append(c.out, obj)
		start = end
	}
	c.data, c.ends = nil, nil
}

// readObjectsParallel is readObjects with a goroutine reading the file into
// chunks, workers goroutines decoding them, and this one handing them to
// each in order as they are decoded. Until the MAC is verified, this
// goroutine takes the chunks as they are read and keeps them, so reading
// and decoding go on beside the MAC (the objects decoded ahead, at
// most all of them, are what the caller would hold once they are handed
// over); after, the chunks read ahead of each are bounded, and so is the
// memory beside the objects.
func readObjectsParallel[T any](ctx context.Context, r *recordReader, count uint64, decode func([]byte) (T, error), verified <-chan struct{}, start func() error, each func([]T) error, workers int) error {
	p := &parallelRead[T]{
		ctx: ctx, r: r, count: count, decode: decode, each: each,
		jobs:    make(chan *chunk[T], workers),
		ordered: make(chan *chunk[T], 2*workers),
		spare:   make(chan []byte, 2*workers),
		stop:    make(chan struct{}),
	}
	for range workers {
		p.wg.Go(p.decodeChunks)
	}
	p.wg.Go(p.readChunks)
	defer p.close() // also when each panics: no goroutine is left behind
	ahead := p.readAhead(verified)
	if err := start(); err != nil {
		p.halt()
		return err
	}
	for i, c := range ahead {
		ahead[i] = nil // handed over: the caller's now
		if err := p.hand(c); err != nil {
			p.halt()
			return err
		}
	}
	for c := range p.ordered {
		if err := p.hand(c); err != nil {
			p.halt()
			return err
		}
	}
	return p.readErr
}

// parallelRead is one readObjectsParallel's goroutines and channels.
type parallelRead[T any] struct {
	ctx    context.Context
	r      *recordReader
	count  uint64
	decode func([]byte) (T, error)
	each   func([]T) error

	jobs    chan *chunk[T] // to the decoding goroutines
	ordered chan *chunk[T] // the chunks in file order, as read
	spare   chan []byte    // decoded chunks' buffers, for the next chunks (decode keeps no slice)
	stop    chan struct{}  // closed when the caller's goroutine stops taking chunks
	halted  bool
	readErr error // the reader's; read once ordered is closed
	wg      sync.WaitGroup
}

// decodeChunks is a decoding goroutine.
func (p *parallelRead[T]) decodeChunks() {
	for c := range p.jobs {
		buf := c.data
		c.decode(p.count, p.decode)
		select {
		case p.spare <- buf[:0]:
		default:
		}
	}
}

// readChunks is the reading goroutine: it cuts the file into chunks, each
// sent to ordered and then to a decoding goroutine.
func (p *parallelRead[T]) readChunks() {
	defer close(p.jobs)
	defer close(p.ordered)
	size := 0 // the last chunk's bytes: the next is sized as it was, to copy each record once
	for i := uint64(0); i < p.count; {
		select {
		case <-p.stop:
			return
		default:
		}
		c := &chunk[T]{first: i, ends: make([]int, 0, chunkObjects), done: make(chan struct{})}
		select {
		case c.data = <-p.spare:
		default:
			c.data = make([]byte, 0, size+size/8)
		}
		for ; len(c.ends) < chunkObjects && i < p.count; i++ {
			b, err := p.r.record()
			if err != nil {
				p.readErr = fmt.Errorf("object %d of %d: %w", i, p.count, err)
				return
			}
			c.data = append(c.data, b...)
			c.ends = append(c.ends, len(c.data))
		}
		size = len(c.data)
		select {
		case p.ordered <- c:
		case <-p.stop:
			return
		}
		p.jobs <- c
	}
	p.readErr = p.r.finish()
}

// readAhead takes the chunks as they are read until the MAC is verified
// (or ctx ends: start then returns its error, from the verifier) or the
// file is read, and returns them.
func (p *parallelRead[T]) readAhead(verified <-chan struct{}) []*chunk[T] {
	var ahead []*chunk[T]
	for {
		select {
		case c, ok := <-p.ordered:
			if !ok {
				return ahead
			}
			ahead = append(ahead, c)
		case <-verified:
			return ahead
		case <-p.ctx.Done():
			return ahead
		}
	}
}

// hand gives c's objects to each once they are decoded.
func (p *parallelRead[T]) hand(c *chunk[T]) error {
	<-c.done
	if err := stopped(p.ctx); err != nil {
		return err
	}
	if c.err != nil {
		return c.err
	}
	return p.each(c.out)
}

// halt tells the reading goroutine to stop.
func (p *parallelRead[T]) halt() {
	if !p.halted {
		p.halted = true
		close(p.stop)
	}
}

// close halts the reading, drains what it sent and waits for every
// goroutine.
func (p *parallelRead[T]) close() {
	p.halt()
	for range p.ordered {
	}
	p.wg.Wait()
}

// recordReader reads a file up to its trailer, never past it.
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

// header reads and checks the prefix and the header, authenticated with
// dir's key, and checks that the records take what the file has left. It
// returns the header, the key and the header's MAC (which the trailer's
// covers).
func (r *recordReader) header(dir string) (header, []byte, []byte, error) {
	p, err := r.read(int64(prefixLen), "prefix")
	if err != nil {
		return header{}, nil, nil, err
	}
	b := bytes.Clone(p)
	n, err := checkPrefix(b, r.remaining-macLen)
	if err != nil {
		return header{}, nil, nil, err
	}
	key, err := readKey(dir)
	if errors.Is(err, fs.ErrNotExist) {
		err = untrusted("no key (%s) in the directory to authenticate it: it was not written there by Write", KeyFile)
	}
	if err != nil {
		return header{}, nil, nil, err
	}
	hb, err := r.read(int64(n+macLen), "header")
	if err != nil {
		return header{}, nil, nil, err
	}
	b = append(b, hb[:n]...)
	hm := bytes.Clone(hb[n:])
	if !hmac.Equal(hm, headerMAC(key, b)) {
		return header{}, nil, nil, corrupt("header MAC mismatch: the file was damaged, or written without this directory's key")
	}
	h, err := decodeHeader(b[prefixLen:])
	if err != nil {
		return header{}, nil, nil, err
	}
	if h.size != uint64(r.remaining) {
		return header{}, nil, nil, corrupt("size mismatch: the header says %d bytes of records, the file holds %d", h.size, r.remaining)
	}
	return h, key, hm, nil
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
