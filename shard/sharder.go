package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/lease"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// MaxVirtualShards bounds SharderOptions.VirtualShards: the ring's table
// must fit in a Lease's annotations.
const MaxVirtualShards = 4096

// ErrLost is the cause of a reconcile's context when the replica must stop
// at once: its membership lapsed, or the ring's table shows another holder
// of the key's shard.
var ErrLost = errors.New("shard: this replica no longer holds the shard")

// Ring is a replica's place among the replicas sharing work: the ring's
// name and where its Leases live, this replica's identity, what objects
// are hashed by, how many hash ranges there are, and the membership's
// timing. SharderOptions embeds it; the manager's Options.Sharding is one.
type Ring struct {
	// Name names the ring: the replicas sharing the work, one name per
	// controller group. Its Leases are "<Name>" (the table of holders)
	// and "<Name>-<Identity>" (one per replica) in Namespace. Required.
	Name string
	// Namespace holds the ring's Leases. Required.
	Namespace string
	// Identity names this replica, unique in the ring: a second process
	// with the same Identity waits until the first one's membership
	// expired. The assignment depends on the identities, so a stable one
	// (a StatefulSet Pod's name) keeps a restarted replica's share.
	// Default: lease.DefaultIdentity() (the host name and a random
	// suffix).
	Identity string
	// Key is what objects are hashed by: Namespace (default: a namespace
	// is never split; the manager cuts a primary and what it owns in its
	// namespace together, on the server) or UID (even spread; the manager
	// filters owned objects on the client by their controller's UID, so
	// every replica still receives all of them).
	Key Key
	// VirtualShards is the number of equal hash ranges handed out; a power
	// of two, at most MaxVirtualShards, the same on every replica of the
	// ring. Default: DefaultVirtualShards (64).
	VirtualShards int
	// Timing times the membership (see MembershipOptions): a dead
	// replica's shards move after LeaseDuration plus at most a
	// RetryPeriod; the sharder also steps every RetryPeriod. Defaults:
	// 15s, 10s, 2s.
	lease.Timing
}

// SharderOptions configure a Sharder. Kube and the Ring's Name and
// Namespace are required.
type SharderOptions struct {
	Kube kubernetes.Interface
	Ring
	// DrainTimeout bounds how long a shard's release waits for its
	// in-flight reconciles before cancelling their contexts (it then
	// still waits for them to return). Shards are released one by one as
	// each drains: a reconcile that hangs holds back its own shard only.
	// Default: 30s.
	DrainTimeout time.Duration
	// Relist is called after the shards this replica may work on changed
	// (Selector changed): it must make every sharded cache list again with
	// Selector and return once they reflect it. Shards just acquired open
	// only after it returned nil; it is retried until it does.
	Relist func(ctx context.Context) error
	// Acquired is called once shards opened, with a test for the hashes in
	// them: queue every cached primary object in them, as a new leader
	// would (their previous owner may have left work undone).
	Acquired func(in func(hash uint64) bool)
	// Telemetry: the Logger receives joins, handoffs and errors, the
	// Registerer the sharder's metrics.
	telemetry.Telemetry
}

// Sharder spreads virtual shards over the live replicas of a ring and
// makes sure no shard is worked on by two replicas at once (see
// docs/design/003-sharding.md):
//   - Membership: each replica renews a Lease of its own (see Membership).
//   - The ring's table, a Lease named after the ring, records each shard's
//     holder (Identity#incarnation). It is only changed with optimistic
//     concurrency (a write fails if anyone wrote since it was read), so
//     two replicas can never both claim a shard.
//   - A replica claims a shard that Owners gives it only when the table
//     shows no holder, itself, or a holder whose membership Expired; it
//     opens the shard (Enter says yes) only after the claim was written
//     and its caches were listed again with the new selector.
//   - It releases a shard that Owners gives another by closing it first,
//     waiting for its in-flight reconciles, and only then writing the
//     table: the new owner cannot claim it earlier.
//   - A replica that cannot renew its membership for RenewDeadline closes
//     every shard at once and cancels its reconciles (cause ErrLost); the
//     others take its shards over only after LeaseDuration.
//
// The decisions are a state machine (machine.go); the Sharder feeds it
// what happened and does what it says: the Lease IO, the relists, the
// draining and cancelling of reconciles.
type Sharder struct {
	opts    SharderOptions
	mem     *Membership
	metrics *sharderMetrics
	sel     atomic.Pointer[Selector]
	kick    chan struct{}
	table   *coordinationv1.Lease // the table as last read; owned by Run's goroutine

	mu      sync.Mutex // guards the fields below
	m       *machine
	running []map[uint64]context.CancelCauseFunc // per shard: its in-flight reconciles' cancels
	nextID  uint64
	idle    chan struct{} // closed and replaced when a shard's last running reconcile ends
	// releasing holds, per shard releasing with reconciles in flight, when
	// drain first saw it so: its DrainTimeout counts from then, across
	// steps. An entry goes once its shard drained or closed.
	releasing map[int]*since
	// drainWake pokes the step loop when the first DrainTimeout of a
	// busy releasing shard runs out. Run's goroutine only.
	drainWake *time.Timer
}

