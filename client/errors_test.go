package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/client"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/poll"
	"github.com/ctrlkit/ctrlkit/object"
)

// wantError fails t unless err is an error whose message holds every one
// of parts.
func wantError(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want one saying %q", what, parts)
		return
	}
	t.Logf("%s: %v", what, err)
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %q does not say %q", what, err, p)
		}
	}
}

func TestClient_aTypeNotInTheSchemeFailsEveryCallNamingAddToScheme(t *testing.T) {
	f := newFixture(t)
	c := client.New[*notInScheme](f.d, f.s)
	ctx := t.Context()
	name := object.ObjectName{Namespace: f.ns, Name: "a"}
	if _, err := c.GroupVersionKind(); err == nil {
		t.Error("GroupVersionKind: no error")
	}
	_, err := c.Get(ctx, name)
	wantError(t, "get", err, "notInScheme", "is not in the scheme", "manager.Options.AddToScheme")
	_, err = c.List(ctx, f.ns, metav1.ListOptions{})
	wantError(t, "list", err, "manager.Options.AddToScheme")
	_, err = c.Create(ctx, &notInScheme{}, metav1.CreateOptions{})
	wantError(t, "create", err, "manager.Options.AddToScheme")
	_, err = c.Apply(ctx, client.ApplyObject(&notInScheme{}), metav1.ApplyOptions{FieldManager: "x"})
	wantError(t, "apply", err, "manager.Options.AddToScheme")
	err = c.Delete(ctx, name, metav1.DeleteOptions{})
	wantError(t, "delete", err, "manager.Options.AddToScheme")
}

func TestClient_aKindTheServerDoesNotServeNamesTheCRD(t *testing.T) {
	f := newFixture(t)
	c := client.New[*gadget](f.d, f.s)
	_, err := c.Get(t.Context(), object.ObjectName{Namespace: f.ns, Name: "a"})
	wantError(t, "get", err, "no resource for kind Gadget in gadgets.ctrlkit.dev/v1", "CustomResourceDefinition installed")
	if !meta.IsNoMatchError(err) {
		t.Errorf("get: %v is not a meta.IsNoMatchError", err)
	}
	_, err = c.List(t.Context(), f.ns, metav1.ListOptions{})
	wantError(t, "list without GadgetList in the scheme", err, "the scheme has no GadgetList")
}

func TestClient_aCRDInstalledAfterTheClientWasMadeIsFound(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	widgets := client.New[*widget](f.d, f.s)
	w := &widget{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: f.ns}, Spec: map[string]string{"k": "v"}}
	if _, err := widgets.Create(ctx, w, metav1.CreateOptions{}); !meta.IsNoMatchError(err) {
		t.Fatalf("create before the CRD: %v, want a no-match error", err)
	}
	installWidgetCRD(t, f)
	var created *widget
	eventually(t, 30*time.Second, "the same client to create a widget", func() bool {
		var err error
		created, err = widgets.Create(ctx, w, metav1.CreateOptions{})
		return err == nil
	})
	if created.Spec["k"] != "v" {
		t.Errorf("created %+v", created)
	}

	t.Run("a status write without the status subresource names the fix", func(t *testing.T) {
		name := object.ObjectName{Namespace: f.ns, Name: "a"}
		created.Status = map[string]string{"ready": "true"}
		_, err := widgets.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		wantStatusSubresourceError(t, "update status", err, "subresources: status", "+kubebuilder:subresource:status")
		_, err = widgets.PatchStatus(ctx, name, types.MergePatchType, []byte(`{"status":{"ready":"true"}}`), metav1.PatchOptions{})
		wantStatusSubresourceError(t, "patch status", err, "subresources: status")
		su := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"ready": "true"}}}
		su.SetName("a")
		su.SetNamespace(f.ns)
		_, err = widgets.ApplyStatus(ctx, client.ApplyObject(su), metav1.ApplyOptions{FieldManager: "x"})
		wantStatusSubresourceError(t, "apply status", err, "subresources: status")
	})
	t.Run("a status write on a missing object is NotFound", func(t *testing.T) {
		_, err := widgets.PatchStatus(ctx, object.ObjectName{Namespace: f.ns, Name: "missing"}, types.MergePatchType,
			[]byte(`{"status":{}}`), metav1.PatchOptions{})
		if !apierrors.IsNotFound(err) || errors.Is(err, client.ErrNoStatusSubresource) {
			t.Errorf("patch status of a missing widget: %v, want NotFound", err)
		}
	})
}

