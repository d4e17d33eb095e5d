package reflector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

var errSinkFull = errors.New("sink: full")

// fakeLW is a scripted ListerWatcher: List answers from lists in turn (the
// last answer repeats); every Watch opens a fake watcher handed to the test.
type fakeLW struct {
	mu       sync.Mutex
	lists    []func() (List[*corev1.Pod], error)
	listOpts []metav1.ListOptions
	watched  []metav1.ListOptions // each Watch's options
	watchErr error
	watches  chan *watch.RaceFreeFakeWatcher
}

func newFakeLW(lists ...func() (List[*corev1.Pod], error)) *fakeLW {
	return &fakeLW{lists: lists, watches: make(chan *watch.RaceFreeFakeWatcher, 16)}
}

func page(rv string, items ...*corev1.Pod) func() (List[*corev1.Pod], error) {
	return func() (List[*corev1.Pod], error) {
		return List[*corev1.Pod]{Items: items, ResourceVersion: rv}, nil
	}
}

func failing(err error) func() (List[*corev1.Pod], error) {
	return func() (List[*corev1.Pod], error) { return List[*corev1.Pod]{}, err }
}

func (f *fakeLW) List(_ context.Context, opts metav1.ListOptions) (List[*corev1.Pod], error) {
	f.mu.Lock()
	f.listOpts = append(f.listOpts, opts)
	answer := f.lists[min(len(f.listOpts), len(f.lists))-1]
	f.mu.Unlock()
	return answer()
}

func (f *fakeLW) Watch(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	f.mu.Lock()
	f.watched = append(f.watched, opts)
	err := f.watchErr
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	w := watch.NewRaceFreeFake()
	f.watches <- w
	return w, nil
}

func (f *fakeLW) listed() []metav1.ListOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]metav1.ListOptions(nil), f.listOpts...)
}

func (f *fakeLW) watchOptions() []metav1.ListOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]metav1.ListOptions(nil), f.watched...)
}

func (f *fakeLW) nextWatch(t *testing.T) *watch.RaceFreeFakeWatcher {
	t.Helper()
	select {
	case w := <-f.watches:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("no watch opened within 10s")
		return nil
	}
}

// runReflector runs r until the test ends and checks that Run returns nil.
func runReflector(t *testing.T, r *Reflector[*corev1.Pod]) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancel")
		}
	})
}

func newTestReflector(t *testing.T, lw ListerWatcher[*corev1.Pod], sink Sink[*corev1.Pod], opts Options) *Reflector[*corev1.Pod] {
	t.Helper()
	r, err := New(lw, sink, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReflector_skipsUnusableObjectsWithAMetricAndGoesOn(t *testing.T) {
	leakcheck.Check(t)
	reg := prometheus.NewRegistry()
	lw := newFakeLW(func() (List[*corev1.Pod], error) {
		return List[*corev1.Pod]{Items: []*corev1.Pod{pod("a", "5"), pod("", "6")}, ResourceVersion: "10",
			Skipped: 1, Skip: "list item is a *v1.ConfigMap"}, nil
	})
	sink := newMemSink[*corev1.Pod]()
	r := newTestReflector(t, lw, sink, Options{DisableWatchList: true, Telemetry: telemetry.Telemetry{Registerer: reg}, Name: "pods"})
	runReflector(t, r)
	w := lw.nextWatch(t)
	w.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "not-a-pod", ResourceVersion: "11"}})
	w.Add(pod("", "12"))
	w.Add(pod("b", "13"))
	sink.waitFor(t, 10*time.Second, "pods a and b", func(keys map[string]string, _ int) bool {
		return len(keys) == 2 && keys["ns/a"] == "5" && keys["ns/b"] == "13"
	})
	skipped := func(reason string) float64 {
		return testutil.ToFloat64(r.metrics.skipped.WithLabelValues(reason))
	}
	if skipped("wrong type") != 2 || skipped("no metadata") != 2 {
		t.Errorf("skipped: wrong type %v, no metadata %v; want 2 and 2", skipped("wrong type"), skipped("no metadata"))
	}
	if got := r.LastSyncResourceVersion(); got != "13" {
		t.Errorf("LastSyncResourceVersion = %q, want 13", got)
	}
}

