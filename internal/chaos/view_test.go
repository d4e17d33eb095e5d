package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
)

// view is a handler that keeps its own view of the objects from the events
// it hears, remembers every name it has seen and every name it has seen
// deleted, and records violations of the handler contract (an add of a name
// it holds, an update or delete of a name it does not hold, an update whose
// old object is not the one it holds).
//
// The informer calls a handler from one goroutine, so delay, panicRate and
// rnd are used by that goroutine only; mu guards everything else, which the
// test reads.
type view struct {
	name      string
	delay     time.Duration // slept after every event: a slow handler
	panicRate float64       // share of events after which the handler panics
	rnd       *rand.Rand

	mu         sync.Mutex
	objs       map[string]string // name -> resource version
	seen       map[string]bool   // every name ever added
	deleted    map[string]bool   // every name seen deleted, by a live event or a tombstone
	events     int
	tombstones int // deletes with FinalStateUnknown
	panics     int
	errs       []string
}

func newView(name string, delay time.Duration, panicRate float64, seed uint64) *view {
	return &view{name: name, delay: delay, panicRate: panicRate, rnd: rand.New(rand.NewPCG(seed, 0x7669_6577)),
		objs: map[string]string{}, seen: map[string]bool{}, deleted: map[string]bool{}}
}

// apply runs f under the lock, then acts slow or panics as configured. The
// panic comes after the event is applied: what is tested is that the
// informer goes on notifying a handler that panicked, not what a handler
// that loses its own state does.
func (v *view) apply(f func()) {
	v.mu.Lock()
	v.events++
	f()
	panics := v.panicRate > 0 && v.rnd.Float64() < v.panicRate
	if panics {
		v.panics++
	}
	v.mu.Unlock()
	if v.delay > 0 {
		time.Sleep(v.delay) // simulated work, not synchronisation
	}
	if panics {
		panic("chaos: injected handler panic")
	}
}

func (v *view) violation(format string, args ...any) {
	v.errs = append(v.errs, fmt.Sprintf(format, args...))
}

func (v *view) OnAdd(obj *corev1.ConfigMap, _ bool) {
	v.apply(func() {
		if rv, ok := v.objs[obj.Name]; ok {
			v.violation("add of %s@%s, already held at %s", obj.Name, obj.ResourceVersion, rv)
		}
		v.objs[obj.Name] = obj.ResourceVersion
		v.seen[obj.Name] = true
	})
}

func (v *view) OnUpdate(old, new *corev1.ConfigMap) {
	v.apply(func() {
		if rv, ok := v.objs[new.Name]; !ok || rv != old.ResourceVersion {
			v.violation("update of %s from %s, held %q (%v)", new.Name, old.ResourceVersion, rv, ok)
		}
		v.objs[new.Name] = new.ResourceVersion
	})
}

func (v *view) OnDelete(d object.Deleted[*corev1.ConfigMap]) {
	v.apply(func() {
		if err := d.Name.Validate(); err != nil {
			v.violation("delete with a bad name %q: %v", d.Name, err)
			return
		}
		name := d.Name.Name
		if _, ok := v.objs[name]; !ok {
			v.violation("delete of %s, not held", name)
		}
		if d.FinalStateUnknown {
			v.tombstones++
		}
		delete(v.objs, name)
		v.deleted[name] = true
	})
}

// state returns copies of the view, the names seen and the names seen deleted.
func (v *view) state() (objs map[string]string, seen, deleted map[string]bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.objs), maps.Clone(v.seen), maps.Clone(v.deleted)
}

// deleted is what the reconciler records for a key missing from the cache.
const deleted = "deleted"

var errInjected = errors.New("chaos: injected reconcile failure")

// recorder is the controller's reconciler: it reads the informer's cache and
// records, per key, the resource version it last saw there (or deleted).
// It fails failRate of its reconciles before reading anything, so the key is
// right only if the controller retries it. mu guards every field but cache.
type recorder struct {
	cache    store.Reader[*corev1.ConfigMap]
	failRate float64

	mu         sync.Mutex
	rnd        *rand.Rand
	last       map[string]string // key -> resource version or deleted
	reconciles int
	failures   int
}

func newRecorder(cache store.Reader[*corev1.ConfigMap], failRate float64, seed uint64) *recorder {
	return &recorder{cache: cache, failRate: failRate, rnd: rand.New(rand.NewPCG(seed, 0x7265_63)), last: map[string]string{}}
}

func (r *recorder) Reconcile(_ context.Context, key string) (controller.Result, error) {
	r.mu.Lock()
	r.reconciles++
	fail := r.rnd.Float64() < r.failRate
	if fail {
		r.failures++
	}
	r.mu.Unlock()
	if fail {
		return controller.Result{}, errInjected
	}
	// Two workers never hold the same key, so reading outside the lock
	// cannot reorder two records of one key.
	rv := deleted
	if n, err := object.ParseObjectName(key); err != nil {
		return controller.Result{}, controller.Terminal(err)
	} else if obj, ok := r.cache.Get(n); ok {
		rv = obj.ResourceVersion
	}
	r.mu.Lock()
	r.last[key] = rv
	r.mu.Unlock()
	return controller.Result{}, nil
}

// seen returns a copy of the last resource version seen per key.
func (r *recorder) seen() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.last)
}

func (v *view) violationList() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.errs)
}

func (v *view) panicCount() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.panics
}
