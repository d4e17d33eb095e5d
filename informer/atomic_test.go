package informer_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// pagedServer serves the fake server's lists one object a page, and calls
// onPage before each page after the first of a list.
type pagedServer struct {
	*fakeServer
	mu     sync.Mutex
	onPage func()
}

func (p *pagedServer) List(ctx context.Context, opts metav1.ListOptions) (reflector.List[*corev1.ConfigMap], error) {
	full, err := p.fakeServer.List(ctx, metav1.ListOptions{})
	if err != nil {
		return full, err
	}
	at := 0
	if opts.Continue != "" {
		at, _ = strconv.Atoi(opts.Continue)
		p.mu.Lock()
		hook := p.onPage
		p.mu.Unlock()
		if hook != nil {
			hook()
		}
	}
	page := reflector.List[*corev1.ConfigMap]{ResourceVersion: full.ResourceVersion}
	if at < len(full.Items) {
		page.Items = full.Items[at : at+1]
	}
	if at+1 < len(full.Items) {
		page.Continue = strconv.Itoa(at + 1)
	}
	return page, nil
}

// versions is the cache's content: key -> resource version.
func versions(inf *informer.SharedIndexInformer[*corev1.ConfigMap]) map[string]string {
	out := map[string]string{}
	for _, cm := range inf.Reader().List("", labels.Everything()) {
		out[cm.Namespace+"/"+cm.Name] = cm.ResourceVersion
	}
	return out
}

func TestInformer_anAtomicRelistIsSwappedInWhole(t *testing.T) {
	leakcheck.Check(t)
	srv := &pagedServer{fakeServer: newFakeServer("a", "b", "c")}
	opts := informer.Options[*corev1.ConfigMap]{}
	opts.AtomicRelist, opts.Reflector.PageSize = true, 1
	inf := newInformer(t, srv, opts)
	m := newMirror()
	register(t, inf, m, "h", 0)
	run(t, inf)
	waitFor(t, wait, "sync", inf.HasSynced)
	m.waitForView(t, wait, srv.state)
	before := versions(inf)

	var mu sync.Mutex
	var during []map[string]string
	srv.mu.Lock()
	srv.onPage = func() {
		mu.Lock()
		during = append(during, versions(inf))
		mu.Unlock()
	}
	srv.mu.Unlock()
	srv.stall()
	srv.update("a", map[string]string{"k": "v"})
	srv.remove("b")
	srv.create("d", nil)
	srv.expireAndResume()
	m.waitForView(t, wait, srv.fakeServer.state)

	mu.Lock()
	defer mu.Unlock()
	if len(during) < 2 {
		t.Fatalf("the relist was read in %d later pages, want at least 2", len(during))
	}
	for k, seen := range during {
		if !maps.Equal(seen, before) {
			t.Errorf("while page %d of the relist was read the cache held %v; want the state before the relist, %v", k+2, seen, before)
		}
	}
	// Deletes first, then updates and adds in the order listed, as
	// client-go's atomic relist tells them.
	want := []string{"delete ns/b@2 unknown=true", "update a@1->4", "add d@6 initial=false"}
	if got := m.callList()[3:]; !slices.Equal(got, want) {
		t.Errorf("after the relist:\n%q\nwant\n%q", got, want)
	}
}