// since is when a shard began releasing, and whether its reconciles were
// cancelled for outlasting DrainTimeout.
type since struct {
	at        time.Time
	cancelled bool
}

// NewSharder checks opts and returns a Sharder; Run starts it.
func NewSharder(opts SharderOptions) (*Sharder, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Sharder{opts: opts, kick: make(chan struct{}, 1), idle: make(chan struct{}), releasing: map[int]*since{},
		m:       newMachine(opts.Key, opts.VirtualShards, 2*opts.RetryPeriod),
		running: make([]map[uint64]context.CancelCauseFunc, opts.VirtualShards)}
	s.mem, err = NewMembership(MembershipOptions{Kube: opts.Kube, Namespace: opts.Namespace, Ring: opts.Name,
		Identity: opts.Identity, Timing: opts.Timing, Tag: fmt.Sprintf("%s/%d", opts.Key, opts.VirtualShards),
		OnChange: func([]string) { s.poke() }})
	if err != nil {
		return nil, err
	}
	if s.metrics, err = newSharderMetrics(opts.Telemetry, opts.Name); err != nil {
		return nil, err
	}
	none := s.m.sel
	s.sel.Store(&none)
	return s, nil
}

func (o SharderOptions) withDefaults() (SharderOptions, error) {
	if o.Key == "" {
		o.Key = Namespace
	}
	if o.Key != Namespace && o.Key != UID {
		return o, fmt.Errorf("%w: shard key %q, want %q or %q", ErrInvalid, o.Key, Namespace, UID)
	}
	if o.VirtualShards == 0 {
		o.VirtualShards = DefaultVirtualShards
	}
	if err := checkVirtual(o.VirtualShards); err != nil {
		return o, err
	}
	if o.VirtualShards > MaxVirtualShards {
		return o, fmt.Errorf("%w: %d virtual shards, want at most %d", ErrInvalid, o.VirtualShards, MaxVirtualShards)
	}
	var err error
	if o.Identity, o.Timing, err = lease.Defaults(o.Identity, o.Timing); err != nil {
		return o, fmt.Errorf("shard: %w", err)
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 30 * time.Second
	}
	o.Logger = o.Log()
	return o, nil
}

// Key returns what objects are hashed by.
func (s *Sharder) Key() Key { return s.opts.Key }

// Membership returns the sharder's membership in the ring.
func (s *Sharder) Membership() *Membership { return s.mem }

// Selector returns the ranges this replica lists and watches: the shards it
// holds or is acquiring. Holding none, it selects only the hash 0.
func (s *Sharder) Selector() *Selector { return s.sel.Load() }

// Enter reports whether this replica may reconcile an object of hash h now
// (its shard is open here). If it may, rctx is ctx that also ends (cause
// ErrLost) when the replica must stop at once, and done must be called
// when the reconcile returns: a release waits for it.
func (s *Sharder) Enter(ctx context.Context, h uint64) (rctx context.Context, done func(), ok bool) {
	v := VirtualOf(h, s.opts.VirtualShards)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m.states[v] != open {
		s.metrics.notOwned.Inc()
		return nil, nil, false
	}
	// Registered under the lock that checked the state: a release or a
	// fence that closes v afterwards finds this reconcile to wait for or
	// to cancel.
	rctx, cancel := context.WithCancelCause(ctx)
	if s.running[v] == nil {
		s.running[v] = map[uint64]context.CancelCauseFunc{}
	}
	s.nextID++
	id := s.nextID
	s.running[v][id] = cancel
	return rctx, func() {
		cancel(nil)
		s.mu.Lock()
		delete(s.running[v], id)
		if len(s.running[v]) == 0 {
			close(s.idle)
			s.idle = make(chan struct{})
			if s.m.states[v] == releasing {
				s.poke() // a step releases it now
			}
		}
		s.mu.Unlock()
	}, true
}

