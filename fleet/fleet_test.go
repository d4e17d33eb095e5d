package fleet_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/poll"
	"github.com/ctrlkit/ctrlkit/object"
)

// seen records the keys the fleet's controller reconciled, and when each
// was first.
type seen struct {
	mu    sync.Mutex
	first map[fleet.Key]time.Time
	found map[fleet.Key]bool // the cache of the key's cluster held it
	count map[fleet.Key]int
	cms   *fleet.Cache[*corev1.ConfigMap]
}

func (s *seen) Reconcile(_ context.Context, k fleet.Key) (controller.Result, error) {
	_, ok := s.cms.Get(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, done := s.first[k]; !done {
		s.first[k] = time.Now()
	}
	s.found[k] = ok
	s.count[k]++
	return controller.Result{}, nil
}

func (s *seen) times(k fleet.Key) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[k]
}

func (s *seen) at(k fleet.Key) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.first[k]
	return t, ok
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, d, 10*time.Millisecond, what, cond)
}

// startServer starts an API server of the test's own, with namespace ns.
func startServer(t *testing.T, ns string) (*apiserver.Server, kubernetes.Interface) {
	t.Helper()
	srv, err := apiserver.Start(t.Context(), apiserver.Options{Progress: os.Stderr})
	if err != nil {
		t.Fatalf("the real API server is required and did not start: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	kube := apiserver.Client(t, srv.Config())
	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return srv, kube
}

// One controller over two real API servers: both clusters' objects are
// reconciled under their own cluster's name, a cluster engaged while the
// fleet runs is reconciled at once, a cluster disengaged leaves nothing
// behind (goroutines and heap at baseline over many cycles), and the
// Directory provider engages and disengages clusters as kubeconfig files
// come and go, and the Secrets provider as kubeconfig Secrets do.
func TestFleet_oneControllerOverClustersThatComeAndGo(t *testing.T) {
	const ns = "fleet"
	a, kubeA := startServer(t, ns)
	b, kubeB := startServer(t, ns)
	leakcheck.Check(t)
	rec := &seen{first: map[fleet.Key]time.Time{}, found: map[fleet.Key]bool{}, count: map[fleet.Key]int{}}
	f, err := fleet.New(rec, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Owns[*corev1.Secret](f, fleet.Scope{Namespace: ns}); !errors.Is(err, fleet.ErrNoFor) {
		t.Errorf("Owns before For = %v, want ErrNoFor", err)
	}
	if rec.cms, err = fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Owns[*corev1.Secret](f, fleet.Scope{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	for _, kube := range []kubernetes.Interface{kubeA, kubeB} {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Engage("a", a.Config()); err != nil {
		t.Fatal(err)
	}
	if err := f.Engage("a", a.Config()); !errors.Is(err, fleet.ErrEngaged) {
		t.Errorf("Engage twice = %v, want ErrEngaged", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	x := object.ObjectName{Namespace: ns, Name: "x"}
	eventually(t, 30*time.Second, "cluster a's object reconciled", func() bool { _, ok := rec.at(fleet.Key{Cluster: "a", ObjectName: x}); return ok })

	// A cluster joins while the fleet runs.
	joined := time.Now()
	if err := f.Engage("b", b.Config()); err != nil {
		t.Fatal(err)
	}
	kb := fleet.Key{Cluster: "b", ObjectName: x}
	eventually(t, 30*time.Second, "cluster b's object reconciled", func() bool { _, ok := rec.at(kb); return ok })
	first, _ := rec.at(kb)
	t.Logf("a cluster engaged while the fleet runs: its first reconcile %v after Engage", first.Sub(joined).Round(time.Millisecond))
	if d := first.Sub(joined); d > time.Second {
		t.Errorf("first reconcile of a joining cluster %v after Engage, want ≤ 1s", d)
	}
	rec.mu.Lock()
	if !rec.found[kb] {
		t.Error("the reconcile of b's object did not find it in b's cache")
	}
	rec.mu.Unlock()
	// An owned object changed in b queues its owner in b, not in a.
	cmB, err := kubeB.CoreV1().ConfigMaps(ns).Get(t.Context(), "x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before, beforeA := rec.times(kb), rec.times(fleet.Key{Cluster: "a", ObjectName: x})
	child := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "child", OwnerReferences: []metav1.OwnerReference{
		*metav1.NewControllerRef(cmB, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}}}
	if _, err := kubeB.CoreV1().Secrets(ns).Create(t.Context(), child, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the owned Secret's change queued its owner in b", func() bool { return rec.times(kb) > before })
	if got := rec.times(fleet.Key{Cluster: "a", ObjectName: x}); got != beforeA {
		t.Errorf("an owned object in b queued a's object of the same name (%d reconciles, was %d)", got, beforeA)
	}
	if got := f.Clusters(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("Clusters() = %v, want [a b]", got)
	}

	// It leaves, and joins and leaves again many times: nothing of it stays.
	if err := f.Disengage("b"); err != nil {
		t.Fatal(err)
	}
	if f.Engaged("b") {
		t.Fatal("b still engaged after Disengage")
	}
	cycles := 20
	if n, err := strconv.Atoi(os.Getenv("CTRLKIT_FLEET_CYCLES")); err == nil && n > 0 {
		cycles = n
	}
	cycle := func() time.Duration {
		t.Helper()
		if err := f.Engage("b", b.Config()); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "b's cache filled again", func() bool { _, ok := rec.cms.Get(kb); return ok })
		left := time.Now()
		if err := f.Disengage("b"); err != nil {
			t.Fatal(err)
		}
		return time.Since(left)
	}
	// The baseline after a few cycles: the first ones make what the process
	// makes once and keeps (the runtime's threads, pools, HTTP/2 tables).
	for range 5 {
		cycle()
	}
	goroutines, heap := runtime.NumGoroutine(), leakcheck.LiveHeap()
	var worstLeave time.Duration
	for range cycles {
		worstLeave = max(worstLeave, cycle())
	}
	eventually(t, 10*time.Second, "the goroutines of the disengaged cluster gone", func() bool { return runtime.NumGoroutine() <= goroutines })
	mid := leakcheck.LiveHeap()
	// As many cycles again: memory a cycle left behind would grow with them.
	for range cycles {
		worstLeave = max(worstLeave, cycle())
	}
	eventually(t, 10*time.Second, "the goroutines of the disengaged cluster gone", func() bool { return runtime.NumGoroutine() <= goroutines })
	after := leakcheck.LiveHeap()
	t.Logf("2 x %d engage/disengage cycles: %d goroutines before, %d after; live heap %d bytes before, %d after the first %d "+
		"(%+.2f%%), %d after the next %d (%+.2f%%); Disengage took at most %v", cycles, goroutines, runtime.NumGoroutine(),
		heap, mid, cycles, 100*(float64(mid)/float64(heap)-1), after, cycles, 100*(float64(after)/float64(mid)-1),
		worstLeave.Round(time.Millisecond))
	// An engaged cluster costs ~90 kB: one left behind per cycle is far
	// above the noise of a few runtime allocations (tens of kB).
	if limit := max(mid/100, 256<<10); after > mid+limit {
		t.Errorf("live heap grew from %d to %d (more than %d bytes) over %d more cycles: a disengaged cluster left memory behind", mid, after, limit, cycles)
	}
	if worstLeave > 5*time.Second {
		t.Errorf("Disengage took %v, want ≤ 5s", worstLeave)
	}
	if _, ok := rec.cms.Reader("b"); ok {
		t.Error("the cache of a disengaged cluster is still served")
	}

	// The Directory provider: files in, clusters in; files out, clusters out.
	dir := t.TempDir()
	pctx, stopProvider := context.WithCancel(ctx)
	provided := make(chan error, 1)
	go func() { provided <- fleet.Directory{Path: dir, Interval: 50 * time.Millisecond}.Run(pctx, f) }()
	kc, err := os.ReadFile(b.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "from-file.kubeconfig"), kc, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("not a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	kf := fleet.Key{Cluster: "from-file", ObjectName: x}
	eventually(t, 30*time.Second, "the cluster of a kubeconfig file reconciled", func() bool { _, ok := rec.at(kf); return ok })
	if f.Engaged("broken") {
		t.Error("a file that is no kubeconfig engaged a cluster")
	}
	// A change that cannot be used (a file read half written) leaves the
	// cluster on its previous kubeconfig, listed by Refused until the file
	// is right again.
	fromFile, _ := f.Cluster("from-file")
	if err := os.WriteFile(filepath.Join(dir, "from-file.kubeconfig"), kc[:len(kc)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the unusable change listed by Refused", func() bool {
		return slices.ContainsFunc(f.Refused(), func(c fleet.ClusterStatus) bool { return c.Name == "from-file" })
	})
	if c, ok := f.Cluster("from-file"); !ok || c != fromFile {
		t.Error("a half-written kubeconfig stopped or replaced its cluster, want it running on the previous one")
	}
	if err := os.WriteFile(filepath.Join(dir, "from-file.kubeconfig"), kc, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the kubeconfig written whole no longer refused", func() bool {
		return !slices.ContainsFunc(f.Refused(), func(c fleet.ClusterStatus) bool { return c.Name == "from-file" })
	})
	if c, ok := f.Cluster("from-file"); !ok || c != fromFile {
		t.Error("the kubeconfig written whole again engaged the cluster anew, want it kept")
	}
	if err := os.Remove(filepath.Join(dir, "from-file.kubeconfig")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the cluster of a removed file disengaged", func() bool { return !f.Engaged("from-file") })
	stopProvider()
	if err := <-provided; err != nil {
		t.Errorf("Directory.Run: %v", err)
	}

	// The Secrets provider: a kubeconfig Secret in the management cluster
	// (a) engages its cluster, a changed one moves it, a deleted one ends it.
	sctx, stopSecrets := context.WithCancel(ctx)
	fromSecrets := make(chan error, 1)
	go func() { fromSecrets <- fleet.Secrets{Kube: kubeA, Namespace: ns}.Run(sctx, f) }()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "remote" + fleet.SecretSuffix}, Data: map[string][]byte{"value": kc}}
	if _, err := kubeA.CoreV1().Secrets(ns).Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kr := fleet.Key{Cluster: "remote", ObjectName: x}
	eventually(t, 30*time.Second, "the cluster of a kubeconfig Secret reconciled", func() bool { _, ok := rec.at(kr); return ok })
	if _, err := kubeA.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "only-in-a"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kcA, err := os.ReadFile(a.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	secret.Data["value"] = kcA // the cluster moves to another server
	if _, err := kubeA.CoreV1().Secrets(ns).Update(t.Context(), secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	onlyInA := fleet.Key{Cluster: "remote", ObjectName: object.ObjectName{Namespace: ns, Name: "only-in-a"}}
	eventually(t, 30*time.Second, "the cluster engaged again on the Secret's new server", func() bool { _, ok := rec.cms.Get(onlyInA); return ok })
	if err := kubeA.CoreV1().Secrets(ns).Delete(t.Context(), secret.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the cluster of a deleted Secret disengaged", func() bool { return !f.Engaged("remote") })
	stopSecrets()
	if err := <-fromSecrets; err != nil {
		t.Errorf("Secrets.Run: %v", err)
	}

	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
	if got := f.Clusters(); len(got) != 0 {
		t.Errorf("clusters engaged after Run returned: %v", got)
	}
	if err := f.Engage("c", a.Config()); !errors.Is(err, fleet.ErrStopped) {
		t.Errorf("Engage after Run = %v, want ErrStopped", err)
	}
}

// The Directory provider engages only what the folder's owner wrote: a
// folder or a file other users can write, and a kubeconfig that runs a
// plugin, are refused (no server is needed: engaging makes no request).
func TestDirectory_refusesFilesOthersCanWriteAndPlugins(t *testing.T) {
	leakcheck.Check(t)
	f, err := fleet.New(controller.ReconcileFunc[fleet.Key](func(context.Context, fleet.Key) (controller.Result, error) {
		return controller.Result{}, nil
	}), fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{}); err != nil {
		t.Fatal(err)
	}
	fctx, stopFleet := context.WithCancel(t.Context())
	fleetDone := make(chan error, 1)
	go func() { fleetDone <- f.Run(fctx) }() // an engaged cluster's informer would run its plugin at its first request
	safe := []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")
	dir, marker := t.TempDir(), filepath.Join(t.TempDir(), "ran")
	plugin := []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: ['-c', 'touch " + marker + "'], interactiveMode: Never}}}]\n" +
		"contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")
	for name, content := range map[string][]byte{"safe.kubeconfig": safe, "plugin.kubeconfig": plugin, "shared.kubeconfig": safe} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "shared.kubeconfig"), 0o666); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- fleet.Directory{Path: dir, Interval: 20 * time.Millisecond}.Run(ctx, f) }()
	eventually(t, 10*time.Second, "the safe kubeconfig engaged", func() bool { return f.Engaged("safe") })
	refusedNames := func() []string {
		var names []string
		for _, r := range f.Refused() {
			names = append(names, r.Name)
		}
		return names
	}
	eventually(t, 10*time.Second, "the plugin's and the shared file's clusters refused", func() bool {
		return slices.Equal(refusedNames(), []string{"plugin", "shared"})
	})
	if f.Engaged("plugin") || f.Engaged("shared") {
		t.Errorf("engaged %v: a kubeconfig that runs a plugin or that other users can write", f.Clusters())
	}
	for _, name := range []string{"plugin.kubeconfig", "shared.kubeconfig"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "the removed files' clusters no longer refused", func() bool { return len(refusedNames()) == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the kubeconfig's plugin ran")
	}

	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := (fleet.Directory{Path: open}).Run(t.Context(), f); !errors.Is(err, fleet.ErrUnsafeKubeconfig) {
		t.Errorf("Run on a folder others can write = %v, want ErrUnsafeKubeconfig", err)
	}
	stopFleet()
	if err := <-fleetDone; err != nil {
		t.Errorf("fleet Run: %v", err)
	}
}
