package apply_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/ctrlkit/ctrlkit/apply"
)

// Holds decides, from the field manager's own entry of managedFields,
// whether a server-side apply would change anything: apply.Apply sends
// the request only when it would. Here the cached Secret is as the
// server stores it after the manager "mirror" applied data a=1.
func ExampleHolds() {
	cached := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default", ResourceVersion: "42",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "mirror", Operation: metav1.ManagedFieldsOperationApply,
				APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:a":{}}}`)}}}},
		Data: map[string][]byte{"a": []byte("1")},
		Type: corev1.SecretTypeOpaque,
	}
	same := corev1ac.Secret("app", "default").WithData(map[string][]byte{"a": []byte("1")})
	changed := corev1ac.Secret("app", "default").WithData(map[string][]byte{"a": []byte("2")})
	more := corev1ac.Secret("app", "default").WithData(map[string][]byte{"a": []byte("1"), "b": []byte("2")})
	fmt.Println("same data:", apply.Holds(cached, same, "mirror"))
	fmt.Println("a changed:", apply.Holds(cached, changed, "mirror"))
	fmt.Println("b added:", apply.Holds(cached, more, "mirror"))
	fmt.Println("as another manager:", apply.Holds(cached, same, "someone-else"))
	// Output:
	// same data: true
	// a changed: false
	// b added: false
	// as another manager: false
}
