package fleet_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/lease"
	"github.com/ctrlkit/ctrlkit/shard"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// The replicas of TestFleet_ring* are this test binary run again with
// these variables set; TestMain hands such a process to ringReplicaMain.
const (
	envRingReplica    = "CTRLKIT_TEST_FLEET_REPLICA"    // the replica's identity
	envRingKubeconfig = "CTRLKIT_TEST_FLEET_KUBECONFIG" // the one server: the ring's Leases and every cluster
	envRingLog        = "CTRLKIT_TEST_FLEET_LOG"        // where the replica records its reconciles
)

// ringClusters is how many clusters the ring's replicas share; all of
// them are the one test server under different names. Beside them, every
// replica engages the server once more as spreadCluster, whose objects
// (spreadObjects ConfigMaps beside the tick) are spread over the replicas
// one by one (Options.Spread).
const (
	ringClusters  = 24
	spreadCluster = "big"
	spreadObjects = 23
)

func TestMain(m *testing.M) {
	if os.Getenv(envRingReplica) != "" {
		os.Exit(ringReplicaMain())
	}
	os.Exit(m.Run())
}

// ringReplicaMain runs a fleet in a ring whose reconciler records when each
// reconcile of each cluster starts and ends, until SIGTERM.
func ringReplicaMain() int {
	id := os.Getenv(envRingReplica)
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "replica", id+":", err); return 1 }
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(envRingKubeconfig))
	if err != nil {
		return fail(err)
	}
	log, err := os.OpenFile(os.Getenv(envRingLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fail(err)
	}
	defer log.Close()
	var mu sync.Mutex
	// What a reconcile is recorded under: its cluster, or for the spread
	// cluster the whole key (its objects move one by one).
	unit := func(k fleet.Key) string {
		if k.Cluster == spreadCluster {
			return k.String()
		}
		return k.Cluster
	}
	record := func(what string, k fleet.Key) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(log, "%s %d %s\n", what, time.Now().UnixNano(), unit(k))
	}
	f, err := fleet.New(controller.ReconcileFunc[fleet.Key](func(ctx context.Context, k fleet.Key) (controller.Result, error) {
		if k.Cluster != spreadCluster && k.Name != "tick" {
			return controller.Result{}, nil // a whole cluster moves as one: its tick says who holds it
		}
		record("start", k)
		defer record("end", k)
		select {
		case <-time.After(5 * time.Millisecond): // work that honours its context
		case <-ctx.Done():
		}
		return controller.Result{}, nil
	}), fleet.Options{Controller: controller.Options[fleet.Key]{Workers: 4,
		Telemetry: telemetry.Telemetry{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)).With("replica", id)}}, RingConfig: cfg,
		Spread: []string{spreadCluster},
		Ring: shard.Ring{Name: "fleet", Namespace: "ring", Identity: id, VirtualShards: 16,
			Timing: lease.Timing{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond}}})
	if err != nil {
		return fail(err)
	}
	cms, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: "work"})
	if err != nil {
		return fail(err)
	}
	for i := range ringClusters {
		if err := f.Engage(fmt.Sprintf("c%02d", i), cfg); err != nil {
			return fail(err)
		}
	}
	if err := f.Engage(spreadCluster, cfg); err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Every 100 ms: how many of the spread cluster's objects this replica
	// caches (its share, once its shards settled).
	sizes := make(chan struct{})
	go func() {
		defer close(sizes)
		for ctx.Err() == nil {
			if r, ok := cms.Reader(spreadCluster); ok {
				mu.Lock()
				fmt.Fprintf(log, "cached %d %d\n", time.Now().UnixNano(), r.Len())
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond): // a sample, not synchronisation
			}
		}
	}()
	defer func() { <-sizes }()
	if err := f.Run(ctx); err != nil {
		return fail(err)
	}
	return 0
}

// reconcileSpan is one reconcile of one cluster by one replica.
type reconcileSpan struct {
	replica, cluster string
	start, end       int64
}