func TestReflector_anErrorEventRelistsAtTheLastSyncedRV(t *testing.T) {
	leakcheck.Check(t)
	lw := newFakeLW(page("10", pod("a", "5")), page("20", pod("b", "15")))
	sink := newMemSink[*corev1.Pod]()
	runReflector(t, newTestReflector(t, lw, sink, Options{DisableWatchList: true}))
	w := lw.nextWatch(t)
	w.Add(pod("c", "12"))
	w.Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	lw.nextWatch(t) // the relist completed and a new watch opened
	sink.waitFor(t, 10*time.Second, "the relist's state", func(keys map[string]string, replaces int) bool {
		return replaces == 2 && len(keys) == 1 && keys["ns/b"] == "15"
	})
	got := lw.listed()
	if len(got) != 2 || got[0].ResourceVersion != "0" || got[1].ResourceVersion != "12" {
		t.Fatalf("lists at %+v, want RV 0 then the last synced RV 12", got)
	}
}

// ListAndWatch returns once its watch ends in a way that needs a new sync,
// with nil, as client-go's (the cause is in LastError); a watch the server
// refuses to open returns its error.
func TestReflector_ListAndWatchReturnsOnceItsWatchEnds(t *testing.T) {
	leakcheck.Check(t)
	lw := newFakeLW(page("10", pod("a", "5")))
	r := newTestReflector(t, lw, newMemSink[*corev1.Pod](), Options{DisableWatchList: true})
	done := make(chan error, 1)
	go func() { done <- r.ListAndWatch(t.Context()) }()
	lw.nextWatch(t).Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ListAndWatch = %v, want nil once its watch ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ListAndWatch did not return")
	}
	if !apierrors.IsResourceExpired(r.LastError()) {
		t.Errorf("LastError = %v, want the 410 that ended the watch", r.LastError())
	}
	refused := apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New("no RBAC"))
	lw.mu.Lock()
	lw.watchErr = refused
	lw.mu.Unlock()
	go func() { done <- r.ListAndWatch(t.Context()) }()
	select {
	case err := <-done:
		if !apierrors.IsForbidden(err) {
			t.Fatalf("ListAndWatch with a watch refused = %v, want the 403", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ListAndWatch did not return")
	}
}

func TestReflector_watchListSyncsFromTheStreamAlone(t *testing.T) {
	leakcheck.Check(t)
	lw := newFakeLW(failing(errors.New("list must not be called")))
	sink := newMemSink[*corev1.Pod]()
	runReflector(t, newTestReflector(t, lw, sink, Options{}))
	w := lw.nextWatch(t)
	w.Add(pod("a", "7"))
	w.Add(pod("b", "3"))
	end := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "10",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	w.Action(watch.Bookmark, end)
	w.Modify(pod("a", "11"))
	sink.waitFor(t, 10*time.Second, "a at 11 and b", func(keys map[string]string, replaces int) bool {
		return replaces == 1 && keys["ns/a"] == "11" && keys["ns/b"] == "3"
	})
	if n := len(lw.listed()); n != 0 {
		t.Errorf("%d list calls, want none", n)
	}
}

func TestReflector_aSinkErrorIsCountedAndTheReflectorGoesOn(t *testing.T) {
	leakcheck.Check(t)
	reg := prometheus.NewRegistry()
	lw := newFakeLW(page("10"))
	sink := newMemSink[*corev1.Pod]()
	sink.failNext = true
	r := newTestReflector(t, lw, sink, Options{DisableWatchList: true, Telemetry: telemetry.Telemetry{Registerer: reg}})
	runReflector(t, r)
	w := lw.nextWatch(t)
	w.Add(pod("lost", "11"))
	w.Add(pod("kept", "12"))
	sink.waitFor(t, 10*time.Second, "the second add", func(keys map[string]string, _ int) bool {
		return keys["ns/kept"] == "12"
	})
	if n := testutil.ToFloat64(r.metrics.sinkErrors); n != 1 {
		t.Errorf("sink errors = %v, want 1", n)
	}
}

func TestReflector_cancelStopsRunWhileBackingOffAndReportsTheError(t *testing.T) {
	leakcheck.Check(t)
	forbidden := apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New("no RBAC"))
	lw := newFakeLW(failing(forbidden))
	reported := make(chan error, 8)
	r := newTestReflector(t, lw, newMemSink[*corev1.Pod](), Options{DisableWatchList: true,
		OnError: func(err error) {
			select {
			case reported <- err:
			default:
			}
		}})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case err := <-reported:
		if !apierrors.IsForbidden(err) {
			t.Errorf("OnError got %v, want the 403", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnError not called within 10s")
	}
	if !apierrors.IsForbidden(r.LastError()) {
		t.Errorf("LastError = %v, want the 403", r.LastError())
	}
	cancel() // the reflector is now waiting out its backoff
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil on cancel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of cancel")
	}
}

