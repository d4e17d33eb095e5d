package informer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// pagedLW serves n ConfigMaps one per page. Before serving page p it waits
// until the informer's cache holds the object of page p-1: a relist held
// whole until its last page would never get there.
type pagedLW struct {
	n      int
	cached func(name string) bool
	failed chan string
}

func (l *pagedLW) List(ctx context.Context, opts metav1.ListOptions) (reflector.List[*corev1.ConfigMap], error) {
	p := 0
	if opts.Continue != "" {
		p, _ = strconv.Atoi(opts.Continue)
	}
	if p > 0 {
		prev := fmt.Sprintf("cm-%d", p-1)
		deadline := time.Now().Add(wait)
		for !l.cached(prev) {
			if time.Now().After(deadline) {
				l.failed <- fmt.Sprintf("page %d was requested but %s, from page %d, is not cached after %s", p, prev, p-1, wait)
				return reflector.List[*corev1.ConfigMap]{}, ctx.Err()
			}
			select {
			case <-ctx.Done():
				return reflector.List[*corev1.ConfigMap]{}, ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	}
	out := reflector.List[*corev1.ConfigMap]{ResourceVersion: strconv.Itoa(l.n)}
	out.Items = []*corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("cm-%d", p), ResourceVersion: strconv.Itoa(p + 1)}}}
	if p+1 < l.n {
		out.Continue = strconv.Itoa(p + 1)
	}
	return out, nil
}

func (l *pagedLW) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return watch.NewFake(), nil
}

func TestInformer_appliesAListPageByPageWhileItIsStillArriving(t *testing.T) {
	leakcheck.Check(t)
	lw := &pagedLW{n: 6, failed: make(chan string, 1)}
	inf := newInformer(t, lw, informer.Options[*corev1.ConfigMap]{FactoryOptions: informer.FactoryOptions{Reflector: reflector.Options{PageSize: 1}}})
	lw.cached = func(name string) bool {
		_, ok := inf.Reader().Get(object.ObjectName{Namespace: "ns", Name: name})
		return ok
	}
	run(t, inf)
	waitFor(t, wait, "sync", func() bool {
		select {
		case msg := <-lw.failed:
			t.Fatal(msg)
		default:
		}
		return inf.HasSynced()
	})
	if n := inf.Reader().Len(); n != lw.n {
		t.Errorf("cache holds %d objects, want %d", n, lw.n)
	}
}

// keyRecorder is a handler.Enqueuer that records the key of each event
// it is given and whether it is background work.
type keyRecorder struct {
	handler.Funcs[*corev1.ConfigMap] // never called: Enqueue replaces them
	mu                               sync.Mutex
	got                              []string
}

func (k *keyRecorder) ExpectKeys(int) {}

func (k *keyRecorder) Enqueue(events []handler.Event[*corev1.ConfigMap]) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range events {
		k.got = append(k.got, fmt.Sprintf("%s background=%v", events[i].Key, events[i].Background()))
	}
}

func (k *keyRecorder) calls() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.got)
}

