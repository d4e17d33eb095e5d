package listwatch_test

import (
	"context"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/listwatch"
)

// With InternMetadata, Kind decodes the same objects as the REST client,
// from list pages and watch frames, and objects share their repeated
// metadata strings.
func TestKind_InternMetadataDecodesTheSameObjectsSharingTheirStrings(t *testing.T) {
	srv := env.Get(t)
	// A namespace of a fixed name, not srv.Namespace's random one: the
	// decoder's table is lossy (intern.Table: a pair of slots per hash, the
	// least recently taken string evicted from a crowded pair), and a random
	// name whose hash falls in the pair of two of the objects' strings makes
	// them miss in turn, so that some are not shared, in about one run in a
	// hundred. With every string fixed, which pairs are crowded is too: this
	// name crowds none that the test checks.
	ns := "listwatch-intern-sharing"
	if _, err := apiserver.Client(t, srv.Config()).CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg := listwatch.PreferProtobuf(srv.Config())
	cms := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(ns)
	removeObjects := func() { // the namespace stays (a later run reuses it): its objects go
		for _, name := range []string{"a", "b"} {
			cm, err := cms.Get(context.Background(), name, metav1.GetOptions{})
			if err == nil {
				cm.Finalizers = nil
				_, _ = cms.Update(context.Background(), cm, metav1.UpdateOptions{})
			}
			_ = cms.Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	}
	removeObjects() // left by a run that did not finish
	t.Cleanup(removeObjects)
	meta := func(name string) metav1.ObjectMeta {
		yes := true
		return metav1.ObjectMeta{Name: name,
			Labels:          map[string]string{"app": "web", "tier": "frontend"},
			Annotations:     map[string]string{"owner": "team-a", "long": string(make([]byte, 100))},
			Finalizers:      []string{"example.com/keep"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "0c1d2e3f", Controller: &yes}},
		}
	}
	for _, name := range []string{"a", "b"} {
		if _, err := cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: meta(name), Data: map[string]string{"k": name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lw := listwatch.Kind[*corev1.ConfigMap](discoveryOf(t, cfg, func(*runtime.Scheme) error { return nil }),
		corev1.SchemeGroupVersion.WithKind("ConfigMap"), listwatch.KindOptions{Namespace: ns})
	if !lw.InternMetadata() {
		t.Fatal("InternMetadata() = false for ConfigMaps, which Kind decodes itself")
	}

	l, err := lw.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := cms.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 2 || len(want.Items) != 2 {
		t.Fatalf("listed %d, the REST client %d; want 2", len(l.Items), len(want.Items))
	}
	for i, got := range l.Items {
		w := want.Items[i].DeepCopy()
		w.ManagedFields = nil // Kind skips them
		if !equality.Semantic.DeepEqual(got, w) {
			t.Errorf("listed with interning:\n got %+v\nwant %+v", got, w)
		}
	}
	a, b := l.Items[0], l.Items[1]
	same := func(what, x, y string) {
		t.Helper()
		if x != y || unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: %q and %q are not one string", what, x, y)
		}
	}
	same("namespace", a.Namespace, b.Namespace)
	same("label value", a.Labels["app"], b.Labels["app"])
	same("annotation value", a.Annotations["owner"], b.Annotations["owner"])
	same("finalizer", a.Finalizers[0], b.Finalizers[0])
	same("owner kind", a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind)
	if unsafe.StringData(a.Annotations["long"]) == unsafe.StringData(b.Annotations["long"]) {
		t.Error("a 100-byte annotation value was interned: only short ones are")
	}

	w, err := lw.Watch(t.Context(), metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	updated := want.Items[1].DeepCopy()
	updated.Labels["app"] = "web" // unchanged
	updated.Labels["rev"] = "2"
	if updated, err = cms.Update(t.Context(), updated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := firstEvent(t, w)
	got, ok := ev.Object.(*corev1.ConfigMap)
	if ev.Type != watch.Modified || !ok {
		t.Fatalf("watch event %s %T, want Modified *ConfigMap", ev.Type, ev.Object)
	}
	updated.ManagedFields = nil
	if !equality.Semantic.DeepEqual(got, updated) {
		t.Errorf("watched with interning:\n got %+v\nwant %+v", got, updated)
	}
	same("namespace, listed and watched", a.Namespace, got.Namespace)
	same("label value, listed and watched", a.Labels["app"], got.Labels["app"])
}