// Ready reports an error while this replica has not joined the ring, or
// its caches do not yet reflect the shards it claimed, or the last attempt
// to update its share failed.
func (s *Sharder) Ready() error {
	if _, joined := s.mem.Holder(); !joined {
		return errors.New("shard: not a member of the ring yet")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m.err != nil {
		return s.m.err
	}
	if !s.m.relisted {
		return errors.New("shard: caches not yet listed with this replica's shards")
	}
	return nil
}

// ShardStats is a snapshot of a sharder.
type ShardStats struct {
	Holder  string   // this incarnation, Identity#incarnation
	Members []string // live members
	Open    []int    // virtual shards reconciled here
	Pending []int    // acquiring or releasing
	Virtual int
}

// Stats returns a snapshot of the sharder's state.
func (s *Sharder) Stats() ShardStats {
	h, _ := s.mem.Holder()
	st := ShardStats{Holder: h, Members: s.mem.Members(), Virtual: s.opts.VirtualShards}
	s.mu.Lock()
	defer s.mu.Unlock()
	for v, x := range s.m.states {
		switch x {
		case open:
			st.Open = append(st.Open, v)
		case acquiring, releasing:
			st.Pending = append(st.Pending, v)
		}
	}
	return st
}

func (s *Sharder) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run takes part in the ring until ctx ends: it joins, claims and releases
// shards as members come and go, and keeps the caches' selector current.
// When ctx ends it closes every shard, waits for in-flight reconciles (see
// DrainTimeout), releases its shards in the table and leaves the ring, so
// the others take over at once; then it returns nil. A membership that
// lapses is not an error: the replica stops its share at once and joins
// again as a new incarnation.
func (s *Sharder) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	wg.Go(func() { s.watchTable(wctx) })
	defer func() {
		if s.drainWake != nil {
			s.drainWake.Stop()
		}
	}()
	for s.incarnation(ctx) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.opts.RetryPeriod):
		}
	}
	s.opts.Logger.Info("shard: left the ring", "ring", s.opts.Name, "identity", s.opts.Identity)
	return nil
}

// incarnation takes part in the ring as one membership incarnation, until
// ctx ends (then it leaves the ring gracefully and returns false) or the
// membership lapses (then every shard was closed at once; it returns true).
func (s *Sharder) incarnation(ctx context.Context) (lapsed bool) {
	memCtx, stopMembership := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMembership()
	stepCtx, stopSteps := context.WithCancel(ctx)
	defer stopSteps()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.mem.Run(memCtx); err != nil {
			s.fence(err) // from here, whatever the step loop is doing
			lapsed = true
		}
		stopSteps()
	})
	s.loop(stepCtx)
	if ctx.Err() != nil {
		s.leave(context.WithoutCancel(ctx)) // the membership, renewed meanwhile, still fences it
	}
	stopMembership()
	wg.Wait()
	return lapsed && ctx.Err() == nil
}

// fence closes every shard at once and cancels their reconciles.
func (s *Sharder) fence(err error) {
	s.perform(context.Background(), s.next(lapsed{cause: fmt.Errorf("%w: %w", ErrLost, err)}))
	s.metrics.lost.Inc()
	s.opts.Logger.Error("shard: membership lapsed; stopped every shard at once, joining again", "ring", s.opts.Name, "err", err)
}

