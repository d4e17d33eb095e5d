package manager_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
)

// podView is what a node-placement controller reads of a Pod.
type podView struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase corev1.PodPhase `json:"phase"`
	} `json:"status"`
}

func (p *podView) DeepCopyObject() runtime.Object {
	out := *p
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// placements records, per Pod, the node and phase its reconciles saw.
type placements struct {
	pods store.Reader[*podView]
	mu   sync.Mutex
	seen map[string]string
}

func (r *placements) Reconcile(_ context.Context, n object.ObjectName) (controller.Result, error) {
	p, ok := r.pods.Get(n)
	if !ok {
		return controller.Result{}, nil
	}
	r.mu.Lock()
	r.seen[n.Name] = p.Spec.NodeName + "/" + string(p.Status.Phase)
	r.mu.Unlock()
	return controller.Result{}, nil
}

func TestManager_aProjectionInformerCachesOnlyTheDeclaredFields(t *testing.T) {
	m, _, ns := quietManager(t)
	views := manager.Projection[*podView, corev1.Pod](m, manager.Scope{Namespace: ns})
	full := manager.Informer[*corev1.Pod](m, manager.Scope{Namespace: ns}) // the whole Pod, beside it
	rec := &placements{pods: views.Reader(), seen: map[string]string{}}
	if _, err := manager.NewController(m, "placements", rec, manager.ControllerOptions{}, manager.For(views)); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	if views.Name() == full.Name() || !strings.Contains(views.Name(), " as podView") {
		t.Errorf("informer names %q and %q; want two informers, the projection's named after it", views.Name(), full.Name())
	}
	pods := m.Kube().CoreV1().Pods(ns)
	for _, name := range []string{"a", "b"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: "node-" + name, Containers: []corev1.Container{{Name: "c", Image: "nginx",
				Env: []corev1.EnvVar{{Name: "BIG", Value: strings.Repeat("x", 4096)}}}}}}
		created, err := pods.Create(t.Context(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Phase = corev1.PodRunning
		if _, err := pods.UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "both Pods reconciled as running on their nodes", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.seen["a"] == "node-a/Running" && rec.seen["b"] == "node-b/Running"
	})
	v, ok := views.Reader().Get(object.ObjectName{Namespace: ns, Name: "a"})
	if !ok || v.Labels["app"] != "web" || v.UID == "" || v.ResourceVersion == "" {
		t.Errorf("cached view %+v, want the Pod's metadata", v)
	}
	eventually(t, 30*time.Second, "the full informer to hold both Pods", func() bool { return full.Reader().Len() == 2 })
	// The projection's cache shares equal label maps; the full objects'
	// does not (ShareMaps is on for projections only, by default).
	w, _ := views.Reader().Get(object.ObjectName{Namespace: ns, Name: "b"})
	fa, _ := full.Reader().Get(object.ObjectName{Namespace: ns, Name: "a"})
	fb, _ := full.Reader().Get(object.ObjectName{Namespace: ns, Name: "b"})
	if fmt.Sprintf("%p", v.Labels) != fmt.Sprintf("%p", w.Labels) {
		t.Errorf("the projections' equal labels are two maps (%v, %v), want one shared", v.Labels, w.Labels)
	}
	if fmt.Sprintf("%p", fa.Labels) == fmt.Sprintf("%p", fb.Labels) {
		t.Errorf("the full Pods share their labels map (%v), want one each", fa.Labels)
	}
}

// wrongView names a field a Pod does not have.
type wrongView struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NodeNmae string `json:"nodeNmae"`
	} `json:"spec"`
}

func (w *wrongView) DeepCopyObject() runtime.Object { out := *w; return &out }

func TestManager_aProjectionThatDoesNotFitFailsRunNamingTheField(t *testing.T) {
	srv := env.Get(t)
	leakcheck.Check(t)
	m, err := manager.New(srv.Config(), quiet(t))
	if err != nil {
		t.Fatal(err)
	}
	manager.Projection[*wrongView, corev1.Pod](m, manager.Scope{})
	err = m.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), `wrongView.spec.nodeNmae: PodSpec has no field "nodeNmae"`) {
		t.Fatalf("Run: %v, want an error naming spec.nodeNmae", err)
	}
}
