package v1alpha1_test

import (
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/apiserver"
	foo "github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/examples/foo/config"
)

var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

func newFoo(name, deployment string, replicas int32) *foo.Foo {
	return &foo.Foo{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: foo.FooSpec{DeploymentName: deployment, Replicas: &replicas}}
}

func TestClient_createsReadsWatchesAndUpdatesStatusOfFoos(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	if err := apiserver.InstallCRDs(t.Context(), srv.Config(), config.CRDs); err != nil {
		t.Fatal(err)
	}
	c, err := foo.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	foos := c.Foos(ns)
	list, err := foos.List(t.Context(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("list = %v, %v; want an empty list", list, err)
	}
	w, err := foos.Watch(t.Context(), metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	created, err := foos.Create(t.Context(), newFoo("a", "a-deploy", 3))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		f, ok := ev.Object.(*foo.Foo)
		if ev.Type != watch.Added || !ok || f.Name != "a" || *f.Spec.Replicas != 3 {
			t.Fatalf("event %s %#v, want ADDED Foo a with 3 replicas", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event")
	}

	created.Status.AvailableReplicas = 2
	if _, err := foos.UpdateStatus(t.Context(), created); err != nil {
		t.Fatal(err)
	}
	got, err := foos.Get(t.Context(), "a")
	if err != nil || got.Status.AvailableReplicas != 2 || got.Spec.DeploymentName != "a-deploy" {
		t.Fatalf("get = %+v, %v; want status 2 and the spec unchanged", got, err)
	}
	got.Spec.DeploymentName = "renamed"
	got.Status.AvailableReplicas = 99 // ignored: the status subresource owns it
	updated, err := foos.Update(t.Context(), got)
	if err != nil || updated.Spec.DeploymentName != "renamed" || updated.Status.AvailableReplicas != 2 {
		t.Fatalf("update = %+v, %v; want the new spec and status left at 2", updated, err)
	}
	if err := foos.Delete(t.Context(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestCRD_rejectsInvalidFoos(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	if err := apiserver.InstallCRDs(t.Context(), srv.Config(), config.CRDs); err != nil {
		t.Fatal(err)
	}
	c, err := foo.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		foo  *foo.Foo
	}{
		{"negative replicas", newFoo("neg", "d", -1)},
		{"too many replicas", newFoo("many", "d", 1000)},
		{"no deployment name", newFoo("noname", "", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Foos(ns).Create(t.Context(), tc.foo)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create = %v, want 422 Invalid", err)
			}
		})
	}
}

func TestFoo_DeepCopyIsIndependent(t *testing.T) {
	a := newFoo("a", "d", 1)
	a.Labels = map[string]string{"k": "v"}
	b := a.DeepCopy()
	*b.Spec.Replicas = 5
	b.Labels["k"] = "changed"
	if *a.Spec.Replicas != 1 || a.Labels["k"] != "v" {
		t.Fatalf("changing the copy changed the original: %+v", a)
	}
	l := &foo.FooList{Items: []foo.Foo{*a}}
	lc := l.DeepCopyObject().(*foo.FooList)
	*lc.Items[0].Spec.Replicas = 7
	if *l.Items[0].Spec.Replicas != 1 {
		t.Fatal("changing the list copy changed the original")
	}
}
