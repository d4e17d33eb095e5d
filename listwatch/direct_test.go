package listwatch

import (
	"bytes"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func managedPod(withManaged bool) *corev1.Pod {
	now := metav1.Now()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"note": "x"}, Finalizers: []string{"ctrlkit.io/cleanup"}},
		Spec:   corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "web:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if withManaged {
		p.ManagedFields = []metav1.ManagedFieldsEntry{
			{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", Time: &now,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:app":{}}}}`)}},
			{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:phase":{}}}`)}, Subresource: "status"},
		}
	}
	return p
}

// FuzzWithoutManagedFields: whatever the bytes, cutting managedFields
// never panics, and when the original decodes, the cut bytes decode to
// the same object but for managedFields (the informer strips any a cut
// left, e.g. in a second metadata field, which no encoder writes).
func FuzzWithoutManagedFields(f *testing.F) {
	for _, p := range []*corev1.Pod{managedPod(true), managedPod(false), {}} {
		b, err := p.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{0x0a, 0x03, 0xba, 0x01, 0x00}) // metadata holding an empty field 23
	f.Fuzz(func(t *testing.T, data []byte) {
		var buf []byte
		cut := withoutManagedFields(data, &buf)
		var want, got corev1.Pod
		if want.Unmarshal(data) != nil {
			return
		}
		if err := got.Unmarshal(cut); err != nil {
			t.Fatalf("the cut bytes do not decode: %v", err)
		}
		if canonical, err := want.Marshal(); err == nil && bytes.Equal(canonical, data) && len(got.ManagedFields) > 0 {
			t.Fatalf("bytes as an encoder writes them kept %d managedFields", len(got.ManagedFields))
		}
		want.ManagedFields, got.ManagedFields = nil, nil
		if !reflect.DeepEqual(&got, &want) {
			t.Fatalf("cut bytes decode to\n%v\nwant\n%v", &got, &want)
		}
	})
}

func TestWithoutManagedFields_keepsBytesWithoutThem(t *testing.T) {
	b, err := managedPod(false).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var buf []byte
	if cut := withoutManagedFields(b, &buf); &cut[0] != &b[0] || len(cut) != len(b) {
		t.Error("bytes without managedFields were copied")
	}
	with, err := managedPod(true).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if cut := withoutManagedFields(with, &buf); len(cut) != len(b) {
		t.Errorf("cut %d bytes to %d, want %d (the same Pod without them)", len(with), len(cut), len(b))
	}
}
