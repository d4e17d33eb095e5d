package manager_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/apply"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/lease"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/shard"
)

// The replicas of TestSharding_* are this test binary run again with these
// variables set (and envKubeconfig, envNamespace, envLog); TestMain hands
// such a process to shardReplicaMain.
const (
	envShardReplica  = "CTRLKIT_TEST_SHARD_REPLICA"  // the replica's identity
	envShardKey      = "CTRLKIT_TEST_SHARD_KEY"      // "uid" or "namespace"
	envShardOwns     = "CTRLKIT_TEST_SHARD_OWNS"     // "1": the controller owns a Secret per ConfigMap
	envShardRing     = "CTRLKIT_TEST_SHARD_RING"     // the ring's name; default "ring"
	envShardRead     = "CTRLKIT_TEST_SHARD_READONLY" // "1": reconciles only record themselves
	envShardVirtual  = "CTRLKIT_TEST_SHARD_VIRTUAL"  // virtual shards; default 16
	envShardTogether = "CTRLKIT_TEST_SHARD_TOGETHER" // "1": Run waits for a line on standard input (see startTogether)
)

// Short membership timings so the test takes seconds.
const (
	shardLease = 3 * time.Second
	shardRenew = 250 * time.Millisecond
	shardDrain = 2 * time.Second
)

