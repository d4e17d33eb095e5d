package shard_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/lease"
	"github.com/ctrlkit/ctrlkit/shard"
)

var env apiserver.Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// running is a member started in the test, with what Run returned.
type running struct {
	m      *shard.Membership
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, kube kubernetes.Interface, ns, id string) *running {
	t.Helper()
	m, err := shard.NewMembership(shard.MembershipOptions{Kube: kube, Namespace: ns, Ring: "ring", Identity: id,
		Timing: lease.Timing{LeaseDuration: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	r := &running{m: m, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// waitMembers waits until every member in rs sees want.
func waitMembers(t *testing.T, within time.Duration, want []string, rs ...*running) {
	t.Helper()
	poll(t, within, func() (bool, string) {
		var got []string
		ok := true
		for _, r := range rs {
			m := r.m.Members()
			ok = ok && slices.Equal(m, want)
			got = append(got, strings.Join(m, ","))
		}
		return ok, fmt.Sprintf("members see %q, want %v", got, want)
	})
}

// poll checks cond every 20ms (members and sharders change state on their
// own clocks) until it holds, or fails t after within with what cond said.
func poll(t *testing.T, within time.Duration, cond func() (ok bool, what string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, what := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what)
		}
		<-tick.C
	}
}

func TestMembership_seesJoinsGracefulLeavesAndSilentDeaths(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	proxy, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()

	a := start(t, kube, ns, "a")
	b := start(t, kube, ns, "b")
	c := start(t, apiserver.Client(t, proxy.Config()), ns, "c") // reaches the server through the proxy
	waitMembers(t, 10*time.Second, []string{"a", "b", "c"}, a, b, c)

	b.cancel() // a graceful leave deletes b's lease: seen within a renew period or two
	if err := <-b.done; err != nil {
		t.Fatalf("b's Run after a graceful leave: %v", err)
	}
	b.done <- nil // for the cleanup
	waitMembers(t, time.Second, []string{"a", "c"}, a, c)

	proxy.Stall() // c can no longer renew: a counts it dead after the lease duration
	stalled := time.Now()
	waitMembers(t, 5*time.Second, []string{"a"}, a)
	// a counts from the last renewal of c it received, at most a renew
	// period (200ms) and a round trip before the stall.
	if d := time.Since(stalled); d < 2*time.Second-300*time.Millisecond {
		t.Errorf("c was counted dead %s after it stopped renewing, before its lease duration", d)
	}
	select { // c, unable to renew by its renew deadline, had stopped before a counted it dead
	case err := <-c.done:
		if err == nil {
			t.Error("c's Run returned nil after losing its lease")
		}
		c.done <- nil
	default:
		t.Fatal("c's Run was still going when a counted it dead")
	}
	proxy.Resume()
}

func TestNewMembership_rejectsBadInput(t *testing.T) {
	for _, o := range []shard.MembershipOptions{
		{Namespace: "ns", Ring: "r", Identity: "a"},
		{Kube: apiserver.Client(t, env.Get(t).Config()), Ring: "r", Identity: "a"},
		{Kube: apiserver.Client(t, env.Get(t).Config()), Namespace: "ns", Ring: "r", Identity: "a",
			Timing: lease.Timing{LeaseDuration: time.Second, RetryPeriod: 2 * time.Second}},
	} {
		if _, err := shard.NewMembership(o); err == nil {
			t.Errorf("NewMembership(%+v) accepted", o)
		}
	}
}

func TestMembership_aSecondProcessWithTheSameIdentityWaitsForTheFirst(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	first := start(t, kube, ns, "a")
	waitMembers(t, 10*time.Second, []string{"a"}, first)
	second := start(t, kube, ns, "a")
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	// For longer than a lease duration (2s), the second does not join:
	// the first keeps renewing.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); <-tick.C {
		if _, joined := second.m.Holder(); joined {
			t.Fatal("a second member with the same identity joined while the first was alive")
		}
		if _, joined := first.m.Holder(); !joined {
			t.Fatal("the first member lost its place to the second")
		}
	}
	first.cancel() // a graceful leave deletes the first's Lease: the second joins
	if err := <-first.done; err != nil {
		t.Fatalf("first's Run: %v", err)
	}
	first.done <- nil
	poll(t, 5*time.Second, func() (bool, string) {
		_, joined := second.m.Holder()
		return joined, "the second member has not joined since the first left"
	})
}
