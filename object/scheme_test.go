package object_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/object"
)

func TestAddToScheme_registersTheTypesAndTheOptionsOfTheirGroupVersion(t *testing.T) {
	gv := schema.GroupVersion{Group: "example.com", Version: "v1"}
	s := runtime.NewScheme()
	if err := object.AddToScheme(gv, &corev1.ConfigMap{}, &corev1.ConfigMapList{})(s); err != nil {
		t.Fatal(err)
	}
	for obj, kind := range map[runtime.Object]string{&corev1.ConfigMap{}: "ConfigMap", &corev1.ConfigMapList{}: "ConfigMapList",
		&metav1.ListOptions{}: "ListOptions"} {
		gvks, _, err := s.ObjectKinds(obj)
		if err != nil || len(gvks) != 1 || gvks[0] != gv.WithKind(kind) {
			t.Errorf("%T registered as %v, %v; want %v", obj, gvks, err, gv.WithKind(kind))
		}
	}
}
