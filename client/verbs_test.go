package client_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/client"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/examples/foo/config"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/object"
)

func TestClient_everyVerbOnAConfigMapOverProtobuf(t *testing.T) {
	f := newFixture(t)
	cms := f.configMaps()
	ctx := t.Context()
	name := object.ObjectName{Namespace: f.ns, Name: "a"}

	created, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: f.ns},
		Data: map[string]string{"k": "created"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.ResourceVersion == "" || created.Data["k"] != "created" {
		t.Fatalf("create returned %+v", created)
	}
	for _, n := range []string{"b", "c"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: f.ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	got, err := cms.Get(ctx, name)
	if err != nil || got.Data["k"] != "created" {
		t.Fatalf("get: %v, %+v", err, got)
	}

	list, err := cms.List(ctx, f.ns, metav1.ListOptions{Limit: 1}) // three pages
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range list {
		names = append(names, cm.Name)
	}
	if !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Errorf("list in pages of 1 = %v, want [a b c]", names)
	}

	got.Data["k"] = "updated"
	updated, err := cms.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil || updated.Data["k"] != "updated" {
		t.Fatalf("update: %v, %+v", err, updated)
	}

	patched, err := cms.Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"p":"patched"}}`), metav1.PatchOptions{})
	if err != nil || patched.Data["p"] != "patched" || patched.Data["k"] != "updated" {
		t.Fatalf("patch: %v, %+v", err, patched)
	}

	applied, err := cms.Apply(ctx, corev1ac.ConfigMap("d", f.ns).WithData(map[string]string{"a": "1"}),
		metav1.ApplyOptions{FieldManager: "test"})
	if err != nil || applied.Data["a"] != "1" || applied.Name != "d" {
		t.Fatalf("apply: %v, %+v", err, applied)
	}
	_, err = cms.Apply(ctx, corev1ac.ConfigMap("d", f.ns).WithData(map[string]string{"a": "2"}),
		metav1.ApplyOptions{FieldManager: "other"})
	if !apierrors.IsConflict(err) {
		t.Errorf("apply of a field another manager owns: %v, want a conflict", err)
	}
	forced, err := cms.Apply(ctx, corev1ac.ConfigMap("d", f.ns).WithData(map[string]string{"a": "2"}),
		metav1.ApplyOptions{FieldManager: "other", Force: true})
	if err != nil || forced.Data["a"] != "2" {
		t.Fatalf("forced apply: %v, %+v", err, forced)
	}

	if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, name); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: %v, want NotFound", err)
	}
	if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("second delete: %v, want NotFound", err)
	}
	if seen := f.wire.seen("configmaps"); !seen["application/vnd.kubernetes.protobuf"] || seen["application/json"] {
		t.Errorf("ConfigMap responses came as %v, want protobuf only", seen)
	}
}

func TestClient_everyVerbOnACustomResourceOverJSON(t *testing.T) {
	f := newFixture(t)
	if err := apiserver.InstallCRDs(t.Context(), f.cfg, config.CRDs); err != nil {
		t.Fatal(err)
	}
	foos := client.New[*v1alpha1.Foo](f.d, f.s)
	ctx := t.Context()
	name := object.ObjectName{Namespace: f.ns, Name: "a"}
	replicas := int32(1)
	newFoo := func(n string) *v1alpha1.Foo {
		return &v1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: f.ns},
			Spec: v1alpha1.FooSpec{DeploymentName: n + "-dep", Replicas: &replicas}}
	}

	created, err := foos.Create(ctx, newFoo("a"), metav1.CreateOptions{})
	if err != nil || created.ResourceVersion == "" || created.Spec.DeploymentName != "a-dep" {
		t.Fatalf("create: %v, %+v", err, created)
	}
	if _, err := foos.Create(ctx, newFoo("b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := foos.Create(ctx, newFoo("b"), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: %v, want AlreadyExists", err)
	}
	list, err := foos.List(ctx, f.ns, metav1.ListOptions{})
	if err != nil || len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" {
		t.Fatalf("list: %v, %d items", err, len(list))
	}

	got, err := foos.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.DeploymentName = "renamed"
	got.Status.Message = "ignored by a main-resource update"
	updated, err := foos.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil || updated.Spec.DeploymentName != "renamed" || updated.Status.Message != "" {
		t.Fatalf("update: %v, %+v", err, updated)
	}

	patched, err := foos.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{})
	if err != nil || *patched.Spec.Replicas != 3 {
		t.Fatalf("patch: %v, %+v", err, patched)
	}

	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"deploymentName": "applied", "replicas": int64(2)}}}
	u.SetName("c")
	u.SetNamespace(f.ns)
	applied, err := foos.Apply(ctx, client.ApplyObject(u), metav1.ApplyOptions{FieldManager: "test"})
	if err != nil || applied.Spec.DeploymentName != "applied" || *applied.Spec.Replicas != 2 {
		t.Fatalf("apply of an unstructured object: %v, %+v", err, applied)
	}

	t.Run("status subresource", func(t *testing.T) {
		patched.Status.AvailableReplicas = 2
		patched.Spec.DeploymentName = "ignored by a status update"
		st, err := foos.UpdateStatus(ctx, patched, metav1.UpdateOptions{})
		if err != nil || st.Status.AvailableReplicas != 2 || st.Spec.DeploymentName != "renamed" {
			t.Fatalf("update status: %v, %+v", err, st)
		}
		st, err = foos.PatchStatus(ctx, name, types.MergePatchType, []byte(`{"status":{"message":"patched"}}`), metav1.PatchOptions{})
		if err != nil || st.Status.Message != "patched" || st.Status.AvailableReplicas != 2 {
			t.Fatalf("patch status: %v, %+v", err, st)
		}
		su := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"availableReplicas": int64(5)}}}
		su.SetName("c")
		su.SetNamespace(f.ns)
		st, err = foos.ApplyStatus(ctx, client.ApplyObject(su), metav1.ApplyOptions{FieldManager: "test-status"})
		if err != nil || st.Status.AvailableReplicas != 5 || st.Spec.DeploymentName != "applied" {
			t.Fatalf("apply status: %v, %+v", err, st)
		}
	})

	t.Run("a typed object applied", func(t *testing.T) {
		typed := newFoo("d") // apiVersion and kind left empty: the client fills them in
		st, err := foos.Apply(ctx, client.ApplyObject(typed), metav1.ApplyOptions{FieldManager: "typed"})
		if err != nil || st.Spec.DeploymentName != "d-dep" || st.UID == "" {
			t.Fatalf("apply: %v, %+v", err, st)
		}
		status := &v1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: f.ns}, Status: v1alpha1.FooStatus{AvailableReplicas: 4}}
		st, err = foos.ApplyStatus(ctx, client.ApplyObject(status), metav1.ApplyOptions{FieldManager: "typed-status"})
		if err != nil || st.Status.AvailableReplicas != 4 || st.Spec.DeploymentName != "d-dep" {
			t.Fatalf("apply status: %v, %+v", err, st)
		}
		for _, mf := range st.ManagedFields {
			if mf.Manager == "typed-status" && (mf.Subresource != "status" || strings.Contains(string(mf.FieldsV1.Raw), "spec")) {
				t.Errorf("the typed status apply owns %s of subresource %q, want status fields only", mf.FieldsV1.Raw, mf.Subresource)
			}
		}
	})

	if err := foos.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := foos.Get(ctx, name); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: %v, want NotFound", err)
	}
	if seen := f.wire.seen("foos"); !seen["application/json"] || seen["application/vnd.kubernetes.protobuf"] {
		t.Errorf("Foo responses came as %v, want JSON only", seen)
	}
}

func TestClient_aStaleWriteIsAConflict(t *testing.T) {
	f := newFixture(t)
	if err := apiserver.InstallCRDs(t.Context(), f.cfg, config.CRDs); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cms := f.configMaps()
	first, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: f.ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changed := first.DeepCopy()
	changed.Data = map[string]string{"k": "v"} // an update that changes nothing keeps the resource version
	if _, err := cms.Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = cms.Update(ctx, first, metav1.UpdateOptions{}) // first's resource version is now stale
	if !apierrors.IsConflict(err) {
		t.Errorf("stale ConfigMap update: %v, want a conflict", err)
	}

	foos := client.New[*v1alpha1.Foo](f.d, f.s)
	replicas := int32(1)
	foo, err := foos.Create(ctx, &v1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: f.ns},
		Spec: v1alpha1.FooSpec{DeploymentName: "a", Replicas: &replicas}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changedFoo := foo.DeepCopy()
	changedFoo.Status.Message = "changed"
	if _, err := foos.UpdateStatus(ctx, changedFoo, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, write := range []struct {
		name string
		fn   func() error
	}{
		{"update", func() error { _, err := foos.Update(ctx, foo, metav1.UpdateOptions{}); return err }},
		{"update status", func() error { _, err := foos.UpdateStatus(ctx, foo, metav1.UpdateOptions{}); return err }},
	} {
		err := write.fn()
		if !apierrors.IsConflict(err) {
			t.Errorf("stale Foo %s: %v, want a conflict", write.name, err)
		}
		var status apierrors.APIStatus
		if !errors.As(err, &status) {
			t.Errorf("stale Foo %s: %v does not wrap the server's status", write.name, err)
		}
	}
}

func TestClient_concurrentFirstCallsAllSucceed(t *testing.T) {
	f := newFixture(t)
	leakcheck.Check(t)
	if _, err := f.configMaps().Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: f.ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := client.New[*corev1.ConfigMap](f.newDiscovery(t), f.s) // resolves its resource at the first calls, all at once
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := cms.Get(t.Context(), object.ObjectName{Namespace: f.ns, Name: "a"})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