// loop steps at every membership or table change, and every RetryPeriod,
// until ctx ends.
func (s *Sharder) loop(ctx context.Context) {
	tick := time.NewTicker(s.opts.RetryPeriod)
	defer tick.Stop()
	for ctx.Err() == nil {
		holder, joined := s.mem.Holder()
		if !joined {
			holder = ""
		}
		s.drive(ctx, membersSeen{holder: holder, members: s.mem.Members(), now: time.Now()})
		select {
		case <-ctx.Done():
		case <-s.kick:
		case <-tick.C:
		}
	}
}

// leave gives this replica's shards up: closed, drained, cleared in the
// table.
func (s *Sharder) leave(ctx context.Context) {
	holder, joined := s.mem.Holder()
	if !joined {
		holder = ""
	}
	s.drive(ctx, leave{holder: holder})
}

// drive feeds in to the machine and does what it says, feeding each
// request's answer back, until the machine waits for nothing.
func (s *Sharder) drive(ctx context.Context, in input) {
	for in != nil {
		in = s.perform(ctx, s.next(in))
	}
}

// next is one step of the machine, under the lock; the selector it sets
// is published under the same lock.
func (s *Sharder) next(in input) []action {
	s.mu.Lock()
	defer s.mu.Unlock()
	acts := s.m.next(in)
	for _, a := range acts {
		if a, ok := a.(setSelector); ok {
			s.sel.Store(&a.sel)
		}
	}
	s.metrics.owned.Set(float64(s.m.count(open)))
	return acts
}

// perform does acts in order, without the lock, and returns the answer to
// the request among them (nil if none).
func (s *Sharder) perform(ctx context.Context, acts []action) input {
	var answer input
	for _, a := range acts {
		if in := s.do(ctx, a); in != nil {
			answer = in
		}
	}
	if f, ok := answer.(failed); ok && ctx.Err() == nil {
		s.opts.Logger.Warn("shard: could not update this replica's share; retrying", "ring", s.opts.Name, "err", f.err)
	}
	return answer
}

func (s *Sharder) do(ctx context.Context, a action) input {
	switch a := a.(type) {
	case wakeAt:
		time.AfterFunc(time.Until(a.at), s.poke)
	case drain:
		return s.drain(ctx, a.all)
	case readTable:
		return s.read(ctx, a.timeout)
	case writeTable:
		return s.write(ctx, a)
	case relist:
		return s.relist(ctx)
	case stop:
		s.mu.Lock()
		for _, v := range a.shards {
			delete(s.releasing, v) // closed: a later release starts its own timeout
		}
		s.mu.Unlock()
		for _, v := range a.shards {
			s.stopShard(v, a.cause)
		}
	case lost:
		s.stopShard(a.shard, fmt.Errorf("%w: the ring's table names %s", ErrLost, a.holder))
		s.metrics.handoffs.WithLabelValues("lost").Inc()
		s.opts.Logger.Error("shard: the ring's table gives a shard this replica held to another; stopped it", "shard", a.shard, "holder", a.holder)
	case opened:
		s.acquired(a)
	case handoff:
		s.metrics.handoffs.WithLabelValues(a.kind).Add(float64(a.n))
		s.opts.Logger.Info("shard: handed shards over", "ring", s.opts.Name, "kind", a.kind, "shards", a.n)
	case left:
		if !a.released {
			s.opts.Logger.Warn("shard: could not release this replica's shards on leaving; the others take them over after the lease duration", "ring", s.opts.Name)
		}
	}
	return nil
}

// stopShard cancels the in-flight reconciles of shard v with cause.
func (s *Sharder) stopShard(v int, cause error) {
	s.mu.Lock()
	fns := slices.Collect(maps.Values(s.running[v]))
	s.mu.Unlock()
	for _, f := range fns {
		f(cause)
	}
}

