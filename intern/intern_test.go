package intern_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ctrlkit/ctrlkit/intern"
)

// podJSON is a Pod as the API server sends it; decoding it twice gives two
// objects that share no string, as two list items do.
const podJSON = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-7d9f8c6b5-x2x4q","generateName":"web-7d9f8c6b5-",
"namespace":"shop","uid":"4f3c2b1a-0000-4000-8000-000000000001","labels":{"app":"web","pod-template-hash":"7d9f8c6b5"},
"annotations":{"prometheus.io/scrape":"true"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet",
"name":"web-7d9f8c6b5","uid":"0c1d2e3f-0000-4000-8000-000000000050","controller":true}],"finalizers":["example.com/guard"]},
"spec":{"containers":[{"name":"app","image":"registry.example.com/shop/web:v1.2.0","imagePullPolicy":"IfNotPresent",
"env":[{"name":"LOG_LEVEL","value":"info"}],"resources":{"limits":{"cpu":"500m"}},
"volumeMounts":[{"name":"config","mountPath":"/etc/app"}]}],"volumes":[{"name":"config","configMap":{"name":"web-config"}}],
"nodeName":"node-007","serviceAccountName":"web","tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute"}]},
"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}],"hostIP":"10.0.0.7","podIP":"10.244.1.9",
"containerStatuses":[{"name":"app","image":"registry.example.com/shop/web:v1.2.0","imageID":"registry.example.com/shop/web@sha256:abc","ready":true,"restartCount":0}]}}`

func decode(t *testing.T) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := json.Unmarshal([]byte(podJSON), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

func same(a, b string) bool { return a == b && unsafe.StringData(a) == unsafe.StringData(b) }

func TestObject_podsShareRepeatedStringsAndKeepTheirValues(t *testing.T) {
	a, b := decode(t), decode(t)
	want := decode(t)
	tab := intern.NewTable(0)
	tab.Object(a)
	tab.Object(b)
	if !equality.Semantic.DeepEqual(a, want) {
		t.Fatal("interning changed the object")
	}
	for _, f := range []struct {
		name string
		a, b string
	}{
		{"namespace", a.Namespace, b.Namespace},
		{"generateName", a.GenerateName, b.GenerateName},
		{"label value", a.Labels["app"], b.Labels["app"]},
		{"owner name", a.OwnerReferences[0].Name, b.OwnerReferences[0].Name},
		{"owner UID", string(a.OwnerReferences[0].UID), string(b.OwnerReferences[0].UID)},
		{"finalizer", a.Finalizers[0], b.Finalizers[0]},
		{"image", a.Spec.Containers[0].Image, b.Spec.Containers[0].Image},
		{"env value", a.Spec.Containers[0].Env[0].Value, b.Spec.Containers[0].Env[0].Value},
		{"mount path", a.Spec.Containers[0].VolumeMounts[0].MountPath, b.Spec.Containers[0].VolumeMounts[0].MountPath},
		{"volume source", a.Spec.Volumes[0].ConfigMap.Name, b.Spec.Volumes[0].ConfigMap.Name},
		{"node", a.Spec.NodeName, b.Spec.NodeName},
		{"toleration", a.Spec.Tolerations[0].Key, b.Spec.Tolerations[0].Key},
		{"condition type", string(a.Status.Conditions[0].Type), string(b.Status.Conditions[0].Type)},
		{"image ID", a.Status.ContainerStatuses[0].ImageID, b.Status.ContainerStatuses[0].ImageID},
	} {
		if !same(f.a, f.b) {
			t.Errorf("%s %q is not shared", f.name, f.a)
		}
	}
	if fmt.Sprintf("%p", a.Spec.Containers[0].Resources.Limits) != fmt.Sprintf("%p", b.Spec.Containers[0].Resources.Limits) {
		t.Error("equal resource limits are not shared")
	}
	c := decode(t)
	c.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("501m")
	tab.Object(c)
	if got := c.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU]; got.String() != "501m" {
		t.Errorf("a different limit became %s", got.String())
	}
	for k := range a.Labels {
		for k2 := range b.Labels {
			if k == k2 && !same(k, k2) {
				t.Errorf("label key %q is not shared", k)
			}
		}
	}
	for _, f := range []struct{ name, a, b string }{
		{"name", a.Name, b.Name}, {"uid", string(a.UID), string(b.UID)}, {"pod IP", a.Status.PodIP, b.Status.PodIP},
	} {
		if same(f.a, f.b) {
			t.Errorf("%s %q, unique to an object, was interned", f.name, f.a)
		}
	}
}

func TestObject_leavesLongValuesAndUnknownTypesAlone(t *testing.T) {
	long := string(make([]byte, 200))
	a, b := decode(t), decode(t)
	a.Annotations["blob"], b.Annotations["blob"] = long, string([]byte(long))
	tab := intern.NewTable(0)
	tab.Object(a)
	tab.Object(b)
	if same(a.Annotations["blob"], b.Annotations["blob"]) {
		t.Error("a 200-byte annotation value was interned")
	}
	tab.Object(nil)        // no panic
	tab.Object("a string") // not an API object: nothing to do
}

func TestTable_aFullTableLosesSharingNeverValues(t *testing.T) {
	tab := intern.NewTable(1) // one slot: every other string evicts the last
	for i := range 1000 {
		s := fmt.Sprint("value-", i%3)
		if got := tab.String(s); got != s {
			t.Fatalf("String(%q) = %q", s, got)
		}
	}
	x, y := tab.String(strings.Clone("same")), tab.String(strings.Clone("same"))
	if !same(x, y) {
		t.Error("a repeated string was not shared by a one-slot table")
	}
	if a, b := intern.String(strings.Clone("shared")), intern.String(strings.Clone("shared")); !same(a, b) {
		t.Error("intern.String did not share")
	}
}

func BenchmarkObject_pod(b *testing.B) {
	var p corev1.Pod
	if err := json.Unmarshal([]byte(podJSON), &p); err != nil {
		b.Fatal(err)
	}
	tab := intern.NewTable(0)
	for b.Loop() {
		tab.Object(&p)
	}
}

// BenchmarkObject_freshPod interns Pods as a decoder leaves them: every
// string newly allocated, none seen by the table's slots yet as this copy.
func BenchmarkObject_freshPod(b *testing.B) {
	tab := intern.NewTable(0)
	pods := make([]corev1.Pod, 1000)
	for i := 0; i < b.N; i++ {
		if i%len(pods) == 0 {
			b.StopTimer()
			clear(pods)
			for j := range pods {
				if err := json.Unmarshal([]byte(podJSON), &pods[j]); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
		}
		tab.Object(&pods[i%len(pods)])
	}
}

// Pods of one workload carry the labels and annotations of its template:
// equal maps are shared whole; a map that differs, or holds a long value,
// keeps its own.
func TestObject_equalLabelAndAnnotationMapsAreSharedWhole(t *testing.T) {
	tab := intern.NewTable(0)
	tab.ShareMaps()
	a, b, c, d := decode(t), decode(t), decode(t), decode(t)
	c.Labels["app"] = "other"
	d.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = strings.Repeat("x", 200)
	for _, p := range []*corev1.Pod{a, b, c, d} {
		tab.Object(p)
	}
	ptr := func(m map[string]string) string { return fmt.Sprintf("%p", m) }
	if ptr(a.Labels) != ptr(b.Labels) || ptr(a.Annotations) != ptr(b.Annotations) {
		t.Error("equal label or annotation maps are not shared")
	}
	if ptr(c.Labels) == ptr(a.Labels) || c.Labels["app"] != "other" || a.Labels["app"] != "web" {
		t.Errorf("different labels were merged: %v and %v", a.Labels, c.Labels)
	}
	if ptr(d.Annotations) == ptr(a.Annotations) || len(d.Annotations) != 2 || len(a.Annotations) != 1 {
		t.Errorf("an annotation map with a long value was shared: %v", d.Annotations)
	}
	if !equality.Semantic.DeepEqual(a.Labels, decode(t).Labels) {
		t.Errorf("sharing changed the labels: %v", a.Labels)
	}
}

func TestObject_mapsAreNotSharedByDefault(t *testing.T) {
	tab := intern.NewTable(0)
	a, b := decode(t), decode(t)
	tab.Object(a)
	tab.Object(b)
	if fmt.Sprintf("%p", a.Labels) == fmt.Sprintf("%p", b.Labels) {
		t.Error("equal label maps are shared without ShareMaps")
	}
	for k := range a.Labels {
		for k2 := range b.Labels {
			if k == k2 && !same(k, k2) {
				t.Errorf("label key %q is not interned", k)
			}
		}
	}
}
