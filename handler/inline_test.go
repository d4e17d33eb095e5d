package handler_test

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/object"
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

func TestEnqueueKey_isAnEnqueuerOnlyIntoANonBlockingAdder(t *testing.T) {
	q, err := workqueue.New[string](workqueue.Options[string]{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.ShutDown()
	for _, c := range []struct {
		name     string
		q        handler.Adder[string]
		enqueuer bool
	}{
		{"workqueue.Queue", q, true},
		{"an Adder of the user's", &plainAdder{}, false},
	} {
		_, ok := handler.EnqueueKey[*corev1.ConfigMap](c.q, nil).(handler.Enqueuer[*corev1.ConfigMap])
		if ok != c.enqueuer {
			t.Errorf("%s: EnqueueKey's handler is an Enqueuer: %v, want %v", c.name, ok, c.enqueuer)
		}
	}
}

// batchAdder records AddBatch and AddWithPriority calls; it never blocks.
type batchAdder struct{ calls []string }

func (b *batchAdder) Add(k string) { b.calls = append(b.calls, "add "+k) }
func (b *batchAdder) AddWithPriority(k string, p int) {
	b.calls = append(b.calls, fmt.Sprintf("add %s at %d", k, p))
}
func (b *batchAdder) AddBatch(keys []string, p int) {
	b.calls = append(b.calls, fmt.Sprintf("batch %q at %d", keys, p))
}
func (b *batchAdder) NeverBlocks() {}

var (
	_ handler.BatchAdder[string] = (*workqueue.Queue[string])(nil)
	_ handler.BatchAdder[string] = (*controller.Controller[string])(nil)
)

func TestEnqueueKey_EnqueueAddsRunsOfEqualBackgroundInBatches(t *testing.T) {
	add := func(name string, initial bool) handler.Event[*corev1.ConfigMap] {
		return handler.Event[*corev1.ConfigMap]{Type: handler.AddEvent, Key: "ns/" + name, Obj: cm("ns", name, "1", nil), Initial: initial}
	}
	resync := cm("ns", "d", "2", nil)
	events := []handler.Event[*corev1.ConfigMap]{add("a", false), add("b", false), add("c", true),
		{Type: handler.UpdateEvent, Key: "ns/d", Old: resync, Obj: resync},
		{Type: handler.DeleteEvent, Key: "ns/e", Deleted: object.Deleted[*corev1.ConfigMap]{Name: object.ObjectName{Namespace: "ns", Name: "e"}}}}
	for _, c := range []struct {
		name string
		q    interface {
			handler.Adder[string]
			calls() []string
		}
		want []string
	}{
		{"a BatchAdder", &recordingBatch{}, []string{`batch ["ns/a" "ns/b"] at 0`,
			fmt.Sprintf(`batch ["ns/c" "ns/d"] at %d`, workqueue.LowPriority), `batch ["ns/e"] at 0`}},
		{"an Adder of the user's that never blocks", &recordingPlain{}, []string{"add ns/a", "add ns/b", "add ns/c", "add ns/d", "add ns/e"}},
	} {
		h, ok := handler.EnqueueKey[*corev1.ConfigMap](c.q, nil).(handler.Enqueuer[*corev1.ConfigMap])
		if !ok {
			t.Fatalf("%s: EnqueueKey's handler is not an Enqueuer", c.name)
		}
		h.Enqueue(events)
		if got := c.q.calls(); !slices.Equal(got, c.want) {
			t.Errorf("%s: calls %q, want %q", c.name, got, c.want)
		}
	}
}

// countingBatch counts the keys AddBatch is given; it never blocks.
type countingBatch struct{ n int }

func (c *countingBatch) Add(string)                    { c.n++ }
func (c *countingBatch) AddBatch(keys []string, _ int) { c.n += len(keys) }
func (c *countingBatch) NeverBlocks()                  {}

func TestEnqueueKey_EnqueueAllocatesNothing(t *testing.T) {
	q := &countingBatch{}
	h := handler.EnqueueKey[*corev1.ConfigMap](q, nil).(handler.Enqueuer[*corev1.ConfigMap])
	var events []handler.Event[*corev1.ConfigMap]
	for n := range 64 {
		name := fmt.Sprint("o", n)
		events = append(events, handler.Event[*corev1.ConfigMap]{Type: handler.UpdateEvent, Key: "ns/" + name,
			Old: cm("ns", name, "1", nil), Obj: cm("ns", name, "2", nil)})
	}
	batch := func() { h.Enqueue(events) }
	batch() // the handler's buffer grows once
	if a := testing.AllocsPerRun(100, batch); a > 0 {
		t.Errorf("%v allocations per batch of 64 events through Enqueue, want 0", a)
	}
	if q.n != 102*len(events) {
		t.Errorf("%d keys added, want %d", q.n, 102*len(events))
	}
}

type recordingBatch struct{ batchAdder }

func (r *recordingBatch) calls() []string { return r.batchAdder.calls }

// recordingPlain is a plainAdder that declares it never blocks.
type recordingPlain struct{ plainAdder }

func (r *recordingPlain) NeverBlocks() {}

func (r *recordingPlain) calls() []string {
	var out []string
	for _, k := range r.keys {
		out = append(out, "add "+k)
	}
	return out
}

func TestEvent_BackgroundTrustsAnInformersResyncAndComparesVersionsOfAHandBuiltEvent(t *testing.T) {
	v1, alsoV1, v2 := cm("ns", "a", "1", nil), cm("ns", "a", "1", nil), cm("ns", "a", "2", nil)
	for _, c := range []struct {
		name string
		ev   handler.Event[*corev1.ConfigMap]
		want bool
	}{
		{"an informer's update", handler.Event[*corev1.ConfigMap]{Type: handler.UpdateEvent, Key: "ns/a", Old: v1, Obj: v2}, false},
		{"an informer's resync (one object)", handler.Event[*corev1.ConfigMap]{Type: handler.UpdateEvent, Key: "ns/a", Old: v1, Obj: v1, Resync: true}, true},
		{"an informer's relist at the same version", handler.Event[*corev1.ConfigMap]{Type: handler.UpdateEvent, Key: "ns/a", Old: v1, Obj: alsoV1, Resync: true}, true},
		{"an informer's update it says is new (versions not read)", handler.Event[*corev1.ConfigMap]{Type: handler.UpdateEvent, Key: "ns/a", Old: v1, Obj: alsoV1}, false},
		{"a hand-built update at the same version", handler.Event[*corev1.ConfigMap]{Type: handler.UpdateEvent, Old: v1, Obj: alsoV1}, true},
		{"a hand-built update to a new version", handler.Event[*corev1.ConfigMap]{Type: handler.UpdateEvent, Old: v1, Obj: v2}, false},
		{"an initial add", handler.Event[*corev1.ConfigMap]{Type: handler.AddEvent, Key: "ns/a", Obj: v1, Initial: true}, true},
		{"a delete", handler.Event[*corev1.ConfigMap]{Type: handler.DeleteEvent, Key: "ns/a"}, false},
	} {
		if got := c.ev.Background(); got != c.want {
			t.Errorf("%s: Background() = %v, want %v", c.name, got, c.want)
		}
	}
}
