package informer_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/internal/poll"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// fakeServer is an in-memory ListerWatcher of ConfigMaps in namespace "ns"
// with resource versions, a history, and faults: failing lists, stalled
// watches and compaction.
type fakeServer struct {
	mu       sync.Mutex
	objs     map[string]*corev1.ConfigMap
	rv       int
	history  []watch.Event // every change, in order
	compact  int           // watches from an RV below this answer 410
	stalled  bool          // events are recorded but not sent
	listErr  error
	watchers []*fakeWatch
	lists    int
	// only, when set, selects the objects lists and watches give, like
	// a label or shard selector; it is read at each List and Watch.
	only func(name string) bool
}

func newFakeServer(names ...string) *fakeServer {
	s := &fakeServer{objs: map[string]*corev1.ConfigMap{}}
	for _, n := range names {
		s.create(n, nil)
	}
	return s
}

func (s *fakeServer) change(typ watch.EventType, name string, data map[string]string) *corev1.ConfigMap {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	// An object keeps its UID until it is deleted; one created again gets
	// another.
	uid := types.UID("uid-" + strconv.Itoa(s.rv))
	if prev, ok := s.objs[name]; ok && typ != watch.Added {
		uid = prev.UID
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid, ResourceVersion: strconv.Itoa(s.rv)}, Data: data}
	if typ == watch.Deleted {
		delete(s.objs, name)
	} else {
		s.objs[name] = cm
	}
	ev := watch.Event{Type: typ, Object: cm}
	s.history = append(s.history, ev)
	if !s.stalled {
		for _, w := range s.watchers {
			w.send(ev)
		}
	}
	return cm
}

func (s *fakeServer) create(name string, data map[string]string) *corev1.ConfigMap {
	return s.change(watch.Added, name, data)
}
func (s *fakeServer) update(name string, data map[string]string) *corev1.ConfigMap {
	return s.change(watch.Modified, name, data)
}
func (s *fakeServer) remove(name string) *corev1.ConfigMap { return s.change(watch.Deleted, name, nil) }

// stall stops delivering events; expireAndResume compacts the history and
// ends every watch, so the reflector must relist.
func (s *fakeServer) stall() {
	s.mu.Lock()
	s.stalled = true
	s.mu.Unlock()
}

func (s *fakeServer) expireAndResume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compact, s.stalled = s.rv+1, false
	for _, w := range s.watchers {
		w.Stop()
	}
	s.watchers = nil
}

func (s *fakeServer) setListErr(err error) {
	s.mu.Lock()
	s.listErr = err
	s.mu.Unlock()
}

// state returns name -> resource version.
func (s *fakeServer) state() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for n, o := range s.objs {
		out[n] = o.ResourceVersion
	}
	return out
}

func (s *fakeServer) List(_ context.Context, _ metav1.ListOptions) (reflector.List[*corev1.ConfigMap], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists++
	if s.listErr != nil {
		return reflector.List[*corev1.ConfigMap]{}, s.listErr
	}
	l := reflector.List[*corev1.ConfigMap]{ResourceVersion: strconv.Itoa(s.rv)}
	for _, n := range slices.Sorted(maps.Keys(s.objs)) {
		if s.only != nil && !s.only(n) {
			continue
		}
		l.Items = append(l.Items, s.objs[n].DeepCopy()) // each list decodes fresh objects, as from the API
	}
	return l, nil
}

func (s *fakeServer) Watch(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from, err := strconv.Atoi(opts.ResourceVersion)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("bad resource version %q", opts.ResourceVersion))
	}
	if from+1 < s.compact {
		return nil, apierrors.NewResourceExpired("too old resource version")
	}
	w := &fakeWatch{ch: make(chan watch.Event, 100_000), only: s.only}
	if !s.stalled {
		for _, ev := range s.history[from:] {
			w.send(ev)
		}
	}
	s.watchers = append(s.watchers, w)
	return w, nil
}

// fakeWatch is a watch with a large buffer; the server sends under its lock.
type fakeWatch struct {
	only    func(name string) bool
	mu      sync.Mutex
	ch      chan watch.Event
	stopped bool
}

// send delivers a copy of ev's object: every watcher decodes its own, as
// from the API, so informers sharing this server share no objects.
func (w *fakeWatch) send(ev watch.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.only != nil && ev.Object != nil && !w.only(ev.Object.(*corev1.ConfigMap).Name) {
		return
	}
	if !w.stopped {
		if ev.Object != nil {
			ev.Object = ev.Object.DeepCopyObject()
		}
		w.ch <- ev
	}
}

func (w *fakeWatch) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.ch)
	}
}

func (w *fakeWatch) ResultChan() <-chan watch.Event { return w.ch }

// waitFor waits until cond holds, checking whenever changed signals and
// at least every 10ms, for at most d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, d, 10*time.Millisecond, what, cond)
}
