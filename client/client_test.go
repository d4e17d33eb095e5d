package client_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/client"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/listwatch"
)

var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// widget is a custom type whose CRD (installed by a test) has no status
// subresource; gadget is one whose CRD is never installed; notInScheme is
// in no scheme.
type (
	widget struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              map[string]string `json:"spec,omitempty"`
		Status            map[string]string `json:"status,omitempty"`
	}
	widgetList struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata"`
		Items           []widget `json:"items"`
	}
	gadget      struct{ widget }
	notInScheme struct{ widget }
)

func (w *widget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec, out.Status = copyMap(w.Spec), copyMap(w.Status)
	return &out
}

func (l *widgetList) DeepCopyObject() runtime.Object {
	out := &widgetList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopyObject().(*widget))
	}
	return out
}

func (g *gadget) DeepCopyObject() runtime.Object {
	return &gadget{*g.widget.DeepCopyObject().(*widget)}
}

func (g *notInScheme) DeepCopyObject() runtime.Object {
	return &notInScheme{*g.widget.DeepCopyObject().(*widget)}
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

var gadgetGV = schema.GroupVersion{Group: "gadgets.ctrlkit.dev", Version: "v1"}

// newWidgetGV returns a group of widgets of its own, so a test that installs
// their CRD on the shared server can run again (-count) in one process.
func newWidgetGV() schema.GroupVersion {
	return schema.GroupVersion{Group: fmt.Sprintf("widgets-%08x.ctrlkit.dev", rand.Uint32()), Version: "v1"}
}

// newScheme returns client-go's types, Foo, widget (in group widgetGV) and
// gadget.
func newScheme(t *testing.T, widgetGV schema.GroupVersion) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	s.AddKnownTypeWithName(widgetGV.WithKind("Widget"), &widget{})
	s.AddKnownTypeWithName(widgetGV.WithKind("WidgetList"), &widgetList{})
	s.AddKnownTypeWithName(gadgetGV.WithKind("Gadget"), &gadget{})
	metav1.AddToGroupVersion(s, widgetGV)
	metav1.AddToGroupVersion(s, gadgetGV)
	return s
}

// wire records the content type of every response, by resource.
type wire struct {
	mu    sync.Mutex
	types map[string]map[string]bool // resource path segment → content types
}

func (w *wire) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{next: rt, fn: func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && (strings.Contains(req.URL.Path, "/configmaps") || strings.Contains(req.URL.Path, "/foos")) {
			res := "configmaps"
			if strings.Contains(req.URL.Path, "/foos") {
				res = "foos"
			}
			ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
			w.mu.Lock()
			if w.types[res] == nil {
				w.types[res] = map[string]bool{}
			}
			w.types[res][ct] = true
			w.mu.Unlock()
		}
		return resp, err
	}}
}

// seen returns the content types seen for res.
func (w *wire) seen(res string) map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.types[res]
}

// roundTripper runs fn for each request; next is the transport fn calls,
// reachable by client-go's helpers that close idle connections.
type roundTripper struct {
	next http.RoundTripper
	fn   func(*http.Request) (*http.Response, error)
}

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return r.fn(req) }

func (r roundTripper) WrappedRoundTripper() http.RoundTripper { return r.next }

// fixture is what the tests share: the server's config and the
// ingredients of clients, as a manager has them.
type fixture struct {
	widgets schema.GroupVersion // the widget type's group and version
	cfg     *rest.Config
	d       listwatch.Discovery
	s       *runtime.Scheme
	ns      string
	wire    *wire
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	srv := env.Get(t)
	f := fixture{widgets: newWidgetGV(), cfg: rest.CopyConfig(srv.Config()), ns: srv.Namespace(t),
		wire: &wire{types: map[string]map[string]bool{}}}
	f.s = newScheme(t, f.widgets)
	f.cfg.Wrap(f.wire.wrap)
	f.d = f.newDiscovery(t)
	return f
}

// newDiscovery returns what clients need, as a manager has it: an HTTP
// client of its own (its idle connections closed when t ends), a
// RESTMapper, the scheme's serializer.
func (f fixture) newDiscovery(t *testing.T) listwatch.Discovery {
	t.Helper()
	hc, err := rest.HTTPClientFor(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	d, err := listwatch.NewDiscovery(f.cfg, hc, f.s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// configMaps returns a client of ConfigMaps.
func (f fixture) configMaps() *client.Client[*corev1.ConfigMap] {
	return client.New[*corev1.ConfigMap](f.d, f.s)
}
