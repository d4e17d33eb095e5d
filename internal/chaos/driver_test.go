package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/ctrlkit/ctrlkit/apiserver"
)

// driver makes random creates, updates and deletes on a space of names with
// concurrent writers, straight to the server. Writers share the names, so
// "already exists" and "not found" answers are part of the workload; they are
// counted and ignored. mu guards counts and deleted.
type driver struct {
	cms     typedcorev1.ConfigMapInterface
	names   int
	writers int
	seed    uint64
	ops     atomic.Int64 // requests the API server answered

	mu      sync.Mutex
	counts  map[string]int  // "create ok", "delete not found", "update unavailable", ...
	deleted map[string]bool // names deleted at least once
}

func newDriver(cms typedcorev1.ConfigMapInterface, names, writers int, seed uint64) *driver {
	return &driver{cms: cms, names: names, writers: writers, seed: seed, counts: map[string]int{}, deleted: map[string]bool{}}
}

// run writes until ctx ends and returns once every writer has stopped.
// Requests use the test's context, so that no request is cut off half way
// by the end of driving and every successful delete is known.
func (d *driver) run(ctx context.Context, t *testing.T) {
	var wg sync.WaitGroup
	for g := range d.writers {
		wg.Go(func() { d.write(ctx, t.Context(), rand.New(rand.NewPCG(d.seed, uint64(g)+1))) })
	}
	wg.Wait()
}

func (d *driver) write(ctx, reqCtx context.Context, rnd *rand.Rand) {
	for ctx.Err() == nil {
		name := fmt.Sprintf("cm-%04d", rnd.IntN(d.names))
		var kind string
		var err error
		switch r := rnd.IntN(10); {
		case r < 4:
			kind = "create"
			_, err = d.cms.Create(reqCtx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		case r < 8:
			kind = "update" // unconditional: no resource version given
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": strconv.FormatUint(rnd.Uint64(), 36)}}
			_, err = d.cms.Update(reqCtx, cm, metav1.UpdateOptions{})
		default:
			kind = "delete"
			err = d.cms.Delete(reqCtx, name, metav1.DeleteOptions{})
		}
		result := outcome(err)
		d.record(kind, result, name)
		if result == "unavailable" { // the server is restarting: back off a little
			pause(ctx, 50*time.Millisecond)
		}
	}
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsAlreadyExists(err):
		return "exists"
	case apierrors.IsNotFound(err):
		return "not found"
	case apierrors.IsConflict(err):
		return "conflict"
	default:
		return "unavailable"
	}
}

func (d *driver) record(kind, result, name string) {
	if result != "unavailable" {
		d.ops.Add(1)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counts[kind+" "+result]++
	if kind == "delete" && result == "ok" {
		d.deleted[name] = true
	}
}

func (d *driver) summary() (counts map[string]int, deleted map[string]bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.counts), maps.Clone(d.deleted)
}

// Fault kinds.
const (
	restart = "restart"
	compact = "compaction"
	cut     = "cut"
	stall   = "stall"
)

// faults injects faults one at a time, with seeded random gaps, until its
// context ends: first a shuffled plan holding the minimum of each kind, then
// random kinds. rnd is used by run's goroutine only (and by newFaults);
// mu guards the rest.
type faults struct {
	srv *apiserver.Server
	p   *apiserver.Proxy
	rnd *rand.Rand

	mu     sync.Mutex
	counts map[string]int
	plan   []string // faults of the plan not started yet
	done   bool     // every fault of the plan is over
}

func newFaults(srv *apiserver.Server, p *apiserver.Proxy, seed uint64) *faults {
	f := &faults{srv: srv, p: p, rnd: rand.New(rand.NewPCG(seed, 0x6661_756c74)), counts: map[string]int{}}
	for _, kind := range []string{restart, compact, cut, stall} {
		for range minimum[kind] {
			f.plan = append(f.plan, kind)
		}
	}
	f.rnd.Shuffle(len(f.plan), func(i, j int) { f.plan[i], f.plan[j] = f.plan[j], f.plan[i] })
	return f
}

// minimum is the least of each kind the short form injects.
var minimum = map[string]int{restart: 2, compact: 3, cut: 5, stall: 3}

// run injects faults until ctx ends. Restarts and compactions use the test's
// context, so that the end of driving never leaves the server half started.
func (f *faults) run(ctx context.Context, t *testing.T) {
	weighted := []string{restart, compact, compact, cut, cut, cut, cut, stall, stall, stall}
	for {
		if !pause(ctx, time.Duration(2000+f.rnd.IntN(4000))*time.Millisecond) {
			return
		}
		f.mu.Lock()
		kind := weighted[f.rnd.IntN(len(weighted))]
		if len(f.plan) > 0 {
			kind, f.plan = f.plan[0], f.plan[1:]
		}
		f.mu.Unlock()
		label := f.inject(ctx, t, kind)
		f.mu.Lock()
		f.counts[label]++
		f.done = len(f.plan) == 0
		f.mu.Unlock()
	}
}

// inject injects one fault of kind and returns its label for the summary.
func (f *faults) inject(ctx context.Context, t *testing.T, kind string) string {
	start := time.Now()
	switch kind {
	case restart:
		// Half the restarts come behind a stall, whose connections are then
		// cut (so no event sent before the restart is delivered late):
		// objects deleted during the stall reach handlers only as tombstones
		// of the relist that the restarted server's 410 forces (its watch
		// cache starts afresh, after the informer's resource version).
		if f.rnd.IntN(2) == 0 {
			kind = "restart behind a stall"
			f.p.Stall()
			pause(ctx, time.Duration(1000+f.rnd.IntN(2000))*time.Millisecond)
			defer func() { f.p.Cut(); f.p.Resume() }()
		}
		if err := f.srv.Restart(t.Context()); err != nil {
			t.Errorf("restart: %v", err)
		}
	case compact:
		if _, err := f.srv.Compact(t.Context()); err != nil {
			t.Errorf("compact: %v", err)
		}
	case cut:
		f.p.Cut()
	case stall:
		f.p.Stall()
		pause(ctx, time.Duration(2000+f.rnd.IntN(3000))*time.Millisecond) // the stall itself
		f.p.Resume()
	}
	t.Logf("fault: %s, %s", kind, time.Since(start).Round(time.Millisecond))
	return kind
}

// summary returns the faults injected by label, and whether the plan is done.
func (f *faults) summary() (counts map[string]int, planDone bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.counts), f.done
}

// pause waits for d or for ctx to end, and reports whether d passed. It
// paces the workload (backoff, gaps between faults, a stall's length); it
// never orders the test's goroutines.
func pause(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}
