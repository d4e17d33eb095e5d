package listwatch

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkKind_decodeKeepingManagedFieldsOf decodes a ConfigMap as an
// informer of the manager's does (metadata interned as it decodes), whose
// managedFields hold another writer's entry, keeping them all (what
// KeepManagedFieldsOf cost before its entries were picked on the wire),
// the entries of a field manager that wrote none, or none.
func BenchmarkKind_decodeKeepingManagedFieldsOf(b *testing.B) {
	now := metav1.NewTime(time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC))
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cm-1234", Namespace: "ns-7", UID: "0f8e2c1a-55d1-4c4e-9a57-1a2b3c4d5e6f",
			ResourceVersion: "123456", Labels: map[string]string{"mirror": "true", "app": "web"}, CreationTimestamp: now,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "operatorbench", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "v1", Time: &now, FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{".":{},"f:a":{},"f:b":{}},"f:metadata":{"f:labels":{".":{},"f:app":{},"f:mirror":{}}}}`)}}}},
		Data: map[string]string{"a": "1", "b": "2"},
	}
	raw, err := cm.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts KindOptions
	}{
		{"all", KindOptions{KeepManagedFields: true}},
		{"of=mirror", KindOptions{KeepManagedFieldsOf: []string{"mirror"}}},
		{"none", KindOptions{}},
	} {
		for _, interned := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/interned=%v", c.name, interned), func(b *testing.B) {
				k := &KindListerWatcher[*corev1.ConfigMap]{opts: c.opts}
				k.interner.possible = true
				if interned {
					k.InternMetadata()
				}
				item := protobufItem(k, true)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := item(raw); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
