package projection_test

import (
	"fmt"

	"github.com/ctrlkit/ctrlkit/projection"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodPlacement is all a scheduler-watching controller reads of a Pod.
type PodPlacement struct {
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase corev1.PodPhase `json:"phase"`
	} `json:"status"`
}

func ExamplePlan_Decode() {
	plan, err := projection.New[*PodPlacement, *corev1.Pod]()
	if err != nil {
		fmt.Println(err)
		return
	}
	// The bytes the API server sends inside its envelope.
	raw, err := (&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "node-7", Containers: []corev1.Container{{Name: "web", Image: "shop/web:v3",
			Env: []corev1.EnvVar{{Name: "MODE", Value: "production"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.9"},
	}).Marshal()
	if err != nil {
		fmt.Println(err)
		return
	}
	pod, err := plan.Decode(raw)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(pod.Metadata.Namespace, pod.Metadata.Name, pod.Metadata.Labels, pod.Spec.NodeName, pod.Status.Phase)

	type typo struct {
		Spec struct {
			Node string `json:"node"`
		} `json:"spec"`
	}
	_, err = projection.New[*typo, *corev1.Pod]()
	fmt.Println(err != nil)
	// Output:
	// shop web-0 map[app:web] node-7 Running
	// true
}
