package informer

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

func deployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "nginx:1", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.5")}}}}}}},
	}
}

func TestDiffObjects_namesEachChangedFieldAsJSONSpellsIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*appsv1.Deployment)
		want   []FieldChange
	}{
		{"a label changed", func(d *appsv1.Deployment) { d.Labels["app"] = "db" },
			[]FieldChange{{Path: `.metadata.labels["app"]`, Was: `"web"`, Now: `"db"`}}},
		{"a label added", func(d *appsv1.Deployment) { d.Labels["x"] = "y" },
			[]FieldChange{{Path: `.metadata.labels["x"]`, Was: "(absent)", Now: `"y"`}}},
		{"a label removed", func(d *appsv1.Deployment) { delete(d.Labels, "app") },
			[]FieldChange{{Path: `.metadata.labels["app"]`, Was: `"web"`, Now: "(absent)"}}},
		{"the replicas written through their pointer", func(d *appsv1.Deployment) { *d.Spec.Replicas = 5 },
			[]FieldChange{{Path: ".spec.replicas", Was: "2", Now: "5"}}},
		{"an image in a list", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:2" },
			[]FieldChange{{Path: ".spec.template.spec.containers[0].image", Was: `"nginx:1"`, Now: `"nginx:2"`}}},
		{"a quantity's value", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("1")
		}, []FieldChange{{Path: `.spec.template.spec.containers[0].resources.limits["cpu"]`, Was: "500m", Now: "1"}}},
		{"a map set where there was none", func(d *appsv1.Deployment) { d.Annotations = map[string]string{} },
			[]FieldChange{{Path: ".metadata.annotations", Was: "nil", Now: "map[]"}}},
		{"two fields", func(d *appsv1.Deployment) { d.Name = "other"; d.Spec.Paused = true },
			[]FieldChange{{Path: ".metadata.name", Was: `"web"`, Now: `"other"`}, {Path: ".spec.paused", Was: "false", Now: "true"}}},
		{"nothing", func(*appsv1.Deployment) {}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cached := deployment()
			copied := cached.DeepCopy()
			tc.mutate(cached)
			if got := diffObjects(cached, copied); !slices.Equal(got, tc.want) {
				t.Errorf("diff = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Quantity.String fills in a cached string form in place: reading a
// cached quantity must not count as changing it.
func TestDiffObjects_aQuantityReadThroughStringIsNoChange(t *testing.T) {
	cached := deployment()
	copied := cached.DeepCopy()
	limits := cached.Spec.Template.Spec.Containers[0].Resources.Limits
	cpu := limits[corev1.ResourceCPU]
	_ = cpu.String()
	limits[corev1.ResourceCPU] = cpu // the map now holds the quantity with its string form filled in
	if got := diffObjects(cached, copied); got != nil {
		t.Errorf("diff = %+v, want none", got)
	}
}

func TestDiffObjects_namesFieldsOfUnstructuredObjectsByTheirKeys(t *testing.T) {
	cached := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "a", "namespace": "ns", "labels": map[string]any{"app": "web"}},
		"spec":     map[string]any{"replicas": int64(2), "ports": []any{int64(80)}},
	}}
	copied := cached.DeepCopy()
	cached.Object["spec"].(map[string]any)["replicas"] = int64(3)
	cached.Object["spec"].(map[string]any)["ports"].([]any)[0] = "80"
	want := []FieldChange{{Path: ".spec.ports[0]", Was: "80", Now: `"80"`}, {Path: ".spec.replicas", Was: "2", Now: "3"}}
	got := diffObjects(cached, copied)
	slices.SortFunc(got, func(a, b FieldChange) int { return strings.Compare(a.Path, b.Path) })
	if !slices.Equal(got, want) {
		t.Errorf("diff = %+v, want %+v", got, want)
	}
}

func TestDiffObjects_comparesBytesAndShowsOnlyTheirLength(t *testing.T) {
	cached := &corev1.Secret{Data: map[string][]byte{"k": []byte("v")}}
	copied := cached.DeepCopy()
	cached.Data["k"][0] = 'w'
	want := []FieldChange{{Path: `.data["k"]`, Was: "(1 bytes)", Now: "(1 bytes)"}}
	if got := diffObjects(cached, copied); !slices.Equal(got, want) {
		t.Errorf("diff = %+v, want %+v", got, want)
	}
}
