package v1alpha1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	foo "github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
)

func TestFoo_DeepCopyIsIndependent(t *testing.T) {
	replicas := int32(1)
	a := &foo.Foo{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"k": "v"}},
		Spec: foo.FooSpec{DeploymentName: "d", Replicas: &replicas}}
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
