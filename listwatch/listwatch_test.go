package listwatch_test

import (
	"context"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
)

var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

var configmaps = corev1.SchemeGroupVersion.WithResource("configmaps")

// seed creates web-1, web-2 (app=web) and db-1 (app=db) in a new namespace.
func seed(t *testing.T) (*apiserver.Server, string) {
	t.Helper()
	srv := env.Get(t)
	ns := srv.Namespace(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	for name, app := range map[string]string{"web-1": "web", "web-2": "web", "db-1": "db"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return srv, ns
}

func names[T object.Object](items []T) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.GetName())
	}
	slices.Sort(out)
	return out
}

// firstEvent returns the first non-bookmark event of w.
func firstEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	defer w.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			if ev.Type != watch.Bookmark {
				return ev
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no event within 30s")
		}
	}
}

// checkListWatch lists with the adapter's selector, then watches from the
// list's RV and expects the next matching change and no other.
func checkListWatch[T object.Object](t *testing.T, lw reflector.ListerWatcher[T], cs kubernetes.Interface, ns string) {
	t.Helper()
	l, err := lw.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(l.Items); !slices.Equal(got, []string{"web-1", "web-2"}) || l.Skipped != 0 || l.ResourceVersion == "" {
		t.Fatalf("list = %v (skipped %d, rv %q), want web-1 web-2 at some RV", got, l.Skipped, l.ResourceVersion)
	}
	w, err := lw.Watch(t.Context(), metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	for name, app := range map[string]string{"db-2": "db", "web-3": "web"} { // order does not matter: db-2 must not show
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ev := firstEvent(t, w)
	obj, ok := ev.Object.(T)
	if !ok || ev.Type != watch.Added || obj.GetName() != "web-3" {
		t.Fatalf("first event = %s %T (%v), want ADDED web-3 as a %T", ev.Type, ev.Object, ev.Object, obj)
	}
}

func TestNew_typedClientListsAndWatchesWithALabelSelector(t *testing.T) {
	srv, ns := seed(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	cms := cs.CoreV1().ConfigMaps(ns)
	lw := listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{LabelSelector: "app=web"})
	checkListWatch(t, lw, cs, ns)
}

func TestDynamic_listsAndWatchesUnstructuredObjects(t *testing.T) {
	srv, ns := seed(t)
	dyn := dynamic.NewForConfigOrDie(srv.Config())
	lw := listwatch.Dynamic(dyn.Resource(configmaps).Namespace(ns), listwatch.Options{LabelSelector: "app=web"})
	checkListWatch[*unstructured.Unstructured](t, lw, kubernetes.NewForConfigOrDie(srv.Config()), ns)
}

func TestMetadata_listsAndWatchesPartialObjectMetadata(t *testing.T) {
	srv, ns := seed(t)
	md := metadata.NewForConfigOrDie(srv.Config())
	lw := listwatch.Metadata(md.Resource(configmaps).Namespace(ns), listwatch.Options{LabelSelector: "app=web"})
	checkListWatch[*metav1.PartialObjectMetadata](t, lw, kubernetes.NewForConfigOrDie(srv.Config()), ns)
}

func TestOptions_fieldSelectorNarrowsListAndWatch(t *testing.T) {
	srv, ns := seed(t)
	cms := kubernetes.NewForConfigOrDie(srv.Config()).CoreV1().ConfigMaps(ns)
	lw := listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{FieldSelector: "metadata.name=db-1"})
	l, err := lw.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(l.Items); !slices.Equal(got, []string{"db-1"}) {
		t.Fatalf("list = %v, want db-1 only", got)
	}
}

func TestNew_countsListItemsOfTheWrongTypeAsSkipped(t *testing.T) {
	srv, ns := seed(t)
	cms := kubernetes.NewForConfigOrDie(srv.Config()).CoreV1().ConfigMaps(ns)
	lw := listwatch.New[*corev1.Pod](cms.List, cms.Watch, listwatch.Options{}) // misconfigured on purpose
	l, err := lw.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 0 || l.Skipped != 3 || l.Skip == "" {
		t.Fatalf("items %d, skipped %d (%q); want 0 items and 3 skipped with a reason", len(l.Items), l.Skipped, l.Skip)
	}
}

// contentTypes records the Content-Type of every response.
type contentTypes struct {
	mu   sync.Mutex
	seen map[string]int
	next http.RoundTripper
}

func (c *contentTypes) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		c.mu.Lock()
		c.seen[resp.Header.Get("Content-Type")]++
		c.mu.Unlock()
	}
	return resp, err
}

func TestPreferProtobuf_listsAndWatchesBuiltInTypesInProtobuf(t *testing.T) {
	srv, ns := seed(t)
	ct := &contentTypes{seen: map[string]int{}}
	cfg := listwatch.PreferProtobuf(srv.Config())
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { ct.next = rt; return ct })
	cs := kubernetes.NewForConfigOrDie(cfg)
	cms := cs.CoreV1().ConfigMaps(ns)
	checkListWatch(t, listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{LabelSelector: "app=web"}), cs, ns)
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.seen[runtime.ContentTypeProtobuf] < 2 { // the list, the creates, the watch
		t.Fatalf("responses by content type: %v; want protobuf for list and watch", ct.seen)
	}
	if srv.Config().ContentType == runtime.ContentTypeProtobuf {
		t.Error("PreferProtobuf changed the config it was given")
	}
}

