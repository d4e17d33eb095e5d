package workqueue

import (
	"slices"
	"testing"
)

// model is the naive reference for FuzzQueue: a slice scanned linearly and
// two sets, written for obviousness rather than speed.
type model struct {
	queued     []byte        // in hand-out order
	processing map[byte]bool // handed out, not done
	readded    map[byte]bool // added while processing
	shutdown   bool
}

func (m *model) add(k byte) {
	switch {
	case m.shutdown, slices.Contains(m.queued, k), m.readded[k]:
	case m.processing[k]:
		m.readded[k] = true
	default:
		m.queued = append(m.queued, k)
	}
}

func (m *model) done(k byte) {
	if !m.processing[k] {
		return
	}
	delete(m.processing, k)
	if m.readded[k] {
		delete(m.readded, k)
		m.queued = append(m.queued, k)
	}
}

// FuzzQueue decodes each pair of bytes into an operation on a Queue and on
// the model, and fails when they disagree or an invariant breaks. Get is
// only called when it cannot block.
func FuzzQueue(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 0, 2, 1, 0, 2, 1, 0, 1, 2, 1})
	f.Add([]byte{0, 1, 1, 0, 0, 1, 2, 1, 1, 0, 2, 1})
	f.Add([]byte{0, 3, 0, 4, 3, 0, 1, 0, 1, 0, 1, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		q, err := New(Options[byte]{})
		if err != nil {
			t.Fatal(err)
		}
		defer q.ShutDown()
		if len(ops)%2 == 1 { // odd lengths also check the metrics' time stamps
			q.core = newCore[byte](true)
		}
		m := &model{processing: map[byte]bool{}, readded: map[byte]bool{}}
		for i := 0; i+1 < len(ops); i += 2 {
			applyOp(t, q, m, ops[i]%5, ops[i+1]%8)
			if err := q.core.checkInvariants(); err != nil {
				t.Fatalf("op %d: %v", i/2, err)
			}
			if got, want := q.Len(), len(m.queued); got != want {
				t.Fatalf("op %d: Len() = %d, model has %d", i/2, got, want)
			}
			if got := q.ShuttingDown(); got != m.shutdown {
				t.Fatalf("op %d: ShuttingDown() = %v, model %v", i/2, got, m.shutdown)
			}
		}
	})
}

// applyOp applies op (0 add, 1 get, 2 done, 3 shut down, 4 done of the
// smallest key being processed) with key k to both.
func applyOp(t *testing.T, q *Queue[byte], m *model, op, k byte) {
	t.Helper()
	switch op {
	case 0:
		q.Add(k)
		m.add(k)
	case 1:
		stepGet(t, q, m)
	case 2:
		q.Done(k)
		m.done(k)
	case 3:
		q.ShutDown()
		m.shutdown = true
	case 4:
		for pk := range byte(8) {
			if m.processing[pk] {
				q.Done(pk)
				m.done(pk)
				break
			}
		}
	}
}

func stepGet(t *testing.T, q *Queue[byte], m *model) {
	t.Helper()
	if len(m.queued) == 0 && !m.shutdown {
		return // Get would block
	}
	got, shutdown := q.Get()
	if len(m.queued) == 0 {
		if !shutdown {
			t.Fatalf("Get() = %d, false; model is shut down and empty", got)
		}
		return
	}
	want := m.queued[0]
	m.queued = m.queued[1:]
	m.processing[want] = true
	if got != want || shutdown {
		t.Fatalf("Get() = %d, %v; model hands out %d", got, shutdown, want)
	}
}
