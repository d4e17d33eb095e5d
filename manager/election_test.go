package manager_test

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	ossignal "os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/lease"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

// The replicas of TestLeaderElection_* are this test binary run again with
// these variables set; TestMain hands such a process to replicaMain.
const (
	envReplica    = "CTRLKIT_TEST_REPLICA"    // the replica's identity
	envKubeconfig = "CTRLKIT_TEST_KUBECONFIG" // where its API server is
	envNamespace  = "CTRLKIT_TEST_NAMESPACE"
	envLog        = "CTRLKIT_TEST_LOG" // the file it records reconciles in
)

// Short lease timings so the test takes seconds; RenewDeadline < LeaseDuration
// leaves the fencing gap.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

// exitLost is a replica's exit code after losing its lease.
const exitLost = 3

// replicaMain runs a manager with leader election and one controller that
// records in its log file when each reconcile starts and ends (Unix
// nanoseconds), holding each for up to 100ms, or until its context ends.
func replicaMain() int {
	id := os.Getenv(envReplica)
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(envKubeconfig))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	f, err := os.OpenFile(os.Getenv(envLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	ctx, stop := signal(context.Background())
	defer stop()
	ns := os.Getenv(envNamespace)
	m, err := manager.New(cfg, manager.Options{HTTPAddr: "0", Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		ShutdownTimeout: 5 * time.Second,
		LeaderElection: election.Options{Name: "replicas", Namespace: ns, Identity: id,
			Timing: lease.Timing{LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	// Each reconcile writes: it marks the ConfigMap with the replica that
	// reconciled it last (a patch that changes something only when the
	// leader changed), then holds the key a little longer.
	rec := controller.ReconcileFunc[object.ObjectName](func(ctx context.Context, name object.ObjectName) (controller.Result, error) {
		fmt.Fprintf(f, "start %d %s\n", time.Now().UnixNano(), name.Name)
		defer func() { fmt.Fprintf(f, "end %d %s\n", time.Now().UnixNano(), name.Name) }()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"reconciled-by":%q}}}`, id)
		if _, err := m.Kube().CoreV1().ConfigMaps(ns).Patch(ctx, name.Name, types.MergePatchType, []byte(patch),
			metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return controller.Result{}, err
		}
		select {
		case <-time.After(50 * time.Millisecond): // work that honours its context
		case <-ctx.Done():
		}
		return controller.Result{}, nil
	})
	if _, err := manager.NewController(m, "recorder", rec, manager.ControllerOptions{Options: controller.Options[object.ObjectName]{Workers: 2}}, manager.For(cms)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	err = m.Run(ctx)
	switch {
	case errors.Is(err, election.ErrLost):
		return exitLost
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// signal returns a context that ends on SIGTERM or SIGINT.
func signal(ctx context.Context) (context.Context, func()) {
	return ossignal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
}

// replica is one replica process.
type replica struct {
	id     string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error          // Wait's result, once exited is closed
	stdin  io.WriteCloser // the process's standard input
}

func startReplica(t *testing.T, id, kubeconfig, ns, dir string) *replica {
	t.Helper()
	return startProcess(t, id, dir, envReplica+"="+id, envKubeconfig+"="+kubeconfig, envNamespace+"="+ns)
}

// startProcess runs this test binary again with env added, as replica id;
// its output goes to dir/id.out (logged if the test fails), its reconcile
// log is dir/id.log (envLog). The process gets SIGTERM when the test ends,
// SIGKILL 30s later.
func startProcess(t *testing.T, id, dir string, env ...string) *replica {
	t.Helper()
	r := &replica{id: id, log: filepath.Join(dir, id+".log"), exited: make(chan struct{})}
	r.cmd = exec.Command(os.Args[0], "-test.run=^$")
	r.cmd.Env = append(append(os.Environ(), envLog+"="+r.log), env...)
	out, err := os.Create(filepath.Join(dir, id+".out"))
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.Stdout, r.cmd.Stderr = out, out
	stdin, err := r.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.stdin = stdin
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		out.Close()
		close(r.exited)
	}()
	t.Cleanup(func() {
		r.stdin.Close() // a process still waiting for its start line ends
		r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(30 * time.Second):
			r.cmd.Process.Kill()
			<-r.exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("replica %s output (last 4 KiB):\n%s", id, b[max(0, len(b)-4096):])
		}
	})
	return r
}

// writeKubeconfig writes a kubeconfig for cfg (token and CA data) into dir.
func writeKubeconfig(t *testing.T, cfg *rest.Config, dir, name string) string {
	t.Helper()
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: ca}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "x"
	path := filepath.Join(dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// interval is one reconcile of one replica, in Unix nanoseconds; end is 0
// when the replica died during it.
type interval struct {
	replica    string
	start, end int64
	name       string
}

func readIntervals(t *testing.T, r *replica) []interval {
	t.Helper()
	f, err := os.Open(r.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []interval
	open := map[string]int{} // name -> index in out of its open interval
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue // a line cut by SIGKILL
		}
		ts, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "start":
			open[fields[2]] = len(out)
			out = append(out, interval{replica: r.id, start: ts, name: fields[2]})
		case "end":
			if i, ok := open[fields[2]]; ok {
				out[i].end = ts
				delete(open, fields[2])
			}
		}
	}
	return out
}

func holder(t *testing.T, kube kubernetes.Interface, ns string) string {
	t.Helper()
	l, err := kube.CoordinationV1().Leases(ns).Get(t.Context(), "replicas", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// reconcilingSince reports whether r started a reconcile after since.
func reconcilingSince(t *testing.T, r *replica, since time.Time) bool {
	for _, iv := range readIntervals(t, r) {
		if iv.start > since.UnixNano() {
			return true
		}
	}
	return false
}

var electionRounds = flag.Int("election.rounds", 6, "failovers in TestLeaderElection_failovers (make election runs more)")

// cluster is the replicas of one test, each behind a fault proxy of its own.
type cluster struct {
	t        *testing.T
	srv      *apiserver.Server
	ns, dir  string
	replicas map[string]*replica
	proxies  map[string]*apiserver.Proxy
	next     int
}

func (c *cluster) add() {
	c.t.Helper()
	id := fmt.Sprintf("r%02d", c.next)
	c.next++
	p, err := c.srv.NewProxy()
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { p.Resume(); p.Close() })
	c.proxies[id] = p
	c.replicas[id] = startReplica(c.t, id, writeKubeconfig(c.t, p.Config(), c.dir, id), c.ns, c.dir)
}

// failover is one way to take the leader away.
type failover string

const (
	stall     failover = "stall"   // its connection to the API server stalls: it must fence itself
	crash     failover = "SIGKILL" // it dies
	terminate failover = "SIGTERM" // it stops gracefully and releases the lease
)

func TestLeaderElection_failoversNeverLetTwoReplicasReconcileAtOnce(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	for i := range 10 {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := &cluster{t: t, srv: srv, ns: ns, dir: t.TempDir(), replicas: map[string]*replica{}, proxies: map[string]*apiserver.Proxy{}}
	for range 3 {
		c.add()
	}
	// A controller writing the whole time: touch a ConfigMap every 20ms.
	ctx, stopTouching := context.WithCancel(t.Context())
	touched := make(chan struct{})
	go func() {
		defer close(touched)
		for i := 0; ctx.Err() == nil; i++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i%10)}, Data: map[string]string{"i": fmt.Sprint(i)}}
			_, _ = kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	defer func() { stopTouching(); <-touched }()

	var leader string
	eventually(t, 30*time.Second, "a leader reconciling", func() bool {
		leader = holder(t, kube, ns)
		return leader != "" && c.replicas[leader] != nil && reconcilingSince(t, c.replicas[leader], time.Time{})
	})
	gaps := map[failover][]time.Duration{}
	killedAt := map[string]time.Time{}
	kinds := []failover{stall, crash, terminate}
	for round := range *electionRounds {
		kind := kinds[round%len(kinds)]
		old := c.replicas[leader]
		begin := time.Now()
		switch kind {
		case stall:
			c.proxies[leader].Stall()
		case crash:
			old.cmd.Process.Kill()
			<-old.exited
			killedAt[leader] = time.Now()
		case terminate:
			old.cmd.Process.Signal(syscall.SIGTERM)
		}
		leader = awaitNewLeader(t, kube, ns, c.replicas, old.id, begin)
		gaps[kind] = append(gaps[kind], time.Since(begin))
		t.Logf("round %d: %s of %s; %s reconciles %s later", round, kind, old.id, leader, time.Since(begin).Round(time.Millisecond))
		select {
		case <-old.exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not exit within 30s of its %s", old.id, kind)
		}
		want := map[failover]int{stall: exitLost, crash: -1, terminate: 0}[kind]
		if code := exitCode(old.err); code != want {
			t.Errorf("%s exited with %d after %s, want %d", old.id, code, kind, want)
		}
		c.add() // keep three replicas
	}
	for _, kind := range kinds {
		g := slices.Clone(gaps[kind])
		if len(g) == 0 {
			continue
		}
		slices.Sort(g)
		t.Logf("%s: reconciling again after min %s, median %s, max %s over %d failovers", kind,
			g[0].Round(time.Millisecond), g[len(g)/2].Round(time.Millisecond), g[len(g)-1].Round(time.Millisecond), len(g))
	}
	for _, g := range gaps[crash] {
		if g > leaseDuration+2*retryPeriod+2*time.Second {
			t.Errorf("a standby took %s to reconcile after the leader died; want about the lease duration %s plus a retry period", g, leaseDuration)
		}
	}
	for _, g := range gaps[terminate] {
		if g >= leaseDuration {
			t.Errorf("takeover after SIGTERM took %s; want well under the lease duration %s (the lease is released)", g, leaseDuration)
		}
	}
	// The last leader's queue held every cached key when it took over.
	since := time.Now()
	stopTouching()
	<-touched
	last := c.replicas[leader]
	if err := kube.CoreV1().ConfigMaps(ns).Delete(t.Context(), "cm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the leader reconciling the deleted ConfigMap", func() bool {
		for _, iv := range readIntervals(t, last) {
			if iv.start > since.UnixNano() && iv.name == "cm-0" {
				return true
			}
		}
		return false
	})
	checkNoOverlap(t, c.replicas, killedAt, leader)
}

// checkNoOverlap fails t if two replicas' reconciles overlap in time. A
// killed replica's unfinished reconcile ends when it died.
func checkNoOverlap(t *testing.T, replicas map[string]*replica, killedAt map[string]time.Time, leader string) {
	t.Helper()
	var all []interval
	for _, r := range replicas {
		ivs := readIntervals(t, r)
		for i := range ivs {
			if at, ok := killedAt[r.id]; ok && ivs[i].end == 0 {
				ivs[i].end = at.UnixNano()
			}
		}
		all = append(all, ivs...)
	}
	slices.SortFunc(all, func(a, b interval) int { return cmp.Compare(a.start, b.start) })
	overlaps := 0
	for i := range all {
		end := all[i].end
		if end == 0 {
			if all[i].replica != leader {
				t.Errorf("replica %s never finished its reconcile of %s", all[i].replica, all[i].name)
			}
			end = math.MaxInt64
		}
		for j := i + 1; j < len(all) && all[j].start < end; j++ {
			if all[j].replica != all[i].replica {
				overlaps++
				t.Errorf("replicas %s and %s reconciled at once (%s and %s)", all[i].replica, all[j].replica, all[i].name, all[j].name)
			}
		}
	}
	t.Logf("%d reconciles by %d replicas, %d overlapping", len(all), len(replicas), overlaps)
}

// awaitNewLeader waits for a replica other than old to hold the lease and
// reconcile after since, and returns it.
func awaitNewLeader(t *testing.T, kube kubernetes.Interface, ns string, replicas map[string]*replica, old string, since time.Time) string {
	t.Helper()
	var next string
	eventually(t, 30*time.Second, "a new leader after "+old, func() bool {
		next = holder(t, kube, ns)
		return next != "" && next != old && reconcilingSince(t, replicas[next], since)
	})
	return next
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -2
	}
	return 0
}

func TestLeaderElection_badInputIsAClearErrorAtStart(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	run := func(t *testing.T, cfg *rest.Config, le election.Options) error {
		opts := quiet(t)
		opts.LeaderElection = le
		m, err := manager.New(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		return m.Run(t.Context())
	}
	t.Run("a namespace that does not exist", func(t *testing.T) {
		err := run(t, srv.Config(), election.Options{Name: "x", Namespace: "no-such-namespace"})
		if !errors.Is(err, manager.ErrLeaseUnusable) || !strings.Contains(err.Error(), `namespace "no-such-namespace"`) {
			t.Errorf("Run = %v, want ErrLeaseUnusable naming the namespace", err)
		}
	})
	t.Run("no RBAC on leases", func(t *testing.T) {
		cfg := rest.CopyConfig(srv.Config())
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "no-leases"}
		err := run(t, cfg, election.Options{Name: "x", Namespace: ns})
		if !errors.Is(err, manager.ErrLeaseUnusable) || !strings.Contains(err.Error(), "get leases.coordination.k8s.io") ||
			!strings.Contains(err.Error(), "update leases.coordination.k8s.io") {
			t.Errorf("Run = %v, want ErrLeaseUnusable naming each missing verb", err)
		}
	})
}

// Two electors with the same identity both believe they lead: client-go's
// protocol takes a Lease held under its own identity as its own (so that a
// restarted Pod with a stable name takes its lease back at once). Identities
// must therefore be unique per process; the default adds a random suffix to
// the host name. This test documents the behaviour.
func TestLeaderElection_twoElectorsWithOneIdentityBothLead(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	opts := election.Options{Name: "shared", Namespace: ns, Identity: "same",
		Timing: lease.Timing{LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}}
	ctx, cancel := context.WithCancel(t.Context())
	leading := make(chan string, 2)
	done := make(chan error, 2)
	for _, name := range []string{"first", "second"} {
		e, err := election.New(srv.Config(), opts)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			done <- e.Run(ctx, func(ctx context.Context) error {
				leading <- name
				<-ctx.Done()
				return nil
			})
		}()
	}
	for range 2 {
		select {
		case <-leading:
		case <-time.After(30 * time.Second):
			t.Fatal("two electors with one identity did not both lead within 30s")
		}
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}