// readSpans parses a replica's log.
func readSpans(t *testing.T, id, path string) []reconcileSpan {
	t.Helper()
	fh, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	open := map[string]int64{}
	var out []reconcileSpan
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		at, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "start":
			open[f[2]] = at
		case "end":
			if s, ok := open[f[2]]; ok {
				out = append(out, reconcileSpan{replica: id, cluster: f[2], start: s, end: at})
				delete(open, f[2])
			}
		}
	}
	return out
}

// ownersBetween returns, per cluster, the replica that last started
// reconciling it between from and to.
func ownersBetween(spans []reconcileSpan, from, to int64) map[string]string {
	last := map[string]reconcileSpan{}
	for _, s := range spans {
		if s.start >= from && s.start < to && s.start > last[s.cluster].start {
			last[s.cluster] = s
		}
	}
	out := map[string]string{}
	for c, s := range last {
		out[c] = s.replica
	}
	return out
}

// Two replicas share the clusters of a fleet in a ring; a third joins.
// Clusters move to it by drain-then-release: no cluster is ever reconciled
// by two replicas at once, and each moved cluster is reconciled again on
// its new replica within 2 seconds of its last reconcile on the old one
// (lease expiry, 3 s here and 15 s by default, plays no part). Real
// processes on one real API server, which is every cluster too.
func TestFleet_ringMovesClustersWithoutOverlap(t *testing.T) {
	srv, kube := startServer(t, "ring")
	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "work"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tick, err := kube.CoreV1().ConfigMaps("work").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tick"},
		Data: map[string]string{"i": "0"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range spreadObjects {
		if _, err := kube.CoreV1().ConfigMaps("work").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("obj-%02d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	type replica struct {
		cmd  *exec.Cmd
		log  string
		done chan error
	}
	replicas := map[string]*replica{}
	start := func(id string) {
		r := &replica{log: filepath.Join(dir, id+".log"), done: make(chan error, 1)}
		r.cmd = exec.Command(os.Args[0], "-test.run=^$")
		r.cmd.Env = append(os.Environ(), envRingReplica+"="+id, envRingKubeconfig+"="+srv.Kubeconfig(), envRingLog+"="+r.log)
		r.cmd.Stderr = os.Stderr
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { r.done <- r.cmd.Wait() }()
		replicas[id] = r
	}
	stopAll := func() {
		for id, r := range replicas {
			if r.cmd.ProcessState != nil {
				continue
			}
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-r.done:
				if err != nil {
					t.Errorf("replica %s: %v", id, err)
				}
			case <-time.After(30 * time.Second):
				_ = r.cmd.Process.Kill()
				t.Errorf("replica %s did not stop within 30s of SIGTERM", id)
			}
		}
	}
	t.Cleanup(stopAll)
	spans := func() []reconcileSpan {
		var all []reconcileSpan
		for id, r := range replicas {
			all = append(all, readSpans(t, id, r.log)...)
		}
		return all
	}
	owners := func(since int64) map[string]string { // cluster → the replica that reconciled it last
		return ownersBetween(wholeClusters(spans()), since, math.MaxInt64)
	}
	// A writer changes the ConfigMap every 50 ms: each change is reconciled
	// in every cluster, by whichever replica holds it.
	wctx, stopWriter := context.WithCancel(t.Context())
	writing := make(chan struct{})
	go func() {
		defer close(writing)
		for i := 1; wctx.Err() == nil; i++ {
			tick.Data["i"] = strconv.Itoa(i)
			if cm, err := kube.CoreV1().ConfigMaps("work").Update(wctx, tick, metav1.UpdateOptions{}); err == nil {
				tick = cm
			}
			select {
			case <-wctx.Done():
			case <-time.After(50 * time.Millisecond): // pacing the load
			}
		}
	}()
	start("r1")
	start("r2")
	eventually(t, 60*time.Second, "every cluster reconciled by r1 or r2", func() bool { return len(owners(0)) == ringClusters })
	before := time.Now().UnixNano()
	eventually(t, 30*time.Second, "both replicas holding clusters", func() bool {
		o := owners(before)
		held := map[string]int{}
		for _, r := range o {
			held[r]++
		}
		return len(o) == ringClusters && held["r1"] > 0 && held["r2"] > 0
	})
	ownerBefore := owners(before)
	joined := time.Now().UnixNano()
	start("r3")
	eventually(t, 60*time.Second, "r3 holding clusters", func() bool {
		for _, r := range owners(joined) {
			if r == "r3" {
				return true
			}
		}
		return false
	})
	// Let the ring settle: two seconds with no cluster changing hands.
	settled := time.Now().UnixNano()
	eventually(t, 60*time.Second, "the ring settled", func() bool {
		now := time.Now().UnixNano()
		if now-settled < int64(3*time.Second) {
			return false
		}
		window := owners(now - int64(time.Second))
		if len(window) < ringClusters {
			return false
		}
		for c, r := range owners(now - int64(2*time.Second)) {
			if window[c] != r {
				settled = now
				return false
			}
		}
		return true
	})
	stopWriter()
	<-writing
	ended := time.Now().UnixNano()
	stopAll() // the replicas' shutdown hands clusters over again: checked for overlaps, not counted as moves

	all := spans()
	byCluster := map[string][]reconcileSpan{}
	for _, s := range all {
		byCluster[s.cluster] = append(byCluster[s.cluster], s)
	}
	ownerAfter := ownersBetween(wholeClusters(all), joined, ended)
	moved, worst := 0, time.Duration(0)
	for c, ss := range byCluster {
		sort.Slice(ss, func(i, j int) bool { return ss[i].start < ss[j].start })
		lastEnd := map[string]int64{} // per replica, the latest end of its spans so far
		for _, s := range ss {
			for r, end := range lastEnd {
				if r != s.replica && end > s.start {
					t.Errorf("cluster %s reconciled by %s and %s at once (%s's until %d, %s's from %d)", c, r, s.replica, r, end, s.replica, s.start)
				}
			}
			lastEnd[s.replica] = max(lastEnd[s.replica], s.end)
		}
		if ownerBefore[c] == ownerAfter[c] || ownerAfter[c] == "" {
			continue
		}
		moved++
		var lastOld, firstNew int64
		for _, s := range ss {
			if s.replica == ownerBefore[c] && s.end < ended && s.end > lastOld {
				lastOld = s.end
			}
			if s.replica == ownerAfter[c] && s.start > joined && s.start < ended && (firstNew == 0 || s.start < firstNew) {
				firstNew = s.start
			}
		}
		gap := time.Duration(firstNew - lastOld)
		worst = max(worst, gap)
		if gap > 2*time.Second {
			t.Errorf("cluster %s moved from %s to %s with a %v gap, want ≤ 2s", c, ownerBefore[c], ownerAfter[c], gap)
		}
	}
	held := map[string]int{}
	for _, r := range ownerAfter {
		held[r]++
	}
	t.Logf("%d clusters over 2 replicas, a third joined: %d moved (held after: %v); %d reconciles, none of one cluster by two "+
		"replicas at once; the longest handoff (last reconcile on the old replica to the first on the new) %v",
		ringClusters, moved, held, len(all), worst.Round(time.Millisecond))
	if moved == 0 || held["r3"] == 0 {
		t.Errorf("no cluster moved to the replica that joined (held after: %v)", held)
	}
	checkSpread(t, all, joined, ended)
	cached := map[string]int{} // replica → its last count of the spread cluster's cached objects before ended
	for id, r := range replicas {
		cached[id] = lastCached(t, r.log, ended)
	}
	t.Logf("the spread cluster's objects cached by each replica once the ring settled: %v", cached)
	if cached["r1"]+cached["r2"]+cached["r3"] != spreadObjects+1 || cached["r1"] >= spreadObjects+1 ||
		cached["r2"] >= spreadObjects+1 || cached["r3"] >= spreadObjects+1 {
		t.Errorf("the spread cluster's %d objects cached by replica %v: want each cached by one replica, none caching all",
			spreadObjects+1, cached)
	}
}

// lastCached returns the last count of the spread cluster's cached objects
// a replica's log at path recorded before until.
func lastCached(t *testing.T, path string, until int64) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "cached" {
			continue
		}
		at, _ := strconv.ParseInt(f[1], 10, 64)
		if at < until {
			n, _ = strconv.Atoi(f[2])
		}
	}
	return n
}

