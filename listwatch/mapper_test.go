package listwatch_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/listwatch"
)

// paths records the paths of the requests that pass through it.
type paths struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (p *paths) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	p.seen = append(p.seen, r.URL.Path)
	p.mu.Unlock()
	return p.next.RoundTrip(r)
}

func (p *paths) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.seen
	p.seen = nil
	return out
}

// NewDiscovery's mapper reads one group version's discovery, once, for
// the kinds it maps there: kinds and scopes as the server serves them
// (subresources ignored), a kind not served is a NoMatch error, and a
// CustomResourceDefinition installed after one is found once the mapper
// is Reset (as Kind and client do at a NoMatch).
func TestNewDiscovery_mapsAGroupVersionAtATime(t *testing.T) {
	srv := env.Get(t)
	leakcheck.Check(t)
	cfg := srv.Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	rec := &paths{next: hc.Transport}
	hc.Transport = rec
	d, err := listwatch.NewDiscovery(cfg, hc, clientgoscheme.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		gvk      schema.GroupVersionKind
		resource string
		scope    meta.RESTScopeName
	}{
		{schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "configmaps", meta.RESTScopeNameNamespace},
		{schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, "namespaces", meta.RESTScopeNameRoot},
		{schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, "pods", meta.RESTScopeNameNamespace}, // not pods/status
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "deployments", meta.RESTScopeNameNamespace},
	} {
		mp, err := d.Mapper.RESTMapping(c.gvk.GroupKind(), c.gvk.Version)
		if err != nil {
			t.Errorf("%v: %v", c.gvk, err)
			continue
		}
		if mp.Resource != c.gvk.GroupVersion().WithResource(c.resource) || mp.Scope.Name() != c.scope || mp.GroupVersionKind != c.gvk {
			t.Errorf("%v mapped to %v, %v, %v; want %s, %s", c.gvk, mp.Resource, mp.Scope.Name(), mp.GroupVersionKind, c.resource, c.scope)
		}
	}
	if got := rec.take(); strings.Join(got, " ") != "/api/v1 /apis/apps/v1" {
		t.Errorf("discovery requests %q, want one per group version: /api/v1 /apis/apps/v1", got)
	}
	if _, err := d.Mapper.RESTMapping(schema.GroupKind{Kind: "Nothing"}, "v1"); !meta.IsNoMatchError(err) {
		t.Errorf("a kind not served: %v, want a NoMatch error", err)
	}

	group := fmt.Sprintf("mapper-%d.test", time.Now().UnixNano())
	gk := schema.GroupKind{Group: group, Kind: "Widget"}
	if _, err := d.Mapper.RESTMapping(gk, "v1"); !meta.IsNoMatchError(err) {
		t.Fatalf("a group not served yet: %v, want a NoMatch error", err)
	}
	crd := fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.%[1]s}
spec:
  group: %[1]s
  scope: Cluster
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  versions:
    - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`, group)
	if err := apiserver.InstallCRDs(t.Context(), cfg, fstest.MapFS{"crd.yaml": {Data: []byte(crd)}}); err != nil {
		t.Fatal(err)
	}
	d.Mapper.Reset()
	mp, err := d.Mapper.RESTMapping(gk, "v1")
	if err != nil {
		t.Fatalf("the CRD installed since, after Reset: %v", err)
	}
	if mp.Resource.Resource != "widgets" || mp.Scope.Name() != meta.RESTScopeNameRoot {
		t.Errorf("the CRD's kind mapped to %v (%v), want widgets, cluster-scoped", mp.Resource, mp.Scope.Name())
	}
	// A mapping with no version asks the whole of discovery for the
	// preferred one.
	if mp, err := d.Mapper.RESTMapping(schema.GroupKind{Group: "apps", Kind: "Deployment"}); err != nil || mp.Resource.Version != "v1" {
		t.Errorf("Deployment with no version: %v, %v; want apps/v1", mp, err)
	}
}

// A list or watch of a kind not mapped yet, against a server that accepts
// connections and never answers (a stopped process, a partition that drops
// packets), ends when its context does: the discovery read that maps the
// kind is bounded by it too. It waited out the transport's timeouts before,
// holding the mapper's lock, so a fleet's cluster on such a server took
// tens of seconds to disengage, and its informers to stop.
func TestKind_aListOfAServerThatNeverAnswersEndsWithItsContext(t *testing.T) {
	leakcheck.Check(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held sync.WaitGroup
	stop := make(chan struct{})
	held.Go(func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				<-stop
				return
			}
			conns = append(conns, c) // accepted, never read: no TLS handshake
		}
	})
	t.Cleanup(func() { ln.Close(); close(stop); held.Wait() })

	cfg := &rest.Config{Host: "https://" + ln.Addr().String(), TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	d, err := listwatch.NewDiscovery(cfg, hc, clientgoscheme.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	lw := listwatch.Kind[*corev1.ConfigMap](d, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, listwatch.KindOptions{})
	for _, call := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"list", func(ctx context.Context) error { _, err := lw.List(ctx, metav1.ListOptions{}); return err }},
		{"watch", func(ctx context.Context) error { _, err := lw.Watch(ctx, metav1.ListOptions{}); return err }},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		start := time.Now()
		err := call.do(ctx)
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Errorf("%s of a server that never answers: no error", call.name)
		}
		if took > 5*time.Second { // the TLS handshake's own timeout is 10s
			t.Errorf("%s of a server that never answers returned after %v, its context ended after 200ms", call.name, took)
		}
	}
}