// shardReplicaMain runs a sharded manager whose controller copies each
// ConfigMap's data["i"] into its annotation "seen" (and, with envShardOwns,
// creates a Secret it owns), recording in its log file when each reconcile
// starts and ends, its listener's address, and at exit what it cached,
// received and reconciled.
func shardReplicaMain() int {
	id := os.Getenv(envShardReplica)
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(envKubeconfig))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.QPS, cfg.Burst = 200, 400 // the test's writer is fast; the replicas must keep up
	f, err := os.OpenFile(os.Getenv(envLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	var logMu sync.Mutex
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(f, format+"\n", args...)
	}
	ctx, stop := signal(context.Background())
	defer stop()
	ns := os.Getenv(envNamespace)
	key := shard.UID
	if os.Getenv(envShardKey) == "namespace" {
		key = shard.Namespace
	}
	ringName := cmp.Or(os.Getenv(envShardRing), "ring")
	virtual, _ := strconv.Atoi(cmp.Or(os.Getenv(envShardVirtual), "16"))
	readOnly := os.Getenv(envShardRead) == "1"
	m, err := manager.New(cfg, manager.Options{HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		ShutdownTimeout: shardDrain,
		Sharding: manager.Sharding{Name: ringName, Namespace: ns, Identity: id, Key: key, VirtualShards: virtual,
			Timing: lease.Timing{LeaseDuration: shardLease, RenewDeadline: shardLease * 2 / 3, RetryPeriod: shardRenew}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	secrets := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: ns})
	owns := os.Getenv(envShardOwns) == "1"
	var reconciles int
	var recMu sync.Mutex
	rec := controller.ReconcileFunc[object.ObjectName](func(ctx context.Context, name object.ObjectName) (controller.Result, error) {
		logf("start %d %s", time.Now().UnixNano(), name.Name)
		defer func() { logf("end %d %s", time.Now().UnixNano(), name.Name) }()
		recMu.Lock()
		reconciles++
		recMu.Unlock()
		cm, ok := cms.Reader().Get(name)
		if !ok || readOnly {
			return controller.Result{}, nil
		}
		if owns {
			if _, ok := secrets.Reader().Get(name); !ok {
				s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name}}
				if err := apply.SetControllerReference(cm, s, scheme.Scheme); err != nil {
					return controller.Result{}, err
				}
				if _, err := m.Kube().CoreV1().Secrets(name.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					return controller.Result{}, err
				}
			}
		}
		if cm.Annotations["seen"] != cm.Data["i"] {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"seen":%q,"by":%q}}}`, cm.Data["i"], id)
			if _, err := m.Kube().CoreV1().ConfigMaps(name.Namespace).Patch(ctx, name.Name, types.MergePatchType, []byte(patch),
				metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return controller.Result{}, err
			}
		}
		select {
		case <-time.After(10 * time.Millisecond): // work that honours its context
		case <-ctx.Done():
		}
		return controller.Result{}, nil
	})
	sources := []manager.Source{manager.For(cms)}
	if owns {
		sources = append(sources, manager.Owns(secrets))
	}
	if _, err := manager.NewController(m, "copier", rec, manager.ControllerOptions{Options: controller.Options[object.ObjectName]{Workers: 2}}, sources...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		if addr := m.Addr(ctx); addr != "" {
			logf("addr %s", addr)
		}
	}()
	if os.Getenv(envShardTogether) == "1" {
		// Started with others: join the ring when they all can, not as
		// soon as this process is up (process start-up under load varies
		// by more than the ring's join grace).
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	err = m.Run(ctx)
	recMu.Lock()
	logf("stats cached=%d secrets=%d reconciles=%d", len(cms.Reader().Keys()), len(secrets.Reader().Keys()), reconciles)
	recMu.Unlock()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// ring is the replicas of one sharding test.
type ring struct {
	t          *testing.T
	kubeconfig string
	ns, dir    string
	env        []string
	replicas   map[string]*replica
	live       []string // in start order
	next       int
}

func newRing(t *testing.T, srv *apiserver.Server, ns string, env ...string) *ring {
	t.Helper()
	dir := t.TempDir()
	return &ring{t: t, kubeconfig: writeKubeconfig(t, srv.Config(), dir, "ring"), ns: ns, dir: dir, env: env,
		replicas: map[string]*replica{}}
}

// startTogether lets every replica started with envShardTogether run its
// manager at once.
func (r *ring) startTogether() {
	r.t.Helper()
	for _, id := range r.live {
		if _, err := io.WriteString(r.replicas[id].stdin, "go\n"); err != nil {
			r.t.Fatalf("replica %s: %v", id, err)
		}
	}
}

// add starts a replica with a new identity.
func (r *ring) add() *replica {
	r.t.Helper()
	id := fmt.Sprintf("s%02d", r.next)
	r.next++
	rep := startShardReplica(r.t, id, r.kubeconfig, r.ns, r.dir, r.env)
	r.replicas[id] = rep
	r.live = append(r.live, id)
	return rep
}

func startShardReplica(t *testing.T, id, kubeconfig, ns, dir string, env []string) *replica {
	t.Helper()
	return startProcess(t, id, dir, append([]string{envShardReplica + "=" + id, envKubeconfig + "=" + kubeconfig,
		envNamespace + "=" + ns}, env...)...)
}

// logLines returns the lines of r's log starting with prefix.
func logLines(t *testing.T, r *replica, prefix string) []string {
	t.Helper()
	b, err := os.ReadFile(r.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// lastStart returns, per ConfigMap, the last reconcile start by any of rs
// and who made it.
func lastStarts(t *testing.T, rs map[string]*replica) map[string]interval {
	out := map[string]interval{}
	for _, r := range rs {
		for _, iv := range readIntervals(t, r) {
			if iv.start > out[iv.name].start {
				out[iv.name] = iv
			}
		}
	}
	return out
}

// converged reports whether every ConfigMap's annotation "seen" equals its
// data["i"].
func converged(t *testing.T, kube kubernetes.Interface, ns string, n int) (bool, string) {
	t.Helper()
	list, err := kube.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	count := 0
	for _, cm := range list.Items {
		if !strings.HasPrefix(cm.Name, "cm-") {
			continue
		}
		count++
		if cm.Annotations["seen"] != cm.Data["i"] {
			return false, fmt.Sprintf("%s: seen %q, data %q", cm.Name, cm.Annotations["seen"], cm.Data["i"])
		}
	}
	return count == n, fmt.Sprintf("%d of %d ConfigMaps", count, n)
}

var shardChanges = flag.Int("shard.changes", 20, "membership changes in TestSharding_membershipChanges")

func TestSharding_membershipChangesNeverLetTwoReplicasReconcileAKeyAtOnce(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	const n = 60
	for i := range n {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}, Data: map[string]string{"i": "0"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := newRing(t, srv, ns, envShardOwns+"=1")
	for range 3 {
		r.add()
	}
	eventually(t, 60*time.Second, "the first three replicas converging", func() bool { ok, _ := converged(t, kube, ns, n); return ok })

	// A client writing the whole time: a new data["i"] on one ConfigMap every 20ms.
	ctx, stopWriting := context.WithCancel(t.Context())
	var writes sync.WaitGroup
	var last sync.Map // name -> last i written
	writes.Go(func() {
		for i := 1; ctx.Err() == nil; i++ {
			name := fmt.Sprintf("cm-%02d", i%n)
			patch := fmt.Sprintf(`{"data":{"i":"%d"}}`, i)
			if _, err := kube.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
				last.Store(name, i)
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	defer func() { stopWriting(); writes.Wait() }()

	killedAt := map[string]time.Time{}
	kinds := []failover{crash, "join", terminate, "join"}
	var takeovers []time.Duration
	for round := range *shardChanges {
		kind := kinds[round%len(kinds)]
		begin := time.Now()
		before := lastStarts(t, r.replicas)
		var gone string
		switch kind {
		case "join":
			r.add()
		case crash, terminate:
			gone = r.live[0]
			r.live = r.live[1:]
			rep := r.replicas[gone]
			if kind == crash {
				rep.cmd.Process.Kill()
				<-rep.exited
				killedAt[gone] = time.Now()
			} else {
				rep.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		// Every ConfigMap is reconciled again after the change, by a live replica.
		var mine []string // the keys the replica that went reconciled last
		for name, iv := range before {
			if iv.replica == gone {
				mine = append(mine, name)
			}
		}
		eventually(t, 30*time.Second, fmt.Sprintf("round %d (%s %s): every ConfigMap reconciled again", round, kind, gone), func() bool {
			now := lastStarts(t, r.replicas)
			for i := range n {
				iv := now[fmt.Sprintf("cm-%02d", i)]
				if iv.start < begin.UnixNano() || iv.replica == gone {
					return false
				}
			}
			return true
		})
		if gone != "" && len(mine) > 0 {
			// How long the keys of the replica that went waited for another.
			worst := time.Duration(0)
			firsts := map[string]int64{}
			for _, rep := range r.replicas {
				if rep.id == gone {
					continue
				}
				for _, iv := range readIntervals(t, rep) {
					if iv.start > begin.UnixNano() && slices.Contains(mine, iv.name) && (firsts[iv.name] == 0 || iv.start < firsts[iv.name]) {
						firsts[iv.name] = iv.start
					}
				}
			}
			for _, at := range firsts {
				worst = max(worst, time.Duration(at-begin.UnixNano()))
			}
			if kind == crash {
				takeovers = append(takeovers, worst)
			}
			t.Logf("round %d: %s of %s; its %d keys reconciled by others within %s", round, kind, gone, len(mine), worst.Round(time.Millisecond))
		} else {
			t.Logf("round %d: %s; every key reconciled again within %s", round, kind, time.Since(begin).Round(time.Millisecond))
		}
		if kind == terminate {
			rep := r.replicas[gone]
			select {
			case <-rep.exited:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s did not exit within 30s of SIGTERM", gone)
			}
			if code := exitCode(rep.err); code != 0 {
				t.Errorf("%s exited with %d after SIGTERM, want 0", gone, code)
			}
		}
	}
	stopWriting()
	writes.Wait()
	eventually(t, 60*time.Second, "every ConfigMap converging after the writes stopped", func() bool { ok, _ := converged(t, kube, ns, n); return ok })
	for _, d := range takeovers {
		if d > shardLease+2*shardRenew+1500*time.Millisecond {
			t.Errorf("a dead replica's keys waited %s for another; want about the lease duration %s plus a renew period", d, shardLease)
		}
	}
	slices.Sort(takeovers)
	if len(takeovers) > 0 {
		t.Logf("after SIGKILL, the dead replica's keys were reconciled by others within: min %s, median %s, max %s (lease %s, renew period %s)",
			takeovers[0].Round(time.Millisecond), takeovers[len(takeovers)/2].Round(time.Millisecond),
			takeovers[len(takeovers)-1].Round(time.Millisecond), shardLease, shardRenew)
	}
	checkNoOverlapPerKey(t, r.replicas, killedAt)
	secrets, err := kube.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != n {
		t.Errorf("%d Secrets, want one per ConfigMap (%d)", len(secrets.Items), n)
	}
}

// checkNoOverlapPerKey fails t if two replicas reconciled one key at
// overlapping times. A killed replica's unfinished reconcile ends when it
// died.
func checkNoOverlapPerKey(t *testing.T, replicas map[string]*replica, killedAt map[string]time.Time) {
	t.Helper()
	byKey := map[string][]interval{}
	total := 0
	for _, r := range replicas {
		for _, iv := range readIntervals(t, r) {
			if iv.end == 0 {
				if at, ok := killedAt[r.id]; ok {
					iv.end = at.UnixNano()
				} else {
					iv.end = time.Now().UnixNano() // still running
				}
			}
			byKey[iv.name] = append(byKey[iv.name], iv)
			total++
		}
	}
	overlaps := 0
	for name, ivs := range byKey {
		slices.SortFunc(ivs, func(a, b interval) int { return int(a.start - b.start) })
		for i := range ivs {
			for j := i + 1; j < len(ivs) && ivs[j].start < ivs[i].end; j++ {
				if ivs[j].replica != ivs[i].replica {
					overlaps++
					if overlaps <= 5 {
						t.Errorf("%s reconciled by %s and %s at once", name, ivs[i].replica, ivs[j].replica)
					}
				}
			}
		}
	}
	if overlaps > 0 {
		t.Errorf("%d overlapping reconciles of one key by two replicas", overlaps)
	}
	t.Logf("%d reconciles of %d keys by %d processes, %d overlapping", total, len(byKey), len(replicas), overlaps)
}

// scrape returns the sum of the samples of metric at r's /metrics.
func scrape(t *testing.T, r *replica, metric string) float64 {
	t.Helper()
	return scrapeMatching(t, r, metric, func(string) bool { return true })
}

// scrapeMatching sums the samples of metric whose line passes keep.
func scrapeMatching(t *testing.T, r *replica, metric string, keep func(string) bool) float64 {
	t.Helper()
	addrs := logLines(t, r, "addr ")
	if len(addrs) == 0 {
		t.Fatalf("replica %s wrote no address", r.id)
	}
	resp, err := http.Get("http://" + strings.TrimPrefix(addrs[0], "addr ") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if (strings.HasPrefix(line, metric+"{") || strings.HasPrefix(line, metric+" ")) && keep(line) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

var shardObjects = flag.Int("shard.objects", 2000, "ConfigMaps in TestSharding_eachReplica (the note's figures: 20000)")

// share is what one replica cached, received and reconciled.
type share struct {
	cached, bytes, reconciles float64
	fallback                  float64 // ctrlkit_informer_shard_fallback of the ConfigMap informer
	syncs                     float64 // full syncs of the ConfigMap informer: the first and each relist
	lastList                  float64 // bytes since its latest list began (nothing is written once settled)
}

func TestSharding_eachReplicaCachesReceivesAndReconcilesItsShare(t *testing.T) {
	srv := env.Get(t)
	leakcheck.Check(t)
	off, err := apiserver.Start(t.Context(), apiserver.Options{DisableShardedListAndWatch: true})
	if err != nil {
		t.Fatalf("a second API server, without ShardedListAndWatch: %v", err)
	}
	defer off.Stop()
	n := *shardObjects
	for _, mode := range []struct {
		name string
		srv  *apiserver.Server
	}{{"server-side", srv}, {"client-side fallback", off}} {
		ns := mode.srv.Namespace(t)
		kube := apiserver.Client(t, mode.srv.Config())
		value := strings.Repeat("x", 400) // a ConfigMap of about 700 bytes on the wire
		if err := parallel(8, n, func(i int) error {
			_, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i), Labels: map[string]string{"app": "shard-test"}},
				Data:       map[string]string{"i": "0", "payload": value}}, metav1.CreateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var one share
		for _, replicas := range []int{1, 2, 4} {
			shares := measureShares(t, mode.srv, ns, fmt.Sprintf("m%d", replicas), replicas, n)
			if replicas == 1 {
				one = shares[0]
			}
			var worst share
			for _, s := range shares {
				worst.cached, worst.bytes, worst.reconciles = max(worst.cached, s.cached), max(worst.bytes, s.bytes), max(worst.reconciles, s.reconciles)
			}
			t.Logf("%s, %d objects, N=%d: per replica cached %v, received KiB %v in syncs %v (latest list %v KiB), reconciles %v; worst/one-replica: cached %.3f, bytes %.3f, reconciles %.3f (goal %.3f)",
				mode.name, n, replicas, column(shares, func(s share) float64 { return s.cached }),
				column(shares, func(s share) float64 { return s.bytes / 1024 }),
				column(shares, func(s share) float64 { return s.syncs }),
				column(shares, func(s share) float64 { return s.lastList / 1024 }),
				column(shares, func(s share) float64 { return s.reconciles }),
				worst.cached/one.cached, worst.bytes/one.bytes, worst.reconciles/one.reconciles, 1.15/float64(replicas))
			for i, s := range shares {
				if want := map[bool]float64{true: 0, false: 1}[mode.srv == srv]; s.fallback != want {
					t.Errorf("%s, N=%d: replica %d reports ctrlkit_informer_shard_fallback %v, want %v", mode.name, replicas, i, s.fallback, want)
				}
			}
			if worst.cached > 1.15*one.cached/float64(replicas) {
				t.Errorf("%s, N=%d: a replica cached %.0f of %.0f objects, more than 1.15/N", mode.name, replicas, worst.cached, one.cached)
			}
			// Bytes are checked on each replica's latest list: a replica
			// relists each time its shards change while the ring forms (and
			// again when a member's lease lapses under load), so its total
			// counts its share of the moment several times.
			for i, s := range shares {
				switch {
				case mode.srv == srv && s.lastList > 1.15*one.lastList/float64(replicas):
					t.Errorf("%s, N=%d: replica %d's latest list received %.0f bytes, one replica's %.0f: more than 1.15/N",
						mode.name, replicas, i, s.lastList, one.lastList)
				case mode.srv != srv && s.lastList < 0.95*one.lastList:
					t.Errorf("%s, N=%d: replica %d's latest list received %.0f bytes, one replica's %.0f: a server without the feature sends every object",
						mode.name, replicas, i, s.lastList, one.lastList)
				}
			}
		}
	}
}

func column(shares []share, f func(share) float64) []int {
	var out []int
	for _, s := range shares {
		out = append(out, int(f(s)+0.5))
	}
	return out
}

// measureShares runs a ring of n read-only replicas over ns's objects
// ConfigMaps until every object is cached by exactly one of them and
// reconciled, and returns what each cached, received and reconciled.
func measureShares(t *testing.T, srv *apiserver.Server, ns, ringName string, n, objects int) []share {
	t.Helper()
	r := newRing(t, srv, ns, envShardRing+"="+ringName, envShardRead+"=1", envShardVirtual+"=64", envShardTogether+"=1")
	for range n {
		r.add()
	}
	r.startTogether()
	eventually(t, 120*time.Second, fmt.Sprintf("%d replicas caching and reconciling %d objects once", n, objects), func() bool {
		total, reconciled := 0.0, map[string]bool{}
		for _, id := range r.live {
			rep := r.replicas[id]
			if len(logLines(t, rep, "addr ")) == 0 {
				return false
			}
			total += readShare(t, rep).cached
			for _, iv := range readIntervals(t, rep) {
				reconciled[iv.name] = true
			}
			if !ready(rep) {
				return false
			}
		}
		return total == float64(objects) && len(reconciled) == objects
	})
	// Once more, now that every reconcile has been counted; a replica's
	// figures count only if it was ready, and relisted nothing, from before
	// to after reading them (a member's lease may lapse under load and make
	// every replica relist: then its latest list is still under way).
	var shares []share
	eventually(t, 60*time.Second, "every replica ready and between relists", func() bool {
		shares = shares[:0]
		for _, id := range r.live {
			rep := r.replicas[id]
			if !ready(rep) {
				return false
			}
			s := readShare(t, rep)
			if !ready(rep) || readShare(t, rep).syncs != s.syncs {
				return false
			}
			shares = append(shares, s)
		}
		return true
	})
	opened := 0 // the debug page's view agrees: every shard open on exactly one replica
	for _, id := range r.live {
		st := debugState(t, r.replicas[id])
		if st.Shard == nil || st.Shard.Virtual != 64 || len(st.Shard.Members) != n || st.Shard.Ready != "" {
			t.Errorf("replica %s: /debug/ctrlkit/state.json shard = %+v, want 64 virtual shards, %d members, ready", id, st.Shard, n)
		} else {
			opened += st.Shard.Open
		}
	}
	if opened != 64 {
		t.Errorf("the replicas' debug pages show %d open shards in all, want 64", opened)
	}
	for _, id := range r.live {
		rep := r.replicas[id]
		rep.cmd.Process.Signal(syscall.SIGTERM)
		<-rep.exited
	}
	return shares
}

// readShare scrapes what replica r cached, received and reconciled.
func readShare(t *testing.T, r *replica) share {
	t.Helper()
	return share{cached: scrapeInformer(t, r, "ctrlkit_informer_cached_objects", "configmaps"),
		bytes:      scrapeInformer(t, r, "ctrlkit_informer_received_bytes_total", "configmaps"),
		reconciles: scrapeMatching(t, r, "controller_runtime_reconcile_total", func(l string) bool { return strings.Contains(l, `result="success"`) }),
		fallback:   scrapeInformer(t, r, "ctrlkit_informer_shard_fallback", "configmaps"),
		syncs:      1 + scrapeInformer(t, r, "ctrlkit_reflector_relists_total", "configmaps"),
		lastList:   scrapeInformer(t, r, "ctrlkit_informer_received_bytes_since_list", "configmaps")}
}

// ready reports whether r's /readyz answers 200.
func ready(r *replica) bool {
	addrs, _ := os.ReadFile(r.log)
	for _, line := range strings.Split(string(addrs), "\n") {
		if addr, ok := strings.CutPrefix(line, "addr "); ok {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}
	}
	return false
}

// scrapeInformer sums metric's samples whose informer label contains name.
func scrapeInformer(t *testing.T, r *replica, metric, name string) float64 {
	t.Helper()
	return scrapeMatching(t, r, metric, func(line string) bool { return strings.Contains(line, name) })
}

// parallel runs do(0..n-1) on workers goroutines; the first error wins.
func parallel(workers, n int, do func(i int) error) error {
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := do(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func TestSharding_badInputIsAClearErrorAtNew(t *testing.T) {
	srv := env.Get(t)
	for _, tc := range []struct {
		name string
		s    manager.Sharding
		le   string
		want string
	}{
		{"no namespace", manager.Sharding{Name: "r"}, "", "Namespace is required"},
		{"virtual shards not a power of two", manager.Sharding{Name: "r", Namespace: "default", VirtualShards: 48}, "", "power of two"},
		{"negative virtual shards", manager.Sharding{Name: "r", Namespace: "default", VirtualShards: -1}, "", "power of two"},
		{"too many virtual shards", manager.Sharding{Name: "r", Namespace: "default", VirtualShards: 1 << 13}, "", "at most 4096"},
		{"a shard key the server cannot hash", manager.Sharding{Name: "r", Namespace: "default", Key: "object.metadata.name"}, "", "object.metadata.uid"},
		{"with leader election", manager.Sharding{Name: "r", Namespace: "default"}, "lease", "exclusive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := quiet(t)
			opts.Sharding = tc.s
			if tc.le != "" {
				opts.LeaderElection.Name, opts.LeaderElection.Namespace = tc.le, "default"
			}
			_, err := manager.New(srv.Config(), opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error saying %q", err, tc.want)
			}
			if tc.s.VirtualShards != 0 || tc.s.Key != "" {
				if !errors.Is(err, shard.ErrInvalid) {
					t.Errorf("%v does not wrap shard.ErrInvalid", err)
				}
			}
		})
	}
}

// debugState reads r's /debug/ctrlkit/state.json.
func debugState(t *testing.T, r *replica) debug.State {
	t.Helper()
	addrs := logLines(t, r, "addr ")
	if len(addrs) == 0 {
		t.Fatalf("replica %s wrote no address", r.id)
	}
	resp, err := http.Get("http://" + strings.TrimPrefix(addrs[0], "addr ") + debug.Path + "/state.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st debug.State
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("state.json of %s: %v", r.id, err)
	}
	return st
}