// wholeClusters returns the spans of the clusters that move as one (not
// the spread cluster's objects).
func wholeClusters(spans []reconcileSpan) []reconcileSpan {
	var out []reconcileSpan
	for _, s := range spans {
		if !strings.HasPrefix(s.cluster, spreadCluster+"/") {
			out = append(out, s)
		}
	}
	return out
}

// checkSpread checks the spread cluster's objects before the replicas
// stopped at ended: each reconciled, by more than one replica among them
// (they are spread, not held as one cluster), and some by the replica
// that joined at joined, after it did (their shards moved to it, and it
// queued what it acquired). That none was reconciled by two replicas at
// once is checked with the clusters.
func checkSpread(t *testing.T, all []reconcileSpan, joined, ended int64) {
	t.Helper()
	byReplica := map[string]map[string]bool{} // replica → the objects it reconciled
	objects := map[string]bool{}
	for _, s := range all {
		if !strings.HasPrefix(s.cluster, spreadCluster+"/") {
			continue
		}
		objects[s.cluster] = true
		r := s.replica
		if s.start >= ended || r == "r3" && s.start < joined {
			continue
		}
		if byReplica[r] == nil {
			byReplica[r] = map[string]bool{}
		}
		byReplica[r][s.cluster] = true
	}
	counts := map[string]int{}
	for r, objs := range byReplica {
		counts[r] = len(objs)
	}
	t.Logf("spread cluster %s: %d objects reconciled, by replica %v", spreadCluster, len(objects), counts)
	if len(objects) != spreadObjects+1 {
		t.Errorf("%d of the spread cluster's %d objects reconciled", len(objects), spreadObjects+1)
	}
	if counts["r1"] == 0 || counts["r2"] == 0 || counts["r3"] == 0 {
		t.Errorf("the spread cluster's objects reconciled by replica %v: want some by each (r3's after it joined)", counts)
	}
}

