package informer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func TestFactory_sharesOneInformerPerResourceAndNamespace(t *testing.T) {
	leakcheck.Check(t)
	f := informer.NewFactory(informer.FactoryOptions{Reflector: reflector.Options{DisableWatchList: true}})
	srv := newFakeServer("a")
	var created int
	newLW := func() reflector.ListerWatcher[*corev1.ConfigMap] { created++; return srv }
	a, err := informer.For(f, informer.Scope{Resource: configMapsGVR, Namespace: "ns"}, newLW)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := informer.For(f, informer.Scope{Resource: configMapsGVR, Namespace: "ns"}, newLW)
	other, _ := informer.For(f, informer.Scope{Resource: configMapsGVR, Namespace: "other"}, newLW)
	if a != b || a == other || created != 2 {
		t.Errorf("same=%v, distinct namespaces=%v, %d ListerWatchers; want true, true, 2", a == b, a != other, created)
	}
	_, err = informer.For(f, informer.Scope{Resource: configMapsGVR, Namespace: "ns"}, func() reflector.ListerWatcher[*metav1.PartialObjectMetadata] { return nil })
	if !errors.Is(err, informer.ErrTypeMismatch) {
		t.Errorf("For with another type = %v, want ErrTypeMismatch", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	if err := f.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	if !a.HasSynced() || !other.HasSynced() {
		t.Error("WaitForCacheSync returned before the caches synced")
	}
	if err := f.Run(ctx); !errors.Is(err, informer.ErrStarted) {
		t.Errorf("second Run = %v, want ErrStarted", err)
	}
	late, err := informer.For(f, informer.Scope{Resource: configMapsGVR, Namespace: "late"}, newLW)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WaitForCacheSync(ctx); err != nil || !late.HasSynced() {
		t.Fatalf("an informer added while running: WaitForCacheSync = %v, synced %v", err, late.HasSynced())
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}

// Remove stops one informer of a running factory and forgets it: its
// metrics leave the registry, the others keep running, and the next For of
// its scope makes a new one, which starts and registers its own.
func TestFactory_removeStopsAnInformerAndForgetsIt(t *testing.T) {
	leakcheck.Check(t)
	reg := prometheus.NewRegistry()
	f := informer.NewFactory(informer.FactoryOptions{Reflector: reflector.Options{DisableWatchList: true},
		Telemetry: telemetry.Telemetry{Registerer: reg}})
	srv := newFakeServer("a")
	newLW := func() reflector.ListerWatcher[*corev1.ConfigMap] { return srv }
	gone, other := informer.Scope{Resource: configMapsGVR, Namespace: "gone"}, informer.Scope{Resource: configMapsGVR, Namespace: "other"}
	removed, err := informer.For(f, gone, newLW)
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := informer.For(f, other, newLW)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	if err := f.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	series := func(informer string) int {
		families, _ := reg.Gather()
		n := 0
		for _, fam := range families {
			for _, m := range fam.GetMetric() {
				for _, l := range m.GetLabel() {
					if v := l.GetValue(); (l.GetName() == "informer" || l.GetName() == "name") && v == informer {
						n++
					}
				}
			}
		}
		return n
	}
	name := removed.Name()
	if series(name) == 0 {
		t.Fatalf("no series of %s before Remove", name)
	}
	if !f.Remove(gone) || f.Remove(gone) {
		t.Fatal("Remove = false for the informer, or true a second time")
	}
	if n := series(name); n != 0 {
		t.Errorf("%d series of the removed informer left", n)
	}
	if len(f.Statuses()) != 1 || !kept.HasSynced() {
		t.Errorf("after Remove: %d statuses, the other synced %v; want 1, true", len(f.Statuses()), kept.HasSynced())
	}
	again, err := informer.For(f, gone, newLW)
	if err != nil || again == removed {
		t.Fatalf("For after Remove = %p, %v; want a new informer", again, err)
	}
	if err := f.WaitForCacheSync(ctx); err != nil || !again.HasSynced() {
		t.Fatalf("the new informer: WaitForCacheSync = %v, synced %v", err, again.HasSynced())
	}
}

// waitForSyncError starts an informer from f and returns WaitForCacheSync's
// error after a few seconds.
func waitForSyncError(t *testing.T, f *informer.Factory) error {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	err := f.WaitForCacheSync(wctx)
	if err == nil {
		t.Fatal("WaitForCacheSync = nil, want an error")
	}
	t.Log(err)
	return err
}

func TestFactory_waitForCacheSyncNamesA403WithItsVerbAndResource(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	cfg := rest.CopyConfig(srv.Config())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "nobody"} // no RBAC grants
	cms := configMaps(t, cfg, ns)
	f := informer.NewFactory(informer.FactoryOptions{Reflector: reflector.Options{DisableWatchList: true}})
	if _, err := informer.For(f, informer.Scope{Resource: configMapsGVR, Namespace: ns}, func() reflector.ListerWatcher[*corev1.ConfigMap] {
		return listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{})
	}); err != nil {
		t.Fatal(err)
	}
	err := waitForSyncError(t, f)
	msg := err.Error()
	for _, want := range []string{"configmaps/v1 in namespace " + ns, "forbidden (403)", "may not list", `cannot list resource "configmaps"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	var rerr *reflector.Error
	if !errors.As(err, &rerr) || rerr.Op != reflector.OpList || rerr.Code != 403 || rerr.Resource != "configmaps/v1 in namespace "+ns {
		t.Errorf("errors.As(err, *reflector.Error) gives %+v, want the 403 of the list", rerr)
	}
}

func TestFactory_waitForCacheSyncNamesAMissingResource(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	dyn, err := dynamic.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	f := informer.NewFactory(informer.FactoryOptions{Reflector: reflector.Options{DisableWatchList: true}})
	if _, err := informer.For(f, informer.Scope{Resource: gvr, Namespace: ns}, func() reflector.ListerWatcher[*unstructured.Unstructured] {
		return listwatch.Dynamic(dyn.Resource(gvr).Namespace(ns), listwatch.Options{})
	}); err != nil {
		t.Fatal(err)
	}
	msg := waitForSyncError(t, f).Error()
	for _, want := range []string{"widgets.example.com/v1", "resource not found (404)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
}
