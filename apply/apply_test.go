package apply_test

import (
	"context"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/client"
	"github.com/ctrlkit/ctrlkit/object"
)

// cache is an informer's cache as CreateOrUpdate sees it.
type cache map[object.ObjectName]*corev1.ConfigMap

func (c cache) Get(n object.ObjectName) (*corev1.ConfigMap, bool) { cm, ok := c[n]; return cm, ok }

// counting counts the requests CreateOrUpdate sends.
type counting struct {
	typedcorev1.ConfigMapInterface
	requests int
}

func (c *counting) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error) {
	c.requests++
	return c.ConfigMapInterface.Get(ctx, name, opts)
}

func (c *counting) Create(ctx context.Context, cm *corev1.ConfigMap, opts metav1.CreateOptions) (*corev1.ConfigMap, error) {
	c.requests++
	return c.ConfigMapInterface.Create(ctx, cm, opts)
}

func (c *counting) Update(ctx context.Context, cm *corev1.ConfigMap, opts metav1.UpdateOptions) (*corev1.ConfigMap, error) {
	c.requests++
	return c.ConfigMapInterface.Update(ctx, cm, opts)
}

func TestCreateOrUpdate_fromCacheSendsNothingWhenNothingChangesAndNeverWritesOverNewerState(t *testing.T) {
	srv := env.Get(t)
	ns, kube, ctx := srv.Namespace(t), apiserver.Client(t, srv.Config()), t.Context()
	c := &counting{ConfigMapInterface: kube.CoreV1().ConfigMaps(ns)}
	key := object.ObjectName{Namespace: ns, Name: "conf"}
	newObj := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns}}
	}
	want := map[string]string{"mode": "fast"}
	mutate := func(cm *corev1.ConfigMap) error {
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		maps.Copy(cm.Data, want)
		return nil
	}
	cached := cache{}

	created, res, err := apply.CreateOrUpdate(ctx, apply.Clientset(c), key, newObj, mutate, apply.FromCache(cached))
	if err != nil || res != apply.Created || created.Data["mode"] != "fast" {
		t.Fatalf("first CreateOrUpdate = %v, %v; want created with mode fast", res, err)
	}
	// The cache has not seen the create yet: creating again is refused, not doubled.
	if _, _, err := apply.CreateOrUpdate(ctx, apply.Clientset(c), key, newObj, mutate, apply.FromCache(cached)); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("CreateOrUpdate with a cache behind the server = %v, want AlreadyExists", err)
	}

	cached[key] = created // the watch delivered it
	c.requests = 0
	got, res, err := apply.CreateOrUpdate(ctx, apply.Clientset(c), key, newObj, mutate, apply.FromCache(cached))
	if err != nil || res != apply.Unchanged || got != created || c.requests != 0 {
		t.Fatalf("CreateOrUpdate with nothing to change = %v, %v, %d requests; want unchanged, the cached object, none", res, err, c.requests)
	}
	if created.Data["mode"] != "fast" || len(created.Data) != 1 {
		t.Fatalf("the cached object was written into: %v", created.Data)
	}

	// Someone else changes it; our cache lags: the update must not land.
	other := created.DeepCopy()
	other.Data["owner"] = "someone else"
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"mode": "slow"}
	if _, _, err := apply.CreateOrUpdate(ctx, apply.Clientset(c), key, newObj, mutate, apply.FromCache(cached)); !apierrors.IsConflict(err) {
		t.Fatalf("CreateOrUpdate on a stale cached copy = %v, want a conflict", err)
	}
	if len(created.Data) != 1 {
		t.Fatalf("the cached object was written into: %v", created.Data)
	}

	// Without the cache, it reads the server and keeps the other writer's key.
	got, res, err = apply.CreateOrUpdate(ctx, apply.Clientset(c), key, newObj, mutate)
	if err != nil || res != apply.Updated || got.Data["mode"] != "slow" || got.Data["owner"] != "someone else" {
		t.Fatalf("CreateOrUpdate from the server = %v, %v, %v", res, err, got.Data)
	}
}

// CreateOrUpdate writes through ctrlkit's typed client as it does through
// a clientset's: one write API for both.
func TestCreateOrUpdate_throughTheTypedClient(t *testing.T) {
	srv := env.Get(t)
	ns, ctx := srv.Namespace(t), t.Context()
	cms, err := client.NewForConfig[*corev1.ConfigMap](srv.Config(), nil)
	if err != nil {
		t.Fatal(err)
	}
	key := object.ObjectName{Namespace: ns, Name: "typed"}
	newObj := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns}}
	}
	value := "1"
	mutate := func(cm *corev1.ConfigMap) error { cm.Data = map[string]string{"v": value}; return nil }
	for _, step := range []struct {
		value string
		want  apply.Result
	}{{"1", apply.Created}, {"1", apply.Unchanged}, {"2", apply.Updated}} {
		value = step.value
		got, res, err := apply.CreateOrUpdate(ctx, cms, key, newObj, mutate)
		if err != nil || res != step.want || got.Data["v"] != step.value {
			t.Fatalf("CreateOrUpdate(v=%s) = %v, %v, %v; want %v", step.value, res, err, got.Data, step.want)
		}
	}
}