// listItems lists through New with a list function returning l.
func listItems[T object.Object, L runtime.Object](t *testing.T, l L) []T {
	t.Helper()
	lw := listwatch.New[T](func(context.Context, metav1.ListOptions) (L, error) { return l, nil }, nil, listwatch.Options{})
	got, err := lw.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Items
}

func TestNew_listItemsDoNotPointIntoTheListsArray(t *testing.T) {
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "ns", Name: name} }
	t.Run("typed", func(t *testing.T) {
		l := &corev1.ConfigMapList{Items: []corev1.ConfigMap{{ObjectMeta: meta("a")}, {ObjectMeta: meta("b")}}}
		items := listItems[*corev1.ConfigMap](t, l)
		if len(items) != 2 || items[0] == &l.Items[0] || items[1] == &l.Items[1] || items[1].Name != "b" {
			t.Errorf("items %p %p point into the list's array at %p", items[0], items[1], &l.Items[0])
		}
	})
	t.Run("unstructured, as from Dynamic", func(t *testing.T) {
		l := &unstructured.UnstructuredList{Items: []unstructured.Unstructured{{}, {}}}
		l.Items[0].SetName("a")
		l.Items[1].SetName("b")
		items := listItems[*unstructured.Unstructured](t, l)
		if len(items) != 2 || items[0] == &l.Items[0] || items[1] == &l.Items[1] || items[1].GetName() != "b" {
			t.Errorf("items %p %p point into the list's array at %p", items[0], items[1], &l.Items[0])
		}
	})
	t.Run("metadata, as from Metadata", func(t *testing.T) {
		l := &metav1.PartialObjectMetadataList{Items: []metav1.PartialObjectMetadata{{ObjectMeta: meta("a")}, {ObjectMeta: meta("b")}}}
		items := listItems[*metav1.PartialObjectMetadata](t, l)
		if len(items) != 2 || items[0] == &l.Items[0] || items[1] == &l.Items[1] || items[1].Name != "b" {
			t.Errorf("items %p %p point into the list's array at %p", items[0], items[1], &l.Items[0])
		}
	})
}

// A paginated list without selectors carries the server's count of what
// follows the page, through the REST client and through Kind's own
// decoding alike (the reflector sizes the cache with it).
func TestList_aPageCarriesTheServersRemainingItemCount(t *testing.T) {
	srv, ns := seed(t)
	cfg := listwatch.PreferProtobuf(srv.Config())
	cms := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(ns)
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	for name, lw := range map[string]reflector.ListerWatcher[*corev1.ConfigMap]{
		"New":  listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{}),
		"Kind": listwatch.Kind[*corev1.ConfigMap](discoveryOf(t, cfg, func(*runtime.Scheme) error { return nil }), gvk, listwatch.KindOptions{Namespace: ns}),
	} {
		l, err := lw.List(t.Context(), metav1.ListOptions{Limit: 1})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(l.Items) != 1 || l.Continue == "" || l.RemainingItemCount == nil || *l.RemainingItemCount != 2 { // seed's 3 ConfigMaps
			t.Fatalf("%s: a page of %d items, continue %q, remaining %v; want 1, a token and 2 remaining", name, len(l.Items), l.Continue, deref(l.RemainingItemCount))
		}
	}
}

func deref(n *int64) any {
	if n == nil {
		return nil
	}
	return *n
}

// Kind reads a list's pages into one buffer: a page's objects must be
// intact after the next page was read over it.
func TestKind_aListPageOutlivesTheNextPagesBuffer(t *testing.T) {
	srv, ns := seed(t)
	cfg := listwatch.PreferProtobuf(srv.Config())
	cms := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(ns)
	lw := listwatch.Kind[*corev1.ConfigMap](discoveryOf(t, cfg, func(*runtime.Scheme) error { return nil }),
		corev1.SchemeGroupVersion.WithKind("ConfigMap"), listwatch.KindOptions{Namespace: ns})
	var got []*corev1.ConfigMap
	opts := metav1.ListOptions{Limit: 1}
	for {
		l, err := lw.List(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, l.Items...)
		if l.Continue == "" {
			break
		}
		opts.Continue, opts.ResourceVersion = l.Continue, ""
	}
	want, err := cms.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want.Items) || len(got) != 3 {
		t.Fatalf("listed %d in pages of 1, %d at once; want seed's 3", len(got), len(want.Items))
	}
	for i := range got {
		w := want.Items[i].DeepCopy()
		w.ManagedFields = nil // Kind cuts them on the wire
		if !equality.Semantic.DeepEqual(got[i], w) {
			t.Errorf("page %d's object changed after the next pages were read:\n got %+v\nwant %+v", i, got[i], w)
		}
	}
}
