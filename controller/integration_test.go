package controller_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/store"
)

var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// enqueueSink keeps a store current and queues the key of everything that
// changes: the informer's job, reduced to what this test needs.
type enqueueSink struct {
	cache  *store.Indexer[*corev1.ConfigMap]
	queue  interface{ Add(string) }
	synced atomic.Bool
}

func (s *enqueueSink) enqueue(obj *corev1.ConfigMap) {
	if k, err := object.MetaNamespaceKeyFunc(obj); err == nil {
		s.queue.Add(k)
	}
}

func (s *enqueueSink) Replace(items []*corev1.ConfigMap, rv string) error {
	for _, old := range s.cache.List() { // vanished keys must be reconciled too
		s.enqueue(old)
	}
	if err := s.cache.Replace(items, rv); err != nil {
		return err
	}
	for _, it := range items {
		s.enqueue(it)
	}
	s.synced.Store(true)
	return nil
}

func (s *enqueueSink) Add(o *corev1.ConfigMap) error {
	err := s.cache.Add(o)
	s.enqueue(o)
	return err
}
func (s *enqueueSink) Update(o *corev1.ConfigMap) error { return s.Add(o) }
func (s *enqueueSink) Delete(o *corev1.ConfigMap) error {
	err := s.cache.Delete(o)
	s.enqueue(o)
	return err
}
func (s *enqueueSink) Bookmark(rv string) { s.cache.Bookmark(rv) }

// mirror reconciles source ConfigMap ns/x into ns/x-mirror.
type mirror struct {
	cache *store.Indexer[*corev1.ConfigMap]
	cms   func(ns string) typedcorev1.ConfigMapInterface
}

func (m *mirror) Reconcile(ctx context.Context, key string) (controller.Result, error) {
	ns, name, err := object.SplitMetaNamespaceKey(key)
	if err != nil {
		return controller.Result{}, controller.Terminal(err)
	}
	cms := m.cms(ns)
	src, ok := m.cache.GetByKey(key)
	if !ok {
		err := cms.Delete(ctx, name+"-mirror", metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		return controller.Result{}, err
	}
	want := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-mirror", Labels: map[string]string{"mirror": "true"}}, Data: src.Data}
	cur, err := cms.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cms.Create(ctx, want, metav1.CreateOptions{})
	case err == nil && !maps.Equal(cur.Data, src.Data):
		cur.Data = src.Data
		_, err = cms.Update(ctx, cur, metav1.UpdateOptions{})
	}
	return controller.Result{}, err
}

func TestController_keepsMirrorsOfConfigMapsOnTheRealServer(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	cms := cs.CoreV1().ConfigMaps(ns)
	leakcheck.Check(t)

	cache, err := store.New(store.Options[*corev1.ConfigMap]{})
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := controller.New[string](&mirror{cache: cache, cms: cs.CoreV1().ConfigMaps}, controller.Options[string]{Name: "mirror", Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	sink := &enqueueSink{cache: cache, queue: ctrl}
	lw := listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{LabelSelector: "mirror!=true"})
	r, err := reflector.New(lw, sink, reflector.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctrl.WaitFor("configmaps", sink.synced.Load, nil)

	for i := range 30 { // some exist before the controller starts
		createCM(t, cms, fmt.Sprintf("src-%02d", i), "v1")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 2)
	go func() { done <- r.Run(ctx) }()
	go func() { done <- ctrl.Run(ctx) }()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	}()

	for i := 30; i < 40; i++ {
		createCM(t, cms, fmt.Sprintf("src-%02d", i), "v1")
	}
	for i := range 10 {
		cm, err := cms.Get(t.Context(), fmt.Sprintf("src-%02d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["v"] = "v2"
		if _, err := cms.Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 35; i < 40; i++ {
		if err := cms.Delete(t.Context(), fmt.Sprintf("src-%02d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitForMirrors(t, cms, 35, time.Minute)
}

func createCM(t *testing.T, cms typedcorev1.ConfigMapInterface, name, v string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": v}}
	if _, err := cms.Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitForMirrors polls the server until every source has an equal mirror
// and no mirror is left without its source.
func waitForMirrors(t *testing.T, cms typedcorev1.ConfigMapInterface, sources int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var problem string
	for time.Now().Before(deadline) {
		problem = mirrorProblem(t, cms, sources)
		if problem == "" {
			return
		}
		<-tick.C
	}
	t.Fatalf("mirrors not converged after %s: %s", d, problem)
}

func mirrorProblem(t *testing.T, cms typedcorev1.ConfigMapInterface, sources int) string {
	list, err := cms.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]corev1.ConfigMap{}
	for _, cm := range list.Items {
		byName[cm.Name] = cm
	}
	n := 0
	for name, cm := range byName {
		if cm.Labels["mirror"] == "true" {
			if _, ok := byName[name[:len(name)-len("-mirror")]]; !ok {
				return name + " has no source"
			}
			continue
		}
		n++
		m, ok := byName[name+"-mirror"]
		if !ok || !maps.Equal(m.Data, cm.Data) {
			return name + " has no equal mirror"
		}
	}
	if n != sources {
		return fmt.Sprintf("%d sources, want %d", n, sources)
	}
	return ""
}
