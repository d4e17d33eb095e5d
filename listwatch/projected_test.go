package listwatch_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/examples/foo/config"
	"github.com/ctrlkit/ctrlkit/listwatch"
)

// cmView is a projection of a ConfigMap: its metadata and data, not its
// binaryData.
type cmView struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Data              map[string]string `json:"data"`
}

func (v *cmView) DeepCopyObject() runtime.Object {
	out := &cmView{TypeMeta: v.TypeMeta, Data: map[string]string{}}
	v.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	for k, x := range v.Data {
		out.Data[k] = x
	}
	return out
}

// fooView is a projection of the sample controller's Foo, a custom
// resource (JSON on the wire): its metadata and replicas.
type fooView struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Replicas *int32 `json:"replicas"`
	} `json:"spec"`
}

func (v *fooView) DeepCopyObject() runtime.Object {
	out := &fooView{TypeMeta: v.TypeMeta}
	v.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if v.Spec.Replicas != nil {
		r := *v.Spec.Replicas
		out.Spec.Replicas = &r
	}
	return out
}

func discoveryOf(t *testing.T, cfg *rest.Config, add func(*runtime.Scheme) error) listwatch.Discovery {
	t.Helper()
	s := runtime.NewScheme()
	for _, f := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, add} {
		if err := f(s); err != nil {
			t.Fatal(err)
		}
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := listwatch.NewDiscovery(cfg, hc, s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestProjected_listsAndWatchesABuiltInTypeFromProtobufIntoAProjection(t *testing.T) {
	srv, ns := seed(t)
	ct := &contentTypes{seen: map[string]int{}}
	cfg := srv.Config()
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { ct.next = rt; return ct })
	d := discoveryOf(t, cfg, func(*runtime.Scheme) error { return nil })
	lw, err := listwatch.Projected[*cmView, corev1.ConfigMap](d, corev1.SchemeGroupVersion.WithKind("ConfigMap"),
		listwatch.KindOptions{Namespace: ns, Options: listwatch.Options{LabelSelector: "app=web"}})
	if err != nil {
		t.Fatal(err)
	}
	checkListWatch(t, lw, kubernetes.NewForConfigOrDie(srv.Config()), ns)
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if n := ct.seen[runtime.ContentTypeProtobuf] + ct.seen[runtime.ContentTypeProtobuf+";stream=watch"]; n < 2 {
		t.Fatalf("responses by content type: %v; want protobuf for list and watch", ct.seen)
	}
}

func TestProjected_aCustomResourceIsReadFromJSON(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	if err := apiserver.InstallCRDs(t.Context(), srv.Config(), config.CRDs); err != nil {
		t.Fatal(err)
	}
	d := discoveryOf(t, srv.Config(), v1alpha1.AddToScheme)
	lw, err := listwatch.Projected[*fooView, v1alpha1.Foo](d, v1alpha1.SchemeGroupVersion.WithKind("Foo"),
		listwatch.KindOptions{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	foos := dynamic.NewForConfigOrDie(srv.Config()).Resource(v1alpha1.Resource).Namespace(ns)
	create := func(name string, replicas int64) {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "samplecontroller.ctrlkit.dev/v1alpha1",
			"kind": "Foo", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"deploymentName": name + "-web", "replicas": replicas}}}
		if _, err := foos.Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("a", 2)
	l, err := lw.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Items[0].Name != "a" || l.Items[0].Spec.Replicas == nil || *l.Items[0].Spec.Replicas != 2 {
		t.Fatalf("list = %+v, want Foo a with 2 replicas", l.Items)
	}
	w, err := lw.Watch(t.Context(), metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	create("b", 3)
	ev := firstEvent(t, w)
	if v, ok := ev.Object.(*fooView); !ok || ev.Type != watch.Added || v.Name != "b" || *v.Spec.Replicas != 3 {
		t.Fatalf("first event = %s %#v, want ADDED b with 3 replicas", ev.Type, ev.Object)
	}
}

// badView names a field a ConfigMap does not have.
type badView struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Datta             map[string]string `json:"datta"`
}

func (v *badView) DeepCopyObject() runtime.Object { return v }

func TestProjected_aProjectionThatDoesNotFitIsAnErrorAtOnce(t *testing.T) {
	_, err := listwatch.Projected[*badView, corev1.ConfigMap](listwatch.Discovery{}, corev1.SchemeGroupVersion.WithKind("ConfigMap"),
		listwatch.KindOptions{})
	if err == nil || !strings.Contains(err.Error(), `"datta"`) {
		t.Fatalf("err = %v, want one naming the field datta", err)
	}
}

// mixedList is a list page holding a ConfigMap and an object that did not
// decode, as Projected builds one.
type mixedList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

func (l *mixedList) DeepCopyObject() runtime.Object { return l }

type notDecoded struct{ metav1.TypeMeta }

func (*notDecoded) Undecodable() error               { return errors.New("truncated input") }
func (n *notDecoded) DeepCopyObject() runtime.Object { return n }

func TestNew_anItemThatDidNotDecodeIsSkippedAndNamed(t *testing.T) {
	l := &mixedList{ListMeta: metav1.ListMeta{ResourceVersion: "5"},
		Items: []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ok"}}, &notDecoded{}}}
	lw := listwatch.New[*corev1.ConfigMap](func(context.Context, metav1.ListOptions) (*mixedList, error) { return l, nil },
		nil, listwatch.Options{})
	got, err := lw.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Items) != 1 || got.Skipped != 1 || got.SkipReason != "undecodable" || !strings.Contains(got.Skip, "truncated input") {
		t.Fatalf("list = %d items, skipped %d (%q, %q); want 1 item and 1 undecodable", len(got.Items), got.Skipped, got.SkipReason, got.Skip)
	}
}

// acceptJSON makes every request ask for JSON only, as from a server that
// does not send protobuf.
type acceptJSON struct{ next http.RoundTripper }

func (a acceptJSON) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Accept", runtime.ContentTypeJSON)
	return a.next.RoundTrip(r)
}

