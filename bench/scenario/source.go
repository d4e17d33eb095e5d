package scenario

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// ptrObject is *E for an API type E, e.g. *corev1.ConfigMap.
type ptrObject[E any] interface {
	*E
	object.Object
	runtime.Object
}

// memSource is an in-memory API server for one resource, shared by both
// sides of S1, S2 and S4 so they read identical input through their own
// ListerWatcher interfaces. Lists are served in pages (Limit and Continue
// are honoured; Limit 0 is the whole list); each list started without a
// Continue token is a new list, numbered from 0. Watches come from watch.
//
// It refuses watch-list requests (SendInitialEvents): both sides must list,
// and a watch-list attempt is counted and fails the run's verification.
type memSource[E any, P ptrObject[E]] struct {
	n int // objects per list
	// items returns objects [start, end) of list number list. It may hand
	// out a slice it keeps (pre-generated input) or generate a fresh one.
	items func(list, start, end int) []E
	// listRV is the resource version of list number list.
	listRV func(list int) string
	// wrap makes the API list type (e.g. *corev1.ConfigMapList) for client-go;
	// remaining is the count of objects after the page (nil on the last), as
	// kube-apiserver gives it.
	wrap func(items []E, rv, cont string, remaining *int64) runtime.Object
	// watch serves watch number n (0 for the first).
	watch func(ctx context.Context, n int) (watch.Interface, error)

	requests
}

// requests counts what a source served, for a run's verification.
type requests struct {
	lists, pages, watches, watchLists atomic.Int32
}

// list serves one page, wrapped in the API list type.
func (s *memSource[E, P]) list(opts metav1.ListOptions) (runtime.Object, error) {
	s.pages.Add(1)
	list, start := 0, 0
	if opts.Continue == "" {
		list = int(s.lists.Add(1)) - 1
	} else {
		var err error
		if list, start, err = parseContinue(opts.Continue); err != nil {
			return nil, err
		}
	}
	end, cont := s.n, ""
	var remaining *int64
	if opts.Limit > 0 && start+int(opts.Limit) < s.n {
		end = start + int(opts.Limit)
		cont = fmt.Sprintf("%d/%d", list, end)
		n := int64(s.n - end)
		remaining = &n
	}
	return s.wrap(s.items(list, start, end), s.listRV(list), cont, remaining), nil
}

func parseContinue(c string) (list, start int, err error) {
	l, s, ok := strings.Cut(c, "/")
	if !ok {
		return 0, 0, fmt.Errorf("bad continue token %q", c)
	}
	if list, err = strconv.Atoi(l); err == nil {
		start, err = strconv.Atoi(s)
	}
	return list, start, err
}

func (s *memSource[E, P]) startWatch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		s.watchLists.Add(1)
		return nil, errors.New("memSource: watch-list is not served: list instead")
	}
	return s.watch(ctx, int(s.watches.Add(1))-1)
}

// checkPaths fails if a side tried watch-list or did not list wantLists times.
func (s *requests) checkPaths(wantLists int) error {
	if n := s.watchLists.Load(); n > 0 {
		return fmt.Errorf("%d watch-list requests: the side did not take the list path", n)
	}
	if n := int(s.lists.Load()); n != wantLists {
		return fmt.Errorf("%d lists, want %d", n, wantLists)
	}
	return nil
}

// checkPipeline fails unless a side listed n objects once in pages of
// pageSize, without watch-list, and watched once.
func (s *requests) checkPipeline(n, pageSize int) error {
	if err := s.checkPaths(1); err != nil {
		return err
	}
	if got, want := int(s.pages.Load()), (n+pageSize-1)/pageSize; got != want {
		return fmt.Errorf("listed %d pages, want %d of %d", got, want, pageSize)
	}
	if got := s.watches.Load(); got != 1 {
		return fmt.Errorf("%d watches, want 1", got)
	}
	return nil
}

// newCtrlkitLW is the source as ctrlkit's ListerWatcher, built the way a
// user builds one over a typed client (listwatch.New): each page is the API
// list type, from which ctrlkit takes the items as client-go does.
func newCtrlkitLW[E any, P ptrObject[E]](s *memSource[E, P]) reflector.ListerWatcher[P] {
	list := func(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) { return s.list(opts) }
	return listwatch.New[P](list, s.startWatch, listwatch.Options{})
}

// clientGoLW is the source as client-go's cache.ListerWatcher. It declares
// that it does not support watch-list semantics, which is what makes
// client-go v0.37 (WatchListClient on by default) list instead of stream.
type clientGoLW struct{ *cache.ListWatch }

func (clientGoLW) IsWatchListSemanticsUnSupported() bool { return true }

func newClientGoLW[E any, P ptrObject[E]](s *memSource[E, P]) clientGoLW {
	return clientGoLW{&cache.ListWatch{
		ListWithContextFunc:  func(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) { return s.list(opts) },
		WatchFuncWithContext: s.startWatch,
	}}
}

// idleWatch is a watch that sends nothing until stopped.
func idleWatch() watch.Interface { return watch.NewProxyWatcher(make(chan watch.Event)) }

// poll checks cond every tick until it holds, ctx ends or timeout passes;
// what names the condition in the error.
func poll(ctx context.Context, timeout, tick time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(tick)
	defer t.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %v", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
