package snapshot

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

// TestReadObjectsParallel_decodesBeforeTheVerdictAndHandsOverOnlyAfter holds
// the MAC's verdict back until every object has decoded: nothing is
// handed over before it; after a good verdict every object is, in order,
// and after a bad one none is and every goroutine ends.
func TestReadObjectsParallel_decodesBeforeTheVerdictAndHandsOverOnlyAfter(t *testing.T) {
	leakcheck.Check(t)
	many := make([]row, 5000)
	for i := range many {
		many[i] = row{Name: fmt.Sprint("row-", i)}
	}
	path := filepath.Join(t.TempDir(), "rows.snap")
	enc, dec := JSON[row]()
	if err := Write(path, testIdentity(), "7", many, enc); err != nil {
		t.Fatal(err)
	}
	for _, good := range []bool{true, false} {
		t.Run(fmt.Sprint("verdict good: ", good), func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			bodyLen := st.Size() - macLen
			r := &recordReader{br: bufio.NewReader(io.LimitReader(f, bodyLen)), remaining: bodyLen}
			h, _, _, err := r.header(filepath.Dir(path))
			if err != nil {
				t.Fatal(err)
			}
			var decoded, handed atomic.Int64
			var started atomic.Bool
			all := make(chan struct{})
			decode := func(b []byte) (row, error) {
				if decoded.Add(1) == int64(h.count) {
					close(all)
				}
				return dec(b)
			}
			bad := errors.New("MAC mismatch")
			verified := make(chan struct{})
			start := func() error { // as readEach's: the verdict, then begin
				<-verified
				started.Store(true)
				if !good {
					return bad
				}
				return nil
			}
			var got []row
			each := func(b []row) error {
				if !started.Load() {
					t.Error("a batch was handed over before the verdict")
				}
				handed.Add(int64(len(b)))
				got = append(got, b...)
				return nil
			}
			done := make(chan error, 1)
			go func() { done <- readObjectsParallel(t.Context(), r, h.count, decode, verified, start, each, 2) }()
			<-all // every object decoded while the verdict is held back
			if handed.Load() != 0 {
				t.Fatalf("before the verdict: %d objects handed over; want none", handed.Load())
			}
			close(verified)
			err = <-done
			switch {
			case good && (err != nil || !slices.Equal(got, many)):
				t.Fatalf("after a good verdict: %v, %d objects (in order: %v)", err, len(got), slices.Equal(got, many))
			case !good && (!errors.Is(err, bad) || handed.Load() != 0):
				t.Fatalf("after a bad verdict: %v, %d objects handed over; want the verdict's error and none", err, handed.Load())
			}
		})
	}
}
