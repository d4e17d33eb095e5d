package reflector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// chanLW lists nothing at resource version 1; its first watch reads first,
// a channel the test fills, its later watches an empty channel.
type chanLW struct {
	first   chan watch.Event
	watches int
	mu      sync.Mutex
}

func (l *chanLW) List(context.Context, metav1.ListOptions) (List[*corev1.Pod], error) {
	return List[*corev1.Pod]{ResourceVersion: "1"}, nil
}

func (l *chanLW) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watches++
	if l.watches == 1 {
		return chanWatch(l.first), nil
	}
	return chanWatch(make(chan watch.Event)), nil
}

// chanWatch is a watch reading a channel; Stop does nothing.
type chanWatch chan watch.Event

func (w chanWatch) Stop()                          {}
func (w chanWatch) ResultChan() <-chan watch.Event { return w }

// gateSink counts updates; the first waits for gate to close. It records how
// many updates it had taken when the second Replace (a relist) came.
type gateSink struct {
	gate chan struct{}

	mu        sync.Mutex
	updates   int
	replaces  int
	atRelist  int
	waitedFor bool
}

func (s *gateSink) Replace([]*corev1.Pod, string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replaces++; s.replaces == 2 {
		s.atRelist = s.updates
	}
	return nil
}

func (s *gateSink) Update(*corev1.Pod) error {
	s.mu.Lock()
	first := !s.waitedFor
	s.waitedFor = true
	s.mu.Unlock()
	if first {
		<-s.gate
	}
	s.mu.Lock()
	s.updates++
	s.mu.Unlock()
	return nil
}

func (s *gateSink) Add(*corev1.Pod) error    { return nil }
func (s *gateSink) Delete(*corev1.Pod) error { return nil }
func (s *gateSink) Bookmark(string)          {}

// TestReflector_aRelistRequestIsServedWhileEventsKeepComing checks that the
// reflector, which takes events already waiting without looking at its
// other channels (quickReads), still serves a relist requested while a
// backlog of events waits, after at most quickReads more events. Taking
// every waiting event first would relist only after all n.
func TestReflector_aRelistRequestIsServedWhileEventsKeepComing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 2000
		lw := &chanLW{first: make(chan watch.Event, n)}
		sink := &gateSink{gate: make(chan struct{})}
		r := newTestReflector(t, lw, sink, Options{DisableWatchList: true})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		for i := range n {
			lw.first <- watch.Event{Type: watch.Modified, Object: pod(fmt.Sprint("p", i), fmt.Sprint(2+i))}
		}
		synctest.Wait() // listed, watching, and held in the sink by the first event
		relisted := make(chan error, 1)
		go func() {
			_, err := r.Relist(ctx, errors.New("test relist"))
			relisted <- err
		}()
		synctest.Wait() // the request waits for the reflector
		close(sink.gate)
		if err := <-relisted; err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // relisted, and watching again
		sink.mu.Lock()
		updates, replaces, atRelist := sink.updates, sink.replaces, sink.atRelist
		sink.mu.Unlock()
		if replaces != 2 {
			t.Fatalf("%d replaces; want the first list and the requested relist", replaces)
		}
		if atRelist < 1 || atRelist > 1+quickReads { // the event held in the sink, then at most quickReads
			t.Errorf("the relist came after %d of %d waiting events; want at most %d", atRelist, n, 1+quickReads)
		}
		if updates != atRelist {
			t.Errorf("%d updates, %d of them before the relist; want none after it (the watch it stopped held the rest)", updates, atRelist)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v after cancel; want nil", err)
		}
	})
}
