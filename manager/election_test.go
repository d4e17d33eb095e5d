package manager_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
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
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	rec := controller.ReconcileFunc[object.ObjectName](func(ctx context.Context, name object.ObjectName) (controller.Result, error) {
		fmt.Fprintf(f, "start %d %s\n", time.Now().UnixNano(), name.Name)
		select {
		case <-time.After(100 * time.Millisecond): // work that honours its context
		case <-ctx.Done():
		}
		fmt.Fprintf(f, "end %d %s\n", time.Now().UnixNano(), name.Name)
		return controller.Result{}, nil
	})
	if _, err := manager.NewController(m, "recorder", rec, controller.Options[object.ObjectName]{Workers: 2}, manager.For(cms)); err != nil {
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
	err    error // Wait's result, once exited is closed
}

func startReplica(t *testing.T, id, kubeconfig, ns, dir string) *replica {
	t.Helper()
	r := &replica{id: id, log: filepath.Join(dir, id+".log"), exited: make(chan struct{})}
	r.cmd = exec.Command(os.Args[0], "-test.run=^$")
	r.cmd.Env = append(os.Environ(), envReplica+"="+id, envKubeconfig+"="+kubeconfig, envNamespace+"="+ns, envLog+"="+r.log)
	out, err := os.Create(filepath.Join(dir, id+".out"))
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.Stdout, r.cmd.Stderr = out, out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		out.Close()
		close(r.exited)
	}()
	t.Cleanup(func() {
		r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(30 * time.Second):
			r.cmd.Process.Kill()
			<-r.exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("replica %s output:\n%s", id, b)
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

func TestLeaderElection_replicasTakeOverOnCrashStopAndStallWithoutEverWorkingAtOnce(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := client(t, srv.Config())
	for i := range 10 {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	replicas := map[string]*replica{}
	proxies := map[string]*apiserver.Proxy{}
	for _, id := range []string{"a", "b", "c", "d"} {
		p, err := srv.NewProxy()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Resume(); p.Close() })
		proxies[id] = p
		replicas[id] = startReplica(t, id, writeKubeconfig(t, p.Config(), dir, id), ns, dir)
	}
	// Keep the controller busy: touch a ConfigMap every 20ms.
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
		return leader != "" && reconcilingSince(t, replicas[leader], time.Time{})
	})
	t.Logf("first leader: %s", leader)

	// 1. Fencing: the leader's connection stalls, so it cannot renew. It must
	// stop working before another replica, which waits LeaseDuration, starts.
	stalled := leader
	proxies[stalled].Stall()
	begin := time.Now()
	leader = awaitNewLeader(t, kube, ns, replicas, stalled, begin)
	t.Logf("after stalling %s: %s leads, reconciling %s later", stalled, leader, time.Since(begin).Round(time.Millisecond))
	select {
	case <-replicas[stalled].exited:
		if code := exitCode(replicas[stalled].err); code != exitLost {
			t.Errorf("the stalled leader exited with %d, want %d (lease lost)", code, exitLost)
		}
	case <-time.After(30 * time.Second):
		t.Error("the stalled leader did not exit within 30s of losing its lease")
	}
	proxies[stalled].Resume()

	// 2. Crash: the new leader is killed; a standby takes over after the lease expires.
	killed := leader
	replicas[killed].cmd.Process.Kill()
	<-replicas[killed].exited
	killedAt := time.Now()
	leader = awaitNewLeader(t, kube, ns, replicas, killed, killedAt)
	crash := time.Since(killedAt)
	t.Logf("after killing %s: %s leads, reconciling %s later", killed, leader, crash.Round(time.Millisecond))

	// 3. Graceful stop: SIGTERM releases the lease once the work stopped, so the
	// last standby takes over in about a retry period, not a lease duration.
	stopped := leader
	replicas[stopped].cmd.Process.Signal(syscall.SIGTERM)
	stoppedAt := time.Now()
	leader = awaitNewLeader(t, kube, ns, replicas, stopped, stoppedAt)
	handover := time.Since(stoppedAt)
	t.Logf("after SIGTERM to %s: %s leads, reconciling %s later", stopped, leader, handover.Round(time.Millisecond))
	<-replicas[stopped].exited
	if code := exitCode(replicas[stopped].err); code != 0 {
		t.Errorf("the gracefully stopped leader exited with %d, want 0", code)
	}
	if handover >= leaseDuration {
		t.Errorf("handover after SIGTERM took %s, want less than the lease duration %s (the lease was not released)", handover, leaseDuration)
	}
	// The new leader's queue held every cached key when it took over.
	stopTouching()
	<-touched
	eventually(t, 30*time.Second, "the last leader reconciling every ConfigMap", func() bool {
		seen := map[string]bool{}
		for _, iv := range readIntervals(t, replicas[leader]) {
			if iv.start > stoppedAt.UnixNano() {
				seen[iv.name] = true
			}
		}
		return len(seen) == 10
	})

	// No two replicas ever reconciled at the same time.
	var all []interval
	for _, r := range replicas {
		ivs := readIntervals(t, r)
		for i := range ivs {
			if ivs[i].end == 0 && r.id == killed {
				ivs[i].end = killedAt.UnixNano() // it died during this one
			}
		}
		all = append(all, ivs...)
	}
	slices.SortFunc(all, func(a, b interval) int { return int(a.start - b.start) })
	for i := range all {
		if all[i].end == 0 && all[i].replica != leader {
			t.Errorf("replica %s never finished its reconcile of %s", all[i].replica, all[i].name)
		}
		for j := i + 1; j < len(all) && all[j].start < all[i].end; j++ {
			if all[j].replica != all[i].replica {
				t.Errorf("replicas %s and %s reconciled at once (%s and %s)", all[i].replica, all[j].replica, all[i].name, all[j].name)
			}
		}
	}
	t.Logf("%d reconciles in all", len(all))
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
