package apply_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/object"
)

// cached is a Reader holding one object.
type cached[T object.Object] struct{ obj T }

func (c cached[T]) Get(object.ObjectName) (T, bool) { return c.obj, true }

// Whoever may update an object may also write its managedFields: an
// element duplicating one the controller applies, with the controller's
// entry put back as it was, must not make the apply look done. The
// server's apply merges the duplicate away; Holds must not skip it.
func TestApply_sendsTheApplyWhenSomeoneDuplicatedAnElementItOwns(t *testing.T) {
	srv := env.Get(t)
	ns, kube, ctx := srv.Namespace(t), apiserver.Client(t, srv.Config()), t.Context()
	deploys := kube.AppsV1().Deployments(ns)
	labels := map[string]string{"app": "web"}
	cfg := appsv1ac.Deployment("web", ns).WithSpec(appsv1ac.DeploymentSpec().WithReplicas(0).
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
		WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(corev1ac.PodSpec().WithContainers(
			corev1ac.Container().WithName("app").WithImage("web:1").WithEnv(corev1ac.EnvVar().WithName("MODE").WithValue("safe"))))))
	opts := metav1.ApplyOptions{FieldManager: "ctrl", Force: true}
	d, err := deploys.Apply(ctx, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	env := func(d *appsv1.Deployment) []corev1.EnvVar { return d.Spec.Template.Spec.Containers[0].Env }
	ctrlEntry := d.ManagedFields
	// A second MODE (the last one wins in the container), then the
	// controller's entry restored.
	d.Spec.Template.Spec.Containers[0].Env = append(env(d), corev1.EnvVar{Name: "MODE", Value: "evil"})
	if d, err = deploys.Update(ctx, d, metav1.UpdateOptions{FieldManager: "intruder"}); err != nil {
		t.Fatal(err)
	}
	d.ManagedFields = ctrlEntry
	if d, err = deploys.Update(ctx, d, metav1.UpdateOptions{FieldManager: "intruder"}); err != nil {
		t.Fatal(err)
	}
	if len(env(d)) != 2 {
		t.Fatalf("the intruder's updates left env %v; want the duplicate stored", env(d))
	}
	if apply.Holds(d, cfg, "ctrl") {
		t.Errorf("Holds of an object with env %v = true; want false: the apply would remove the duplicate", env(d))
	}
	_, res, err := apply.Apply(ctx, deploys, cached[*appsv1.Deployment]{d}, cfg, opts)
	if err != nil || res == apply.Unchanged {
		t.Fatalf("Apply = %v, %v; want the apply sent", res, err)
	}
	now, err := deploys.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []corev1.EnvVar{{Name: "MODE", Value: "safe"}}; !slices.Equal(env(now), want) {
		t.Errorf("env after Apply = %v; want %v", env(now), want)
	}
}

// forgedFinalizers is a ConfigMap with n finalizers and an Apply entry of
// "ctrl" claiming every one: what anyone who may update it can store.
func forgedFinalizers(n int) *corev1.ConfigMap {
	fins := make([]string, n)
	var b strings.Builder
	b.WriteString(`{"f:data":{"f:k":{}},"f:metadata":{"f:finalizers":{`)
	for i := range n {
		fins[i] = fmt.Sprintf("example.com/f%06d", i)
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"v:\"%s\"":{}`, fins[i])
	}
	b.WriteString(`}}}`)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", Finalizers: fins,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "ctrl", Operation: metav1.ManagedFieldsOperationApply,
				APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(b.String())}}}},
		Data: map[string]string{"k": "v"},
	}
}

// BenchmarkHolds_forgedEntry: an entry claiming 20,000 finalizers against
// a configuration of one. The counts differ, so Holds answers without
// looking for any (it searched the list once per claimed element: 2.7 s).
func BenchmarkHolds_forgedEntry(b *testing.B) {
	cur := forgedFinalizers(20000)
	cfg := corev1ac.ConfigMap("cm", "ns").WithFinalizers("example.com/f000000").WithData(map[string]string{"k": "v"})
	for b.Loop() {
		if apply.Holds(cur, cfg, "ctrl") {
			b.Fatal("Holds = true; want false")
		}
	}
}

// Field sets nested deeper than any server stores are refused (not held),
// without a stack frame per level.
func TestHolds_aFieldSetNestedTooDeepIsNotHeld(t *testing.T) {
	cfg := corev1ac.ConfigMap("cm", "ns").WithData(map[string]string{"k": "v"})
	for _, depth := range []int{10_001, 1_000_000} {
		raw := strings.Repeat(`{"f:a":`, depth) + "{}" + strings.Repeat("}", depth)
		cur := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "ctrl", Operation: metav1.ManagedFieldsOperationApply,
				APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)}}}},
			Data: map[string]string{"k": "v"}}
		if apply.Holds(cur, cfg, "ctrl") {
			t.Errorf("depth %d: Holds = true; want false", depth)
		}
	}
}