// drain says which releasing shards still have reconciles in flight:
// those that have none are released in this step, each busy one in a later
// step, once its last reconcile returned (Enter's done pokes the step
// loop), so a reconcile that hangs holds back its own shard only and the
// steps go on meanwhile. A shard still busy DrainTimeout after it began
// releasing has its reconciles cancelled, and is still waited for. A leave
// (all) waits until every releasing shard has drained.
func (s *Sharder) drain(ctx context.Context, all bool) input {
	for {
		busy, overdue, next, ended := s.drainState(time.Now())
		if len(overdue) > 0 {
			s.opts.Logger.Warn("shard: reconciles still running after the drain timeout; cancelling them", "ring", s.opts.Name, "shards", overdue)
			for _, v := range overdue {
				s.stopShard(v, fmt.Errorf("%w: released after a drain timeout of %s", ErrLost, s.opts.DrainTimeout))
			}
		}
		if len(busy) == 0 || !all {
			if s.drainWake != nil {
				s.drainWake.Stop()
				s.drainWake = nil
			}
			if !next.IsZero() && !all {
				s.drainWake = time.AfterFunc(time.Until(next), s.poke)
			}
			return drained{busy: busy}
		}
		wait := time.Until(next)
		if next.IsZero() {
			wait = s.opts.DrainTimeout // every busy shard was cancelled: wait for them to return
		}
		timer := time.NewTimer(wait)
		select {
		case <-ended:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return failed{err: ctx.Err()}
		}
		timer.Stop()
	}
}

// drainState returns the releasing shards with reconciles in flight, those
// of them whose DrainTimeout ran out (counted from when a drain first saw
// each busy: marked cancelled), the earliest timeout still to come (zero
// if none) and a channel closed when the next reconcile ends.
func (s *Sharder) drainState(now time.Time) (busy, overdue []int, next time.Time, ended <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for v, x := range s.m.states {
		if x != releasing || len(s.running[v]) == 0 {
			delete(s.releasing, v)
			continue
		}
		busy = append(busy, v)
		r := s.releasing[v]
		if r == nil {
			r = &since{at: now}
			s.releasing[v] = r
		}
		switch due := r.at.Add(s.opts.DrainTimeout); {
		case r.cancelled:
		case !due.After(now):
			r.cancelled = true
			overdue = append(overdue, v)
		case next.IsZero() || due.Before(next):
			next = due
		}
	}
	return busy, overdue, next, s.idle
}

// read reads the ring's table and asks the membership which of its
// holders expired.
func (s *Sharder) read(ctx context.Context, timeout time.Duration) input {
	ctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	l, holders, err := s.readTable(ctx)
	if err != nil {
		return failed{err: err}
	}
	s.table = l
	expired := map[string]bool{}
	for _, h := range holders {
		if _, seen := expired[h]; h != "" && !seen {
			expired[h] = s.mem.Expired(h)
		}
	}
	return tableRead{holders: holders, expired: expired}
}

// write writes the table read last with a.holders, conditionally on its
// resource version.
func (s *Sharder) write(ctx context.Context, a writeTable) input {
	ctx, cancel := withTimeout(ctx, a.timeout)
	defer cancel()
	l := s.table.DeepCopy()
	if err := encodeTable(l, a.holders, s.opts.Key); err != nil {
		return failed{err: err}
	}
	_, err := s.opts.Kube.CoordinationV1().Leases(s.opts.Namespace).Update(ctx, l, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		s.metrics.conflicts.Inc()
		return tableConflict{}
	case err != nil:
		return failed{err: fmt.Errorf("shard: writing the ring's table: %w", err)}
	}
	return tableWritten{}
}

// relist makes the caches list with the selector. It is bounded, so that a
// cache that cannot list (a resource not served) does not stop this
// replica from releasing what others should get; the claimed shards stay
// shut until a relist works.
func (s *Sharder) relist(ctx context.Context) input {
	if s.opts.Relist == nil {
		return relisted{}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*s.opts.LeaseDuration)
	defer cancel()
	if err := s.opts.Relist(ctx); err != nil {
		return failed{err: fmt.Errorf("shard: relisting with the new selector: %w", err)}
	}
	return relisted{}
}

// acquired reports shards opened and has their objects queued.
func (s *Sharder) acquired(a opened) {
	s.metrics.handoffs.WithLabelValues("acquired").Add(float64(len(a.shards)))
	s.opts.Logger.Info("shard: opened shards", "ring", s.opts.Name, "shards", len(a.shards), "owned", a.owned)
	if s.opts.Acquired == nil {
		return
	}
	in := make([]bool, s.opts.VirtualShards)
	for _, v := range a.shards {
		in[v] = true
	}
	s.opts.Acquired(func(h uint64) bool { return in[VirtualOf(h, s.opts.VirtualShards)] })
}

// withTimeout bounds ctx by d, unless d is 0.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
