package handler_test

import (
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