func TestKind_decodesBuiltInTypesAsTheRESTClientDoesWithoutManagedFields(t *testing.T) {
	srv, ns := seed(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	cms := cs.CoreV1().ConfigMaps(ns)
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	seeded, err := cms.List(t.Context(), metav1.ListOptions{LabelSelector: "app=web", Limit: 1})
	if err != nil || len(seeded.Items) == 0 || len(seeded.Items[0].ManagedFields) == 0 {
		t.Fatalf("no seeded ConfigMap with managedFields (%v)", err)
	}
	writer := seeded.Items[0].ManagedFields[0].Manager // this test's client, which wrote them all
	for _, c := range []struct {
		name     string
		keep     bool
		keepOf   []string
		json     bool
		wantType string
	}{
		{name: "protobuf", wantType: runtime.ContentTypeProtobuf},
		{name: "protobuf, managedFields kept", keep: true, wantType: runtime.ContentTypeProtobuf},
		{name: "protobuf, the writer's managedFields kept", keepOf: []string{"nobody", writer}, wantType: runtime.ContentTypeProtobuf},
		{name: "protobuf, another's managedFields kept", keepOf: []string{"nobody"}, wantType: runtime.ContentTypeProtobuf},
		{name: "JSON", json: true, wantType: runtime.ContentTypeJSON},
		{name: "JSON, the writer's managedFields kept", json: true, keepOf: []string{writer}, wantType: runtime.ContentTypeJSON},
	} {
		t.Run(c.name, func(t *testing.T) {
			ct := &contentTypes{seen: map[string]int{}}
			cfg := srv.Config()
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
				if c.json {
					rt = acceptJSON{rt}
				}
				ct.next = rt
				return ct
			})
			lw := listwatch.Kind[*corev1.ConfigMap](discoveryOf(t, cfg, func(*runtime.Scheme) error { return nil }), gvk,
				listwatch.KindOptions{Namespace: ns, KeepManagedFields: c.keep, KeepManagedFieldsOf: c.keepOf,
					Options: listwatch.Options{LabelSelector: "app=web"}})
			keep := c.keep || slices.Contains(c.keepOf, writer)
			l, err := lw.List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := cms.List(t.Context(), metav1.ListOptions{LabelSelector: "app=web", ResourceVersion: l.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Items) != len(want.Items) || len(want.Items) == 0 {
				t.Fatalf("listed %d ConfigMaps, the REST client %d", len(l.Items), len(want.Items))
			}
			for i := range want.Items {
				sameAsRESTClient(t, l.Items[i], &want.Items[i], keep)
			}
			w, err := lw.Watch(t.Context(), metav1.ListOptions{ResourceVersion: l.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			changed := want.Items[0].DeepCopy()
			changed.Data = map[string]string{"run": c.name}
			updated, err := cms.Update(t.Context(), changed, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ev := firstEvent(t, w)
			got, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || ev.Type != watch.Modified {
				t.Fatalf("first event = %s %T, want MODIFIED *v1.ConfigMap", ev.Type, ev.Object)
			}
			updated.TypeMeta = metav1.TypeMeta{} // the REST client's decoding clears it, as a watch's does
			sameAsRESTClient(t, got, updated, keep)
			ct.mu.Lock()
			defer ct.mu.Unlock()
			if ct.seen[c.wantType]+ct.seen[c.wantType+";stream=watch"] < 2 {
				t.Errorf("responses by content type: %v; want %s for list and watch", ct.seen, c.wantType)
			}
		})
	}
}

func sameAsRESTClient(t *testing.T, got, want *corev1.ConfigMap, keep bool) {
	t.Helper()
	if len(want.ManagedFields) == 0 {
		t.Fatalf("%s has no managedFields: the test would not notice them missing", want.Name)
	}
	if !keep {
		want = want.DeepCopy()
		want.ManagedFields = nil
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("Kind decoded\n%v\nthe REST client\n%v", got, want)
	}
}
