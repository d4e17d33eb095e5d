package manager_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/snapshot"
)

// recorder counts the reconciles of each key.
type recorder struct {
	mu   sync.Mutex
	keys map[string]int
}

func (r *recorder) Reconcile(_ context.Context, name object.ObjectName) (controller.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys[name.Name]++
	return controller.Result{}, nil
}

func (r *recorder) seen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.keys)
}

// runWithCacheDir runs a manager with one controller over ns's ConfigMaps
// and CacheDir dir until every object was reconciled, and returns what
// /readyz?verbose and the debug page said of its cache, then stops it.
func runWithCacheDir(t *testing.T, srv *apiserver.Server, ns, dir string, objects int) (readyz string, start string, reconciles *recorder) {
	t.Helper()
	opts := quiet(t)
	opts.CacheDir = dir
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	rec := &recorder{keys: map[string]int{}}
	if _, err := manager.NewController(m, "recorder", rec, manager.ControllerOptions{}, manager.For(cms)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	base := "http://" + m.Addr(ctx)
	eventually(t, 30*time.Second, "every object reconciled", func() bool { return rec.seen() == objects })
	eventually(t, 30*time.Second, "/readyz 200", func() bool { code, _ := get(t, base+"/readyz"); return code == 200 })
	_, readyz = get(t, base+"/readyz?verbose")
	_, body := get(t, base+debug.Path+"/state.json")
	var st debug.State
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	for _, i := range st.Informers {
		if strings.HasPrefix(i.Name, "configmaps/v1") {
			start = i.Start
		}
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	return readyz, start, rec
}

func TestManager_cacheDirMakesTheNextStartWarm(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	const n = 20
	for i := range n {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()

	readyz, start, _ := runWithCacheDir(t, srv, ns, dir, n)
	if !strings.Contains(readyz, "started cold: no snapshot yet") || start != "cold: no snapshot yet" {
		t.Fatalf("first start: /readyz?verbose says\n%s\ndebug page says %q; want cold, no snapshot yet", readyz, start)
	}
	entries, err := os.ReadDir(dir)
	var files []os.DirEntry // beside the key that authenticates them
	for _, e := range entries {
		if e.Name() != snapshot.KeyFile {
			files = append(files, e)
		}
	}
	if err != nil || len(files) != 1 || !strings.HasSuffix(files[0].Name(), ".snap") {
		t.Fatalf("CacheDir holds %v (%v), want one snapshot beside the key", entries, err)
	}

	readyz, start, rec := runWithCacheDir(t, srv, ns, dir, n)
	want := fmt.Sprintf("warm (%d objects at resource version", n)
	if !strings.Contains(readyz, "started "+want) || !strings.HasPrefix(start, want) {
		t.Fatalf("second start: /readyz?verbose says\n%s\ndebug page says %q; want %s...", readyz, start, want)
	}
	for k, c := range rec.keys {
		if c != 1 {
			t.Errorf("key %s reconciled %d times after a warm start, want once (as after a cold list)", k, c)
		}
	}
}
