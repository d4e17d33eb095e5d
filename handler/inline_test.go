package handler_test

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// ctrlkit's own queues never block: renaming NeverBlocks would silently
// turn the informer's inline path off, so it is checked at compile time.
var (
	_ handler.NonBlockingAdder = (*workqueue.Queue[string])(nil)
	_ handler.NonBlockingAdder = (*controller.Controller[string])(nil)
)

// plainAdder is an Adder that does not declare it never blocks.
type plainAdder struct{ keys []string }

func (p *plainAdder) Add(k string) { p.keys = append(p.keys, k) }

func TestEnqueueKey_isInlineOnlyIntoANonBlockingAdder(t *testing.T) {
	q, err := workqueue.New[string](workqueue.Options[string]{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.ShutDown()
	for _, c := range []struct {
		name   string
		q      handler.Adder[string]
		inline bool
	}{
		{"workqueue.Queue", q, true},
		{"an Adder of the user's", &plainAdder{}, false},
	} {
		h, ok := handler.EnqueueKey[*corev1.ConfigMap](c.q, nil).(handler.InlineKeyHandler)
		if !ok {
			t.Fatalf("%s: EnqueueKey's handler is not an InlineKeyHandler", c.name)
		}
		if h.Inline() != c.inline {
			t.Errorf("%s: Inline() = %v, want %v", c.name, h.Inline(), c.inline)
		}
	}
}

// batchAdder records AddBatch and AddWithPriority calls.
type batchAdder struct{ calls []string }

func (b *batchAdder) Add(k string) { b.calls = append(b.calls, "add "+k) }
func (b *batchAdder) AddWithPriority(k string, p int) {
	b.calls = append(b.calls, fmt.Sprintf("add %s at %d", k, p))
}
func (b *batchAdder) AddBatch(keys []string, p int) {
	b.calls = append(b.calls, fmt.Sprintf("batch %q at %d", keys, p))
}

var (
	_ handler.BatchAdder[string] = (*workqueue.Queue[string])(nil)
	_ handler.BatchAdder[string] = (*controller.Controller[string])(nil)
)

func TestEnqueueKey_OnKeysAddsABatchAtLowPriorityForBackgroundWork(t *testing.T) {
	for _, c := range []struct {
		name string
		q    interface {
			handler.Adder[string]
			calls() []string
		}
		want []string
	}{
		{"a BatchAdder", &recordingBatch{}, []string{`batch ["a" "b"] at 0`, fmt.Sprintf(`batch ["c"] at %d`, workqueue.LowPriority)}},
		{"an Adder of the user's", &recordingPlain{}, []string{"add a", "add b", "add c"}},
	} {
		h, ok := handler.EnqueueKey[*corev1.ConfigMap](c.q, nil).(handler.BatchKeyHandler)
		if !ok {
			t.Fatalf("%s: EnqueueKey's handler is not a BatchKeyHandler", c.name)
		}
		h.OnKeys([]string{"a", "b"}, false)
		h.OnKeys([]string{"c"}, true)
		if got := c.q.calls(); !slices.Equal(got, c.want) {
			t.Errorf("%s: calls %q, want %q", c.name, got, c.want)
		}
	}
}

type recordingBatch struct{ batchAdder }

func (r *recordingBatch) calls() []string { return r.batchAdder.calls }

type recordingPlain struct{ plainAdder }

func (r *recordingPlain) calls() []string {
	var out []string
	for _, k := range r.keys {
		out = append(out, "add "+k)
	}
	return out
}
