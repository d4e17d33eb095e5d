package reflector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// loadingLW answers the resume's probe (RV 60) and a relist (one Pod at
// RV 70), and hands each watch's events channel to the test.
type loadingLW struct {
	mu      sync.Mutex
	lists   []metav1.ListOptions
	watches chan chan watch.Event
}

func (l *loadingLW) List(_ context.Context, opts metav1.ListOptions) (List[*corev1.Pod], error) {
	l.mu.Lock()
	l.lists = append(l.lists, opts)
	l.mu.Unlock()
	if opts.Limit == 1 {
		return List[*corev1.Pod]{ResourceVersion: "60"}, nil
	}
	return List[*corev1.Pod]{Items: []*corev1.Pod{pod("b", "65")}, ResourceVersion: "70"}, nil
}

func (l *loadingLW) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	ch := make(chan watch.Event, 1)
	l.watches <- ch
	return chanWatch(ch), nil
}

// callSink is a RelistSink that records its calls in order.
type callSink struct {
	mu    sync.Mutex
	calls []string
}

func (s *callSink) record(format string, args ...any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, fmt.Sprintf(format, args...))
	return nil
}

func (s *callSink) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *callSink) Replace([]*corev1.Pod, string) error { return s.record("replace") }
func (s *callSink) Add(o *corev1.Pod) error             { return s.record("add %s", o.Name) }
func (s *callSink) Update(o *corev1.Pod) error          { return s.record("update %s", o.Name) }
func (s *callSink) Delete(o *corev1.Pod) error          { return s.record("delete %s", o.Name) }
func (s *callSink) Bookmark(rv string)                  { s.record("bookmark %s", rv) }
func (s *callSink) BeginRelist() error                  { return s.record("begin") }
func (s *callSink) RelistItems(items []*corev1.Pod) error {
	for _, o := range items {
		s.record("item %s", o.Name)
	}
	return nil
}
func (s *callSink) RelistDelete(o *corev1.Pod) error { return s.record("relist delete %s", o.Name) }
func (s *callSink) EndRelist(rv string) error        { return s.record("end %s", rv) }

// TestReflector_resumingWhileLoadingHoldsTheSinkUntilReady: with
// ResumeWhileLoading the reflector probes and watches from the state's
// version while the state is still being given to the sink, and touches
// the sink only once ready is called; a state abandoned halfway syncs, its
// versions not comparable.
func TestReflector_resumingWhileLoadingHoldsTheSinkUntilReady(t *testing.T) {
	for _, tc := range []struct {
		name      string
		loadErr   error
		want      []string
		wantState ResumeState
	}{
		{"the state loads whole: the confirmation ends its relist", nil,
			[]string{"end 50", "update a"}, ResumeAccepted},
		{"the state is abandoned: a sync replaces it", errors.New("object 3 of 9 does not decode"),
			[]string{"begin", "item b", "end 70"}, ResumeRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := startLoading(t, nil)
				events := <-l.lw.watches // probed and watching while the state loads
				events <- watch.Event{Type: watch.Modified, Object: pod("a", "51")}
				synctest.Wait()
				if calls := l.sink.got(); len(calls) != 0 {
					t.Fatalf("the sink heard %v before ready", calls)
				}
				if st := l.r.Resume().State; st != ResumePending {
					t.Fatalf("resume %v before ready, want pending", st)
				}
				l.ready(tc.loadErr)
				synctest.Wait()
				if calls := l.sink.got(); !slices.Equal(calls, tc.want) {
					t.Errorf("the sink heard %v, want %v", calls, tc.want)
				}
				res := l.r.Resume()
				if res.State != tc.wantState || (tc.loadErr != nil && (res.Comparable || !errors.Is(res.Err, tc.loadErr))) {
					t.Errorf("resume %+v, want %v (an abandoned state not comparable, with the load's error)", res, tc.wantState)
				}
				l.stop(t)
			})
		})
	}
}

// TestReflector_aStateAbandonedBeforeTheProbeSyncsAtOnce: an abandonment
// the reflector finds at its first action stops the resume there: no
// probe, no resuming watch, a sync.
func TestReflector_aStateAbandonedBeforeTheProbeSyncsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := startLoading(t, errors.New("object 0 of 9 does not decode"))
		<-l.lw.watches // the watch after the sync
		synctest.Wait()
		l.lw.mu.Lock()
		lists := slices.Clone(l.lw.lists)
		l.lw.mu.Unlock()
		if len(lists) != 1 || lists[0].Limit == 1 {
			t.Errorf("lists %+v, want one sync list and no probe", lists)
		}
		if calls, want := l.sink.got(), []string{"begin", "item b", "end 70"}; !slices.Equal(calls, want) {
			t.Errorf("the sink heard %v, want %v", calls, want)
		}
		if res := l.r.Resume(); res.State != ResumeRefused || res.Comparable {
			t.Errorf("resume %+v, want refused, not comparable", res)
		}
		l.stop(t)
	})
}

// loading is a reflector over a loadingLW and a callSink, resuming from RV
// 50 while the state loads (ResumeWhileLoading), and running.
type loading struct {
	lw    *loadingLW
	sink  *callSink
	r     *Reflector[*corev1.Pod]
	ready func(error)
	stop  func(*testing.T) // ends Run and checks it returned nil
}

// startLoading starts one; with early set, the state is abandoned with it
// before Run starts.
func startLoading(t *testing.T, early error) *loading {
	t.Helper()
	l := &loading{lw: &loadingLW{watches: make(chan chan watch.Event, 4)}, sink: &callSink{}}
	var err error
	if l.r, err = New[*corev1.Pod](l.lw, l.sink, Options{DisableWatchList: true}); err != nil {
		t.Fatal(err)
	}
	if l.ready, err = l.r.ResumeWhileLoading("50"); err != nil {
		t.Fatal(err)
	}
	if early != nil {
		l.ready(early)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- l.r.Run(ctx) }()
	l.stop = func(t *testing.T) {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	return l
}