func TestNew_rejectsASecondReflectorWithTheSameNameOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	lw := newFakeLW(page("1"))
	if _, err := New[*corev1.Pod](lw, newMemSink[*corev1.Pod](), Options{Name: "pods", Telemetry: telemetry.Telemetry{Registerer: reg}}); err != nil {
		t.Fatal(err)
	}
	if _, err := New[*corev1.Pod](lw, newMemSink[*corev1.Pod](), Options{Name: "pods", Telemetry: telemetry.Telemetry{Registerer: reg}}); err == nil {
		t.Fatal("second reflector named pods registered without error")
	}
	if _, err := New[*corev1.Pod](lw, newMemSink[*corev1.Pod](), Options{Name: "pods-b", Telemetry: telemetry.Telemetry{Registerer: reg}}); err != nil {
		t.Fatalf("a differently named reflector: %v", err)
	}
}

func TestReflector_ListAndWatchRelistsAtTheLastSyncedRVOnTheNextCall(t *testing.T) {
	leakcheck.Check(t)
	lw := newFakeLW(page("10", pod("a", "5")))
	r := newTestReflector(t, lw, newMemSink[*corev1.Pod](), Options{DisableWatchList: true})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 2)
	go func() { done <- r.ListAndWatch(ctx) }()
	w := lw.nextWatch(t)
	w.Add(pod("b", "12"))
	w.Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	if err := <-done; err != nil {
		t.Fatalf("first ListAndWatch = %v, want nil once its watch ended", err)
	}
	go func() { done <- r.ListAndWatch(ctx) }()
	lw.nextWatch(t)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("second ListAndWatch = %v, want nil on cancel", err)
	}
	got := lw.listed()
	if len(got) != 2 || got[0].ResourceVersion != "0" || got[1].ResourceVersion != "12" {
		t.Fatalf("lists at %+v, want RV 0, then the RV synced by the first call, 12", got)
	}
}

// rvClearingSink is a memSink behind a transform that clears each object's
// resource version, as client-go's own tests do.
type rvClearingSink struct{ *memSink[*corev1.Pod] }

func (s rvClearingSink) Add(obj *corev1.Pod) error {
	obj.ResourceVersion = ""
	return s.memSink.Add(obj)
}

func TestReflector_LastSyncResourceVersionIsTakenBeforeTheSinkSeesTheObject(t *testing.T) {
	leakcheck.Check(t)
	lw := newFakeLW(page("10", pod("a", "5")))
	sink := rvClearingSink{newMemSink[*corev1.Pod]()}
	r := newTestReflector(t, lw, sink, Options{DisableWatchList: true})
	runReflector(t, r)
	lw.nextWatch(t).Add(pod("b", "13"))
	sink.waitFor(t, 10*time.Second, "pod b", func(keys map[string]string, _ int) bool {
		_, ok := keys["ns/b"]
		return ok
	})
	if got := r.LastSyncResourceVersion(); got != "13" {
		t.Errorf("LastSyncResourceVersion = %q once the sink holds b, want 13 (b's RV as it arrived)", got)
	}
}

func TestReflector_anExplicitPageSizeAppliesToRelistsAtASpecificRV(t *testing.T) {
	leakcheck.Check(t)
	lw := newFakeLW(page("10", pod("a", "5")))
	runReflector(t, newTestReflector(t, lw, newMemSink[*corev1.Pod](), Options{DisableWatchList: true, PageSize: 100}))
	w := lw.nextWatch(t)
	w.Add(pod("b", "12"))
	w.Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	lw.nextWatch(t)
	got := lw.listed()
	if len(got) != 2 || got[0].Limit != 100 || got[1].ResourceVersion != "12" || got[1].Limit != 100 {
		t.Fatalf("lists %+v, want RV 0 then 12, both with limit 100", got)
	}
}

