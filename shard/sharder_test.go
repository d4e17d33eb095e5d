package shard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/lease"
	"github.com/ctrlkit/ctrlkit/shard"
)

// interval is one "reconcile" of a shard by a replica.
type interval struct {
	who        string
	v          int
	start, end time.Time
}

// worker is a sharder with a loop that keeps reconciling one hash per
// virtual shard, recording when each reconcile ran.
type worker struct {
	id     string
	s      *shard.Sharder
	cancel context.CancelFunc
	done   chan error
	relist int
}

const virtual = 16

// hashes[v] is a hash in virtual shard v.
var hashes = func() []uint64 {
	out := make([]uint64, virtual)
	for v := range out {
		out[v] = uint64(v)<<60 | 12345
	}
	return out
}()

func startWorker(t *testing.T, kube kubernetes.Interface, ns, id string, log *intervals) *worker {
	t.Helper()
	w := &worker{id: id, done: make(chan error, 1)}
	s, err := shard.NewSharder(shard.SharderOptions{Kube: kube, Ring: shard.Ring{Name: "ring", Namespace: ns, Identity: id,
		VirtualShards: virtual, Timing: lease.Timing{LeaseDuration: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}},
		Relist: func(context.Context) error { w.relist++; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	w.s = s
	ctx, cancel := context.WithCancel(t.Context())
	w.cancel = cancel
	var wg sync.WaitGroup
	wg.Go(func() { w.done <- s.Run(ctx) })
	wg.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			for v, h := range hashes {
				rctx, done, ok := s.Enter(ctx, h)
				if !ok {
					continue
				}
				start := time.Now()
				select { // a reconcile of a millisecond that honours its context
				case <-rctx.Done():
				case <-time.After(time.Millisecond):
				}
				log.add(interval{who: id, v: v, start: start, end: time.Now()})
				done()
			}
			<-tick.C
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return w
}

type intervals struct {
	mu  sync.Mutex
	all []interval
}

func (l *intervals) add(i interval) {
	l.mu.Lock()
	l.all = append(l.all, i)
	l.mu.Unlock()
}

// overlaps returns every pair of reconciles of one shard by two replicas
// at overlapping times.
func (l *intervals) overlaps() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	byShard := map[int][]interval{}
	for _, i := range l.all {
		byShard[i.v] = append(byShard[i.v], i)
	}
	var out []string
	for v, is := range byShard {
		slices.SortFunc(is, func(a, b interval) int { return a.start.Compare(b.start) })
		for k := 1; k < len(is); k++ {
			for j := k - 1; j >= 0 && j >= k-50; j-- {
				if is[j].who != is[k].who && is[j].end.After(is[k].start) {
					out = append(out, fmt.Sprintf("shard %d: %s [%s, %s] and %s from %s", v, is[j].who,
						is[j].start.Format("15:04:05.000000"), is[j].end.Format("15:04:05.000000"), is[k].who, is[k].start.Format("15:04:05.000000")))
				}
			}
		}
	}
	return out
}

// waitCovered waits until the open shards of ws cover every shard exactly
// once and each has its share.
func waitCovered(t *testing.T, within time.Duration, ws ...*worker) {
	t.Helper()
	poll(t, within, func() (bool, string) {
		count := make([]int, virtual)
		ok := true
		var got []string
		for _, w := range ws {
			st := w.s.Stats()
			ok = ok && len(st.Open) > 0 && len(st.Pending) == 0
			for _, v := range st.Open {
				count[v]++
			}
			got = append(got, fmt.Sprintf("%s open %v pending %v members %v", w.id, st.Open, st.Pending, st.Members))
		}
		for _, c := range count {
			ok = ok && c == 1
		}
		return ok, fmt.Sprintf("shards not covered once by %d replicas: %q", len(ws), got)
	})
}

func TestSharder_handsShardsOverWithoutOverlapOnJoinsLeavesAndDeaths(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	proxy, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	log := &intervals{}

	a := startWorker(t, kube, ns, "a", log)
	waitCovered(t, 10*time.Second, a)
	b := startWorker(t, kube, ns, "b", log)
	c := startWorker(t, apiserver.Client(t, proxy.Config()), ns, "c", log)
	waitCovered(t, 10*time.Second, a, b, c)

	b.cancel() // graceful: b drains, releases, leaves; a and c take its shards at once
	if err := <-b.done; err != nil {
		t.Fatalf("b's Run: %v", err)
	}
	left := time.Now()
	waitCovered(t, 5*time.Second, a, c)
	if d := time.Since(left); d > time.Second {
		t.Errorf("b's shards were taken over %s after it left gracefully, want well under a lease duration", d)
	}

	proxy.Stall() // c is cut off: it stops its shards by its renew deadline, a takes them after the lease duration
	cut := time.Now()
	waitCovered(t, 10*time.Second, a)
	// c's last renewal went through up to a retry period before the cut,
	// its lease runs from when a saw that renewal, and a reads the ring
	// every retry period: the shards may move up to two retry periods
	// before cut+LeaseDuration, never sooner.
	if d := time.Since(cut); d < 2*time.Second-2*100*time.Millisecond {
		t.Errorf("c's shards were taken %s after it was cut off, before its lease expired", d)
	}
	if st := c.s.Stats(); len(st.Open) != 0 {
		t.Errorf("c, cut off, still has shards open: %v", st.Open)
	}
	proxy.Resume() // c joins again as a new incarnation and gets its share back
	waitCovered(t, 15*time.Second, a, c)

	tab, err := shard.ReadTable(t.Context(), kube, ns, "ring")
	if err != nil {
		t.Fatal(err)
	}
	if held := tab.Held(); len(held) != 2 || held["a"]+held["c"] != virtual || tab.Virtual != virtual || tab.Key != shard.Namespace {
		t.Errorf("ReadTable: %+v held %v, want a and c holding all %d shards by namespace", tab, held, virtual)
	}
	if o := log.overlaps(); len(o) > 0 {
		t.Fatalf("%d overlapping reconciles, first: %s", len(o), o[0])
	}
	log.mu.Lock()
	n := len(log.all)
	log.mu.Unlock()
	if n < 1000 {
		t.Fatalf("only %d reconciles recorded: the test proved little", n)
	}
}

func TestNewSharder_rejectsBadInput(t *testing.T) {
	kube := apiserver.Client(t, env.Get(t).Config())
	for _, o := range []shard.SharderOptions{
		{Kube: kube, Ring: shard.Ring{Namespace: "ns", Name: "r", Identity: "a", VirtualShards: 3}},
		{Kube: kube, Ring: shard.Ring{Namespace: "ns", Name: "r", Identity: "a", VirtualShards: -4}},
		{Kube: kube, Ring: shard.Ring{Namespace: "ns", Name: "r", Identity: "a", VirtualShards: 8192}},
		{Kube: kube, Ring: shard.Ring{Namespace: "ns", Name: "r", Identity: "a", Key: "object.metadata.name"}},
		{Kube: kube, Ring: shard.Ring{Namespace: "ns", Name: "r", Identity: "a#1"}},
		{Kube: kube, Ring: shard.Ring{Namespace: "ns", Identity: "a"}},
	} {
		if _, err := shard.NewSharder(o); err == nil {
			t.Errorf("NewSharder(VirtualShards %d, Key %q, Identity %q, Ring %q) accepted", o.VirtualShards, o.Key, o.Identity, o.Name)
		} else if o.VirtualShards != 0 || o.Key != "" {
			if !errors.Is(err, shard.ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		}
	}
}

func TestSharder_refusesARingMadeWithOtherSettings(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	log := &intervals{}
	a := startWorker(t, kube, ns, "a", log)
	waitCovered(t, 10*time.Second, a)
	s, err := shard.NewSharder(shard.SharderOptions{Kube: kube, Ring: shard.Ring{Name: "ring", Namespace: ns, Identity: "b",
		VirtualShards: 32, Timing: lease.Timing{LeaseDuration: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	poll(t, 10*time.Second, func() (bool, string) {
		err := s.Ready()
		return errors.Is(err, shard.ErrInvalid),
			fmt.Sprintf("a replica with 32 virtual shards in a ring of 16: Ready = %v, want an error wrapping ErrInvalid", err)
	})
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	// For a second (ten of a's rounds), a keeps every shard: it does not
	// count the misconfigured replica as a member.
	for end := time.Now().Add(time.Second); time.Now().Before(end); <-tick.C {
		if st := a.s.Stats(); len(st.Open) != virtual || len(st.Members) != 1 {
			t.Fatalf("the ring's replica counts the misconfigured one: members %v, open %v", st.Members, st.Open)
		}
	}
	if st := s.Stats(); len(st.Open) != 0 {
		t.Errorf("the misconfigured replica opened shards %v", st.Open)
	}
}

// A reconcile that hangs in a shard a replica gives up holds back that
// shard only: the joining replica gets the rest of its share at once, the
// steps go on meanwhile (a third replica gets its share from the first),
// and the hung shard moves as soon as its reconcile returns, never
// reconciled by two replicas at once.
func TestSharder_aHungReconcileHoldsBackOnlyItsOwnShard(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	log := &intervals{}
	a := startWorker(t, kube, ns, "a", log)
	waitCovered(t, 10*time.Second, a)
	two, err := shard.Owners([]string{"a", "b"}, virtual)
	if err != nil {
		t.Fatal(err)
	}
	three, err := shard.Owners([]string{"a", "b", "c"}, virtual)
	if err != nil {
		t.Fatal(err)
	}
	hung := -1 // a shard b owns beside a, and beside a and c
	for v := range virtual {
		if two[v] == "b" && three[v] == "b" {
			hung = v
			break
		}
	}
	if hung < 0 {
		t.Fatalf("no shard is b's with two and with three members: %v, %v", two, three)
	}
	share := func(owners []string, id string) []int { // id's shards but the hung one
		var out []int
		for v, o := range owners {
			if o == id && v != hung {
				out = append(out, v)
			}
		}
		return out
	}
	rctx, enterDone, ok := a.s.Enter(t.Context(), hashes[hung])
	if !ok {
		t.Fatalf("a cannot enter shard %d it holds", hung)
	}
	entered := time.Now()
	done := sync.OnceFunc(func() {
		log.add(interval{who: "a", v: hung, start: entered, end: time.Now()})
		enterDone()
	})
	t.Cleanup(done) // before a stops (cleanups run last first): a failed test must not leave a's leave waiting on it
	b := startWorker(t, kube, ns, "b", log)
	poll(t, 10*time.Second, func() (bool, string) {
		as, bs := a.s.Stats(), b.s.Stats()
		return slices.Equal(bs.Open, share(two, "b")) && slices.Equal(as.Pending, []int{hung}),
			fmt.Sprintf("b open %v (want %v), a pending %v (want [%d])", bs.Open, share(two, "b"), as.Pending, hung)
	})
	t.Logf("b opened its share but shard %d %s after joining, while a's reconcile there hung", hung, time.Since(entered).Round(time.Millisecond))
	c := startWorker(t, kube, ns, "c", log)
	poll(t, 10*time.Second, func() (bool, string) {
		as, bs, cs := a.s.Stats(), b.s.Stats(), c.s.Stats()
		return slices.Equal(as.Open, share(three, "a")) && slices.Equal(as.Pending, []int{hung}) &&
				slices.Equal(bs.Open, share(three, "b")) && slices.Equal(cs.Open, share(three, "c")),
			fmt.Sprintf("a open %v pending %v, b open %v, c open %v; want %v [%d], %v, %v", as.Open, as.Pending,
				bs.Open, cs.Open, share(three, "a"), hung, share(three, "b"), share(three, "c"))
	})
	if rctx.Err() != nil {
		t.Errorf("the hung reconcile was cancelled before the drain timeout: %v", context.Cause(rctx))
	}
	released := time.Now()
	done()
	waitCovered(t, 5*time.Second, a, b, c)
	if d := time.Since(released); d > 2*time.Second {
		t.Errorf("shard %d reached b %s after its reconcile returned, want well under the 2s handoff goal", hung, d)
	}
	if o := log.overlaps(); len(o) > 0 {
		t.Fatalf("%d overlapping reconciles, first: %s", len(o), o[0])
	}
}