func TestClient_aStatusWriteOnAConfigMapSaysItHasNoStatus(t *testing.T) {
	f := newFixture(t)
	cms := f.configMaps()
	cm, err := cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: f.ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cms.UpdateStatus(t.Context(), cm, metav1.UpdateOptions{})
	wantStatusSubresourceError(t, "update status", err, "ConfigMap", "Update, Patch or Apply")
}

// wantStatusSubresourceError fails t unless err is ErrNoStatusSubresource
// saying parts, and not a NotFound (a reconciler ignoring NotFound would
// hide it).
func wantStatusSubresourceError(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	wantError(t, what, err, parts...)
	if !errors.Is(err, client.ErrNoStatusSubresource) || apierrors.IsNotFound(err) {
		t.Errorf("%s: %v, want ErrNoStatusSubresource and not NotFound", what, err)
	}
}

// noName is an apply configuration that does not name its object.
type noName struct{}

func (noName) IsApplyConfiguration() {}

func TestClient_badArgumentsAreClearErrors(t *testing.T) {
	f := newFixture(t)
	cms := f.configMaps()
	namespaces := client.New[*corev1.Namespace](f.d, f.s)
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		err   error
		parts []string
	}{
		{"a namespaced name without namespace", second(cms.Get(ctx, object.ObjectName{Name: "a"})), []string{"has no namespace", "configmaps are namespaced"}},
		{"a cluster-scoped name with a namespace", second(namespaces.Get(ctx, object.ObjectName{Namespace: "x", Name: "a"})), []string{"cluster-scoped"}},
		{"an empty name", second(cms.Get(ctx, object.ObjectName{Namespace: f.ns})), []string{"empty name"}},
		{"a nil object", second(cms.Create(ctx, nil, metav1.CreateOptions{})), []string{"nil object"}},
		{"an update without a name", second(cms.Update(ctx, &corev1.ConfigMap{}, metav1.UpdateOptions{})), []string{"empty name"}},
		{"an apply without field manager", second(cms.Apply(ctx, corev1ac.ConfigMap("a", f.ns), metav1.ApplyOptions{})), []string{"FieldManager is required"}},
		{"an apply of another kind", second(cms.Apply(ctx, corev1ac.Secret("a", f.ns), metav1.ApplyOptions{FieldManager: "x"})), []string{"of kind Secret"}},
		{"an apply configuration without a name", second(cms.Apply(ctx, noName{}, metav1.ApplyOptions{FieldManager: "x"})), []string{"does not name its object", "client.ApplyObject"}},
		{"a nil apply configuration", second(cms.Apply(ctx, nil, metav1.ApplyOptions{FieldManager: "x"})), []string{"nil apply configuration"}},
		{"ApplyObject of nil", second(cms.Apply(ctx, client.ApplyObject((*corev1.ConfigMap)(nil)), metav1.ApplyOptions{FieldManager: "x"})), []string{"nil object"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantError(t, tc.name, tc.err, tc.parts...) })
	}
}

func second[T any](_ T, err error) error { return err }

// installWidgetCRD installs the CRD of widget, without a status
// subresource.
func installWidgetCRD(t *testing.T, f fixture) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets." + f.widgets.Group},
		"spec": map[string]any{
			"group": f.widgets.Group, "scope": "Namespaced",
			"names": map[string]any{"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crds).Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond every 100ms until it holds, or fails t after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, d, 100*time.Millisecond, what, cond)
}

// NewForConfig is the one call from a rest.Config to a working client, for
// programs without a manager; a config it cannot use is an error at once.
func TestNewForConfig_isAClientFromARestConfig(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	// client-go caches transports by configuration: this is the one the
	// client's connections use, closed when the test ends.
	hc, err := rest.HTTPClientFor(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	cms, err := client.NewForConfig[*corev1.ConfigMap](srv.Config(), nil)
	if err != nil {
		t.Fatal(err)
	}
	created, err := cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := cms.Get(t.Context(), object.NameOf(created))
	if err != nil || got.UID != created.UID {
		t.Fatalf("Get after Create = %v, %v", got, err)
	}
	bad := srv.Config()
	bad.TLSClientConfig.CAData, bad.TLSClientConfig.CAFile = nil, "/nonexistent/ca.crt"
	if _, err := client.NewForConfig[*corev1.ConfigMap](bad, nil); err == nil {
		t.Error("NewForConfig with an unreadable CA file succeeded")
	}
}