func TestNew_raisesAMinWatchTimeoutUnderFiveMinutesToFiveMinutes(t *testing.T) {
	for _, tc := range []struct {
		in, wantMin time.Duration
	}{{0, 5 * time.Minute}, {time.Second, 5 * time.Minute}, {10 * time.Minute, 10 * time.Minute}} {
		r := newTestReflector(t, newFakeLW(page("1")), newMemSink[*corev1.Pod](), Options{MinWatchTimeout: tc.in})
		if r.cfg.minTimeout != tc.wantMin || r.cfg.maxTimeout != 2*tc.wantMin {
			t.Errorf("MinWatchTimeout %s: watch timeouts in [%s, %s], want [%s, %s]",
				tc.in, r.cfg.minTimeout, r.cfg.maxTimeout, tc.wantMin, 2*tc.wantMin)
		}
	}
}

// sizingSink is a RelistSink that records what its RelistSizer hears.
type sizingSink struct {
	*memSink[*corev1.Pod]
	sizes []int // guarded by memSink's mu
}

func (s *sizingSink) BeginRelist() error { return nil }
func (s *sizingSink) RelistItems(items []*corev1.Pod) error {
	for _, it := range items {
		s.put(it)
	}
	return nil
}
func (s *sizingSink) RelistDelete(obj *corev1.Pod) error { return s.Delete(obj) }
func (s *sizingSink) EndRelist(rv string) error {
	s.Bookmark(rv)
	return nil
}
func (s *sizingSink) RelistSize(n int) {
	s.mu.Lock()
	s.sizes = append(s.sizes, n)
	s.mu.Unlock()
	s.signal()
}

func TestReflector_aRelistSizerHearsTheListsSizeWithItsFirstPage(t *testing.T) {
	leakcheck.Check(t)
	remaining := func(n int64, cont string, rv string, items ...*corev1.Pod) func() (List[*corev1.Pod], error) {
		return func() (List[*corev1.Pod], error) {
			return List[*corev1.Pod]{Items: items, ResourceVersion: rv, Continue: cont, RemainingItemCount: &n}, nil
		}
	}
	for _, tc := range []struct {
		name  string
		pages []func() (List[*corev1.Pod], error)
		want  []int
	}{
		{"two pages, the server counts", []func() (List[*corev1.Pod], error){
			remaining(2, "next", "", pod("a", "5")), remaining(0, "", "10", pod("b", "6"), pod("c", "7"))}, []int{3}},
		{"no count", []func() (List[*corev1.Pod], error){page("10", pod("a", "5"))}, nil},
		{"a count beyond reason is capped", []func() (List[*corev1.Pod], error){
			remaining(1<<40, "", "10", pod("a", "5"))}, []int{MaxRelistSizeHint}},
		{"a negative count is ignored", []func() (List[*corev1.Pod], error){
			remaining(-5, "", "10", pod("a", "5"))}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lw := newFakeLW(tc.pages...)
			sink := &sizingSink{memSink: newMemSink[*corev1.Pod]()}
			runReflector(t, newTestReflector(t, lw, sink, Options{DisableWatchList: true, PageSize: 1}))
			lw.nextWatch(t) // the list is over
			sink.mu.Lock()
			defer sink.mu.Unlock()
			if !slices.Equal(sink.sizes, tc.want) {
				t.Fatalf("RelistSize heard %v, want %v", sink.sizes, tc.want)
			}
		})
	}
}

// The one-object list that probes the server before a resume is not a
// relist: its count sizes nothing.
func TestReflector_theResumeProbeSizesNothing(t *testing.T) {
	leakcheck.Check(t)
	n := int64(41)
	lw := newFakeLW(func() (List[*corev1.Pod], error) {
		return List[*corev1.Pod]{Items: []*corev1.Pod{pod("a", "50")}, ResourceVersion: "60", Continue: "more", RemainingItemCount: &n}, nil
	})
	sink := &sizingSink{memSink: newMemSink[*corev1.Pod]()}
	r := newTestReflector(t, lw, sink, Options{DisableWatchList: true})
	if err := r.ResumeFrom("55"); err != nil {
		t.Fatal(err)
	}
	runReflector(t, r)
	lw.nextWatch(t) // probed, now watching from 55
	if got := lw.listed(); len(got) != 1 || got[0].Limit != 1 {
		t.Fatalf("lists %+v, want the one-object probe", got)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.sizes) != 0 {
		t.Fatalf("RelistSize heard %v after the probe, want nothing", sink.sizes)
	}
}