func TestInformer_anEnqueuerGetsTheKeyAndWhetherTheChangeIsBackgroundWork(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a")
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{})
	k := &keyRecorder{Funcs: handler.Funcs[*corev1.ConfigMap]{
		AddFunc: func(*corev1.ConfigMap, bool) { t.Error("OnAdd called on an Enqueuer") }}}
	reg, err := inf.AddEventHandler(k, informer.HandlerOptions{Name: "keys", ResyncPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	waitFor(t, wait, "sync", reg.HasSynced)
	srv.update("a", map[string]string{"k": "v"})
	waitFor(t, wait, "the update", func() bool { return len(k.calls()) == 2 })
	want := []string{"ns/a background=true", "ns/a background=false"}
	if got := k.calls(); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestInformer_relistOnRequestReflectsANewSelectionBeforeReturning(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a1", "a2", "b1", "b2")
	srv.only = func(n string) bool { return strings.HasPrefix(n, "a") }
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{})
	m := newMirror()
	reg := register(t, inf, m, "h", 0)
	run(t, inf)
	// The handler's sync, not only the informer's: an initial add still
	// undelivered when the relist deletes its object coalesces with the
	// delete into nothing, and the delete this test looks for is not heard.
	waitFor(t, wait, "sync", reg.HasSynced)

	srv.mu.Lock()
	srv.only = func(n string) bool { return n != "a2" }
	srv.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	if err := inf.Relist(ctx, errors.New("selection changed")); err != nil {
		t.Fatalf("Relist: %v", err)
	}
	keys := cachedKeys(inf) // read at once: Relist returned only after the cache changed
	slices.Sort(keys)
	if want := []string{"ns/a1", "ns/b1", "ns/b2"}; !slices.Equal(keys, want) {
		t.Fatalf("cache right after Relist = %q, want %q", keys, want)
	}
	srv.create("b3", nil)
	srv.create("a2x", nil)
	waitFor(t, wait, "events under the new selection", func() bool {
		_, ok := inf.Reader().Get(object.ObjectName{Namespace: "ns", Name: "b3"})
		_, ok2 := inf.Reader().Get(object.ObjectName{Namespace: "ns", Name: "a2x"})
		return ok && ok2
	})
	calls := strings.Join(m.callList(), "\n")
	for _, want := range []string{"add b1@", "add b2@", "delete ns/a2@2 unknown=true"} {
		if !strings.Contains(calls, want) {
			t.Errorf("handler calls lack %q:\n%s", want, calls)
		}
	}
	if strings.Count(calls, "add a1@") != 1 {
		t.Errorf("a1, unchanged, was notified again by the relist:\n%s", calls)
	}
}

func TestInformer_relistFailsWhenItsContextEndsOrTheInformerStopped(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a")
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := inf.Relist(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Relist with an ended context (informer not running) = %v, want context.Canceled", err)
	}
}

func TestInformer_relistOnRequestReturnsWhenATransformAbandonsTheRelist(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a", "b")
	var refuse atomic.Bool
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{Transform: func(cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
		if refuse.Load() && cm.Name == "b" {
			return nil, errors.New("cannot transform b")
		}
		return cm, nil
	}})
	run(t, inf)
	waitFor(t, wait, "sync", inf.HasSynced)

	refuse.Store(true)
	srv.mu.Lock()
	srv.only = func(n string) bool { return n != "a" }
	srv.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	// The relist loses b to the transform: its end is abandoned (nothing is
	// deleted for it), and Relist must still learn that it ended.
	if err := inf.Relist(ctx, errors.New("selection changed")); err != nil {
		t.Fatalf("Relist with an abandoned relist: %v", err)
	}
	keys := cachedKeys(inf)
	slices.Sort(keys)
	if want := []string{"ns/a", "ns/b"}; !slices.Equal(keys, want) {
		t.Errorf("cache after the abandoned relist = %q, want %q (nothing deleted)", keys, want)
	}
}

// inlineRecorder is a keyRecorder that panics, after recording them, on
// events of the key panicOn.
type inlineRecorder struct {
	keyRecorder
	panicOn string
}

func (r *inlineRecorder) Enqueue(events []handler.Event[*corev1.ConfigMap]) {
	r.keyRecorder.Enqueue(events)
	for i := range events {
		if events[i].Key == r.panicOn {
			panic("inline handler failed")
		}
	}
}

func TestInformer_anEnqueuerHearsEveryKeyInOrderAndItsPanicsAreCounted(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a")
	reg := prometheus.NewRegistry()
	inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{FactoryOptions: informer.FactoryOptions{Telemetry: telemetry.Telemetry{Registerer: reg}}})
	k := &inlineRecorder{panicOn: "ns/b"}
	r, err := inf.AddEventHandler(k, informer.HandlerOptions{Name: "inline"})
	if err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	waitFor(t, wait, "sync", r.HasSynced)
	for i, change := range []func(){ // one at a time: the FIFO would merge changes of one key
		func() { srv.create("b", nil) },
		func() { srv.update("a", map[string]string{"k": "v"}) },
		func() { srv.update("b", map[string]string{"k": "v"}) },
	} {
		change()
		waitFor(t, wait, fmt.Sprintf("change %d", i+1), func() bool { return len(k.calls()) == i+2 })
	}
	want := []string{"ns/a background=true", "ns/b background=false", "ns/a background=false", "ns/b background=false"}
	if got := k.calls(); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if n := counter(t, reg, "ctrlkit_informer_handler_panics_total", "inline"); n != 2 {
		t.Errorf("%v panics counted, want 2", n)
	}
	late := &inlineRecorder{}
	if _, err := inf.AddEventHandler(late, informer.HandlerOptions{Name: "late"}); err != nil {
		t.Fatal(err)
	}
	got := late.calls() // an inline handler added late is given the cache before AddEventHandler returns
	slices.Sort(got)
	if want := []string{"ns/a background=true", "ns/b background=true"}; !slices.Equal(got, want) {
		t.Errorf("late handler got %q, want %q", got, want)
	}
}
