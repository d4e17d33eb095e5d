package snapshot

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"os"
)

// verifier checks a file's trailer on a goroutine of its own.
type verifier struct {
	done   chan struct{} // closed once err is set
	err    error
	cancel context.CancelFunc
}

// startVerify starts checking the trailer after the n bytes of records at
// off in f, under key, with the header's MAC hm; until ctx ends.
func startVerify(ctx context.Context, f *os.File, off, n int64, key, hm []byte) *verifier {
	ctx, cancel := context.WithCancel(ctx)
	v := &verifier{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(v.done)
		v.err = verify(ctx, f, off, n, key, hm)
	}()
	return v
}

// wait returns the MAC's verdict once it is known.
func (v *verifier) wait() error {
	<-v.done
	return v.err
}

// stop ends the check early, if it is still under way, and waits for its
// goroutine.
func (v *verifier) stop() {
	v.cancel()
	<-v.done
}

// verify checks that the trailer, after the n bytes of records at off in
// f, is their MAC under key, followed by the header's MAC hm. It stops with
// ctx's error when ctx ends first. It reads at offsets, leaving f's own
// offset where it is.
func verify(ctx context.Context, f *os.File, off, n int64, key, hm []byte) error {
	sum := newRecordsMAC(key)
	buf := make([]byte, min(n, 256<<10))
	for end := off + n; off < end; {
		if err := stopped(ctx); err != nil {
			return err
		}
		k, err := f.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
		sum.Write(buf[:k])
		off += int64(k)
		if err != nil && !(errors.Is(err, io.EOF) && off == end) {
			return fmt.Errorf("snapshot: read: %w", err)
		}
	}
	sum.Write(hm)
	var trailer [macLen]byte
	if _, err := f.ReadAt(trailer[:], off); err != nil {
		return fmt.Errorf("snapshot: read the MAC: %w", err)
	}
	if !hmac.Equal(trailer[:], sum.Sum(nil)) {
		return corrupt("MAC mismatch: the file was damaged, or written without this directory's key")
	}
	return nil
}