// listAndWatchOnce runs one ListAndWatch, cancelling it once its watch
// opens, and returns what it returned.
func listAndWatchOnce(t *testing.T, r *Reflector[*corev1.Pod], lw *fakeLW) error {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.ListAndWatch(ctx) }()
	select {
	case err := <-done:
		return err // it ended before watching
	case <-lw.watches:
		cancel()
	case <-time.After(10 * time.Second):
		t.Fatal("ListAndWatch neither returned nor opened a watch within 10s")
	}
	return <-done
}

// rvs returns the resource versions the lists asked for, a continued
// page as "continue", each with its limit.
func rvs(opts []metav1.ListOptions) []string {
	var out []string
	for _, o := range opts {
		rv := "rv=" + o.ResourceVersion
		if o.Continue != "" {
			rv = "continue"
		}
		out = append(out, fmt.Sprintf("%s limit=%d", rv, o.Limit))
	}
	return out
}

// A list that fails ends ListAndWatch with its error at once, the first
// one too (its caller backs off, as Run does); the next call lists again.
func TestReflector_ListAndWatchReturnsAFailedListsError(t *testing.T) {
	leakcheck.Check(t)
	refused := apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New("no RBAC"))
	lw := newFakeLW(failing(refused), page("10", pod("a", "5")))
	r := newTestReflector(t, lw, newMemSink[*corev1.Pod](), Options{DisableWatchList: true})
	if err := listAndWatchOnce(t, r, lw); !apierrors.IsForbidden(err) {
		t.Fatalf("ListAndWatch over a failing list = %v, want the 403", err)
	}
	if err := listAndWatchOnce(t, r, lw); err != nil {
		t.Fatalf("the next ListAndWatch = %v, want nil (listed, watched, cancelled)", err)
	}
	if got, want := rvs(lw.listed()), []string{"rv=0 limit=500", "rv=0 limit=500"}; !slices.Equal(got, want) {
		t.Errorf("lists %v, want %v", got, want)
	}
}

// A relist whose resource version expired lists again at "" in the same
// ListAndWatch, as client-go's does: one sync, not a second.
func TestReflector_ListAndWatchCarriesOnItsSyncWhenTheVersionExpired(t *testing.T) {
	leakcheck.Check(t)
	lw := newFakeLW(page("10", pod("a", "5")), failing(apierrors.NewResourceExpired("too old")),
		page("20", pod("a", "5"), pod("b", "15")))
	sink := newMemSink[*corev1.Pod]()
	r := newTestReflector(t, lw, sink, Options{DisableWatchList: true})
	for i := range 2 {
		if err := listAndWatchOnce(t, r, lw); err != nil {
			t.Fatalf("ListAndWatch %d = %v, want nil", i+1, err)
		}
	}
	if got, want := rvs(lw.listed()), []string{"rv=0 limit=500", "rv=10 limit=0", "rv= limit=500"}; !slices.Equal(got, want) {
		t.Errorf("lists %v, want %v", got, want)
	}
	if keys, _ := sink.snapshot(); len(keys) != 2 {
		t.Errorf("the sink holds %v, want a and b", keys)
	}
}

// A continue token that expired mid-list makes the same ListAndWatch list
// once more, whole, at the version it began with; the next call pages
// again.
func TestReflector_ListAndWatchListsWholeWhenAContinueTokenExpired(t *testing.T) {
	leakcheck.Check(t)
	lw := newFakeLW(page("10", pod("a", "5")),
		func() (List[*corev1.Pod], error) {
			return List[*corev1.Pod]{Items: []*corev1.Pod{pod("a", "5")}, ResourceVersion: "11", Continue: "c1"}, nil
		},
		failing(apierrors.NewResourceExpired("continue token expired")),
		page("11", pod("a", "5"), pod("b", "11")))
	sink := newMemSink[*corev1.Pod]()
	r := newTestReflector(t, lw, sink, Options{DisableWatchList: true, PageSize: 1})
	for i := range 3 {
		if err := listAndWatchOnce(t, r, lw); err != nil {
			t.Fatalf("ListAndWatch %d = %v, want nil", i+1, err)
		}
	}
	want := []string{"rv=0 limit=1", "rv=10 limit=1", "continue limit=1", "rv=10 limit=0", "rv=11 limit=1"}
	if got := rvs(lw.listed()); !slices.Equal(got, want) {
		t.Errorf("lists %v, want %v", got, want)
	}
	if keys, _ := sink.snapshot(); len(keys) != 2 {
		t.Errorf("the sink holds %v, want a and b", keys)
	}
}