// A replica of a ring that is given a cluster it cannot reach still opens
// its shards and reconciles the clusters it can: a cluster that is down
// holds up no other (the replica runs in the test's process).
func TestFleet_ringDoesNotWaitForAClusterThatIsDown(t *testing.T) {
	srv, kube := startServer(t, "ring")
	if _, err := kube.CoreV1().ConfigMaps("ring").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reconciled := make(chan fleet.Key, 16)
	f, err := fleet.New(controller.ReconcileFunc[fleet.Key](func(_ context.Context, k fleet.Key) (controller.Result, error) {
		select {
		case reconciled <- k:
		default:
		}
		return controller.Result{}, nil
	}), fleet.Options{RingConfig: srv.Config(), Ring: shard.Ring{Name: "solo", Namespace: "ring", Identity: "only", VirtualShards: 4,
		Timing: lease.Timing{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.For[*corev1.ConfigMap](f, fleet.Scope{Namespace: "ring"}); err != nil {
		t.Fatal(err)
	}
	dead := srv.Config()
	dead.Host = "https://127.0.0.1:1" // nothing listens there
	if err := f.Engage("dead", dead); err != nil {
		t.Fatal(err)
	}
	if err := f.Engage("alive", srv.Config()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	started := time.Now()
	go func() { ran <- f.Run(ctx) }()
	select {
	case k := <-reconciled:
		if k.Cluster != "alive" {
			t.Errorf("reconciled %v, want a key of the cluster that is up", k)
		}
		// Waiting for the dead cluster to list would hold every shard
		// shut until the sharder's relist gives up: twice LeaseDuration.
		took := time.Since(started)
		t.Logf("the cluster that is up reconciled %v after Run", took.Round(time.Millisecond))
		if took > 4*time.Second {
			t.Errorf("the first reconcile came %v after Run: the shards waited for the cluster that is down", took)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("nothing reconciled in 30s with one cluster down (status %v, ready: %v)", f.Status(), f.Ready())
	}
	if here := f.Here(); len(here) != 2 {
		t.Errorf("Here() = %v, want both clusters (the only replica holds every shard)", here)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
}
