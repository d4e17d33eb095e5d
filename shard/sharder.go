package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// Annotations of the ring's table, the Lease named after the ring.
const (
	holdersAnnotation = "ctrlkit.io/shard-holders"
	virtualAnnotation = "ctrlkit.io/virtual-shards"
	keyAnnotation     = "ctrlkit.io/shard-key"
	// MaxVirtualShards bounds SharderOptions.VirtualShards: the ring's
	// table must fit in a Lease's annotations.
	MaxVirtualShards = 4096
)

// ErrLost is the cause of a reconcile's context when the replica must stop
// at once: its membership lapsed, or the ring's table shows another holder
// of the key's shard.
var ErrLost = errors.New("shard: this replica no longer holds the shard")

// SharderOptions configure a Sharder. Kube, Namespace, Ring and Identity
// are required.
type SharderOptions struct {
	Kube      kubernetes.Interface
	Namespace string // where the ring's Leases live
	Ring      string // the replicas sharing the work: one name per controller group
	Identity  string // this replica, unique in the ring (e.g. the Pod's name)
	// Key is what objects are hashed by: Namespace (default) or UID.
	Key Key
	// VirtualShards is the number of equal hash ranges handed out; a power
	// of two, at most MaxVirtualShards, the same on every replica of the
	// ring. Default: DefaultVirtualShards.
	VirtualShards int
	// LeaseDuration, RenewDeadline and RenewPeriod time membership: see
	// MembershipOptions.
	LeaseDuration, RenewDeadline, RenewPeriod time.Duration
	// DrainTimeout bounds how long a release waits for the shard's
	// in-flight reconciles before cancelling their contexts (it then
	// still waits for them to return). Default: 30s.
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
	// Logger receives joins, handoffs and errors. Default: discard.
	Logger *slog.Logger
	// Registerer receives the sharder's metrics. Default: none.
	Registerer prometheus.Registerer
}

// state is one virtual shard's state on this replica.
type state uint8

const (
	closed    state = iota // not this replica's
	acquiring              // claimed in the table; caches relisting
	open                   // reconciled here
	releasing              // closed to new reconciles; draining before the table says so
)

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
type Sharder struct {
	opts    SharderOptions
	mem     *Membership
	metrics *sharderMetrics
	sel     atomic.Pointer[Selector]
	kick    chan struct{}

	mu       sync.Mutex // guards the fields below
	states   []state
	running  []map[uint64]context.CancelCauseFunc // per shard: its in-flight reconciles' cancels
	nextID   uint64
	idle     chan struct{} // closed and replaced when a shard's last running reconcile ends
	lastErr  error         // the last failed step, for Ready
	relisted bool          // the caches reflect Selector
	holder   string        // the incarnation the states belong to
	epoch    uint64        // counts closeAll: a step opens nothing when it moved
	joinedAt time.Time     // when step first saw holder joined
}

// NewSharder checks opts and returns a Sharder; Run starts it.
func NewSharder(opts SharderOptions) (*Sharder, error) {
	if opts.Key == "" {
		opts.Key = Namespace
	}
	if opts.Key != Namespace && opts.Key != UID {
		return nil, fmt.Errorf("%w: shard key %q, want %q or %q", ErrInvalid, opts.Key, Namespace, UID)
	}
	if opts.VirtualShards == 0 {
		opts.VirtualShards = DefaultVirtualShards
	}
	if err := checkVirtual(opts.VirtualShards); err != nil {
		return nil, err
	}
	if opts.VirtualShards > MaxVirtualShards {
		return nil, fmt.Errorf("%w: %d virtual shards, want at most %d", ErrInvalid, opts.VirtualShards, MaxVirtualShards)
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Sharder{opts: opts, kick: make(chan struct{}, 1), idle: make(chan struct{}),
		states:  make([]state, opts.VirtualShards),
		running: make([]map[uint64]context.CancelCauseFunc, opts.VirtualShards)}
	mem, err := NewMembership(MembershipOptions{Kube: opts.Kube, Namespace: opts.Namespace, Ring: opts.Ring,
		Identity: opts.Identity, LeaseDuration: opts.LeaseDuration, RenewDeadline: opts.RenewDeadline,
		RenewPeriod: opts.RenewPeriod, Tag: fmt.Sprintf("%s/%d", opts.Key, opts.VirtualShards),
		OnChange: func([]string) { s.poke() }})
	if err != nil {
		return nil, err
	}
	s.mem = mem
	if s.metrics, err = newSharderMetrics(opts.Registerer, opts.Ring); err != nil {
		return nil, err
	}
	none := SelectorOf(opts.Key, nil, opts.VirtualShards)
	s.sel.Store(&none)
	return s, nil
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
	if s.states[v] != open {
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
	if s.lastErr != nil {
		return s.lastErr
	}
	if !s.relisted {
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
	for v, x := range s.states {
		switch x {
		case open:
			st.Open = append(st.Open, v)
		case acquiring, releasing:
			st.Pending = append(st.Pending, v)
		}
	}
	return st
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
	for {
		memCtx, leave := context.WithCancel(context.WithoutCancel(ctx))
		memDone := make(chan error, 1)
		wg.Go(func() { memDone <- s.mem.Run(memCtx) })
		err := s.serve(ctx, memDone)
		if err == nil { // ctx ended: leave gracefully
			s.leave(context.WithoutCancel(ctx))
			leave()
			<-memDone
			s.opts.Logger.Info("shard: left the ring", "ring", s.opts.Ring, "identity", s.opts.Identity)
			return nil
		}
		leave()
		s.metrics.lost.Inc()
		s.opts.Logger.Error("shard: membership lapsed; stopped every shard at once, joining again", "ring", s.opts.Ring, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.mem.opts.RenewPeriod):
		}
	}
}

// serve runs the sharder's steps for one membership incarnation until ctx
// ends (nil) or the membership lapses (its error, after closing every
// shard).
func (s *Sharder) serve(ctx context.Context, memDone <-chan error) error {
	tick := time.NewTicker(s.mem.opts.RenewPeriod)
	defer tick.Stop()
	stepCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lapsed := make(chan error, 1)
	go func() {
		select {
		case err := <-memDone:
			// Fence first, from here, whatever the step loop is doing.
			s.closeAll(fmt.Errorf("%w: %w", ErrLost, err))
			cancel(err)
			lapsed <- err
		case <-stepCtx.Done():
			lapsed <- nil
		}
	}()
	for {
		select {
		case <-ctx.Done():
			cancel(nil)
			if err := <-lapsed; err != nil {
				return err
			}
			return nil
		case err := <-lapsed:
			return err
		case <-s.kick:
		case <-tick.C:
		}
		if err := s.step(stepCtx); err != nil && stepCtx.Err() == nil {
			s.setErr(err)
			s.opts.Logger.Warn("shard: could not update this replica's share; retrying", "ring", s.opts.Ring, "err", err)
		} else if err == nil {
			s.setErr(nil)
		}
	}
}

func (s *Sharder) setErr(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

// leave closes every shard to new reconciles, lets in-flight ones finish
// (DrainTimeout), gives the shards up in the table, then stops.
func (s *Sharder) leave(ctx context.Context) {
	s.mu.Lock()
	for v, x := range s.states {
		if x != closed {
			s.states[v] = releasing
		}
	}
	s.mu.Unlock()
	s.drain(ctx, s.opts.DrainTimeout)
	s.releaseAll(ctx)
	s.closeAll(ErrLost)
}

// closeAll closes every shard at once and cancels its reconciles.
func (s *Sharder) closeAll(cause error) {
	s.mu.Lock()
	s.epoch++ // a step under way must not open or claim on the closed states' behalf
	var stopped []int
	for v, x := range s.states {
		if x != closed {
			s.states[v] = closed
			stopped = append(stopped, v)
		}
	}
	s.relisted = false
	s.mu.Unlock()
	for _, v := range stopped {
		s.stopShard(v, cause)
	}
	none := SelectorOf(s.opts.Key, nil, s.opts.VirtualShards)
	s.sel.Store(&none)
	s.metrics.owned.Set(0)
}

// drain waits until no reconcile is in flight in a shard that is not open,
// for at most timeout; then it cancels them and waits for them to return.
func (s *Sharder) drain(ctx context.Context, timeout time.Duration) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	cancelled := false
	for {
		s.mu.Lock()
		var busy []int
		for v, rs := range s.running {
			if len(rs) > 0 && s.states[v] != open {
				busy = append(busy, v)
			}
		}
		idle := s.idle
		s.mu.Unlock()
		if len(busy) == 0 {
			return
		}
		select {
		case <-idle:
		case <-deadline.C:
			if !cancelled {
				cancelled = true
				s.opts.Logger.Warn("shard: reconciles still running after the drain timeout; cancelling them", "ring", s.opts.Ring, "shards", busy)
				for _, v := range busy {
					s.stopShard(v, fmt.Errorf("%w: released after a drain timeout of %s", ErrLost, timeout))
				}
			}
		case <-ctx.Done():
			return
		}
	}
}

// step brings this replica's share in line with the live members: release
// what is no longer its own, claim what is, relist, open.
func (s *Sharder) step(ctx context.Context) error {
	holder, joined := s.mem.Holder()
	if !joined {
		return nil
	}
	s.mu.Lock()
	newIncarnation := s.holder != holder
	s.mu.Unlock()
	if newIncarnation { // starts from nothing, whatever the table says of earlier ones
		s.closeAll(ErrLost)
		s.mu.Lock()
		s.holder, s.joinedAt = holder, time.Now()
		s.mu.Unlock()
	}
	s.mu.Lock()
	epoch := s.epoch
	wait := s.joinedAt.Add(2 * s.mem.opts.RenewPeriod).Sub(time.Now())
	s.mu.Unlock()
	if wait > 0 {
		// Join grace: replicas started together see each other before
		// any claims a share, rather than one claiming (and listing)
		// everything first.
		time.AfterFunc(wait, s.poke)
		return nil
	}
	id, _, _ := strings.Cut(holder, "#")
	members := s.mem.Members()
	if !slices.Contains(members, id) {
		members = append(members, id)
	}
	owners, err := Owners(members, s.opts.VirtualShards)
	if err != nil {
		return err
	}
	// Close what is no longer ours, and drain it, before the table says so.
	s.mu.Lock()
	release := false
	for v, x := range s.states {
		if owners[v] != id && (x == open || x == acquiring) {
			s.states[v] = releasing
			release = true
		}
	}
	s.mu.Unlock()
	if release {
		s.drain(ctx, s.opts.DrainTimeout)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	changed, err := s.writeTable(ctx, holder, owners, id, epoch)
	if err != nil {
		return err
	}
	s.mu.Lock()
	need := changed || !s.relisted
	s.mu.Unlock()
	if !need {
		return nil
	}
	if s.opts.Relist != nil {
		// Bounded, so that a cache that cannot list (a resource not
		// served) does not stop this replica from releasing what others
		// should get; the claimed shards stay closed until a relist works.
		rctx, cancel := context.WithTimeout(ctx, 2*s.mem.opts.LeaseDuration)
		err := s.opts.Relist(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("shard: relisting with the new selector: %w", err)
		}
	}
	s.mu.Lock()
	if s.epoch != epoch {
		s.mu.Unlock()
		return nil
	}
	var opened []int
	for v, x := range s.states {
		if x == acquiring {
			s.states[v] = open
			opened = append(opened, v)
		}
	}
	s.relisted = true
	n := 0
	for _, x := range s.states {
		if x == open {
			n++
		}
	}
	s.mu.Unlock()
	s.metrics.owned.Set(float64(n))
	if len(opened) > 0 {
		s.metrics.handoffs.WithLabelValues("acquired").Add(float64(len(opened)))
		s.opts.Logger.Info("shard: opened shards", "ring", s.opts.Ring, "holder", holder, "shards", len(opened), "owned", n)
		if s.opts.Acquired != nil {
			in := make([]bool, s.opts.VirtualShards)
			for _, v := range opened {
				in[v] = true
			}
			s.opts.Acquired(func(h uint64) bool { return in[VirtualOf(h, s.opts.VirtualShards)] })
		}
	}
	return nil
}

// writeTable claims the shards owners gives this replica that are free (or
// held by an expired or earlier incarnation), and gives up those it is
// releasing (drained) or holds in the table only. It retries on conflicts.
// It reports whether the selector changed.
func (s *Sharder) writeTable(ctx context.Context, holder string, owners []string, id string, epoch uint64) (bool, error) {
	leases := s.opts.Kube.CoordinationV1().Leases(s.opts.Namespace)
	for attempt := 0; ; attempt++ {
		l, holders, err := s.readTable(ctx)
		if err != nil {
			return false, err
		}
		next := slices.Clone(holders)
		claim := make([]bool, len(owners))
		s.mu.Lock()
		if s.epoch != epoch {
			s.mu.Unlock()
			return false, ErrLost
		}
		var lost []int
		for v, x := range s.states {
			switch {
			case x == releasing || (x == closed && holders[v] == holder && owners[v] != id):
				if holders[v] == holder {
					next[v] = ""
				}
			case (x == open || x == acquiring) && holders[v] != holder:
				lost = append(lost, v) // the table gives it to another: stop at once
			case x == closed && owners[v] == id &&
				(holders[v] == "" || holders[v] == holder || s.mem.Expired(holders[v])):
				next[v], claim[v] = holder, true
			}
		}
		s.mu.Unlock()
		for _, v := range lost {
			s.mu.Lock()
			s.states[v] = releasing
			s.mu.Unlock()
			s.stopShard(v, fmt.Errorf("%w: the ring's table names %s", ErrLost, holders[v]))
			s.metrics.handoffs.WithLabelValues("lost").Inc()
			s.opts.Logger.Error("shard: the ring's table gives a shard this replica held to another; stopped it", "shard", v, "holder", holders[v])
		}
		if slices.Equal(next, holders) && !slices.Contains(claim, true) && len(lost) == 0 && !s.anyReleasing() {
			return false, nil
		}
		if !slices.Equal(next, holders) {
			l = l.DeepCopy()
			if err := encodeTable(l, next, s.opts.Key); err != nil {
				return false, err
			}
			if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); apierrors.IsConflict(err) && attempt < 20 {
				s.metrics.conflicts.Inc()
				continue
			} else if err != nil {
				return false, fmt.Errorf("shard: writing the ring's table: %w", err)
			}
		}
		s.mu.Lock()
		if s.epoch != epoch { // fenced meanwhile: every state is closed; what the table says expires
			s.mu.Unlock()
			return false, ErrLost
		}
		released, claimed := 0, 0
		for v := range s.states {
			switch {
			case s.states[v] == releasing:
				s.states[v] = closed
				released++
			case claim[v]:
				s.states[v] = acquiring
				claimed++
				if holders[v] != "" && holders[v] != holder {
					s.metrics.handoffs.WithLabelValues("taken_over").Inc()
				}
			}
		}
		s.relisted = s.relisted && released == 0 && claimed == 0
		var vs []int
		for v, x := range s.states {
			if x == open || x == acquiring {
				vs = append(vs, v)
			}
		}
		s.mu.Unlock()
		if released > 0 {
			s.metrics.handoffs.WithLabelValues("released").Add(float64(released))
			s.opts.Logger.Info("shard: released shards", "ring", s.opts.Ring, "holder", holder, "shards", released)
		}
		sel := SelectorOf(s.opts.Key, vs, s.opts.VirtualShards)
		old := s.sel.Swap(&sel)
		return old.String() != sel.String(), nil
	}
}

func (s *Sharder) anyReleasing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.states, releasing)
}

// releaseAll gives up every shard this incarnation holds in the table, on
// a graceful leave (every shard is closed and drained).
func (s *Sharder) releaseAll(ctx context.Context) {
	holder, joined := s.mem.Holder()
	if !joined {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	leases := s.opts.Kube.CoordinationV1().Leases(s.opts.Namespace)
	for attempt := 0; attempt < 20 && ctx.Err() == nil; attempt++ {
		l, holders, err := s.readTable(ctx)
		if err != nil {
			break
		}
		next := slices.Clone(holders)
		for v, h := range next {
			if h == holder {
				next[v] = ""
			}
		}
		if slices.Equal(next, holders) {
			return
		}
		l = l.DeepCopy()
		if err := encodeTable(l, next, s.opts.Key); err != nil {
			break
		}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			s.metrics.handoffs.WithLabelValues("released").Add(float64(countOf(holders, holder)))
			return
		}
		if !apierrors.IsConflict(err) {
			break
		}
	}
	s.opts.Logger.Warn("shard: could not release this replica's shards on leaving; the others take them over after the lease duration", "ring", s.opts.Ring)
}

func countOf(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// readTable reads the ring's table, creating it when missing. holders[v]
// is the holder of shard v, "" for none.
func (s *Sharder) readTable(ctx context.Context) (*coordinationv1.Lease, []string, error) {
	leases := s.opts.Kube.CoordinationV1().Leases(s.opts.Namespace)
	l, err := leases.Get(ctx, s.opts.Ring, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: s.opts.Ring, Namespace: s.opts.Namespace}}
		if err := encodeTable(l, make([]string, s.opts.VirtualShards), s.opts.Key); err != nil {
			return nil, nil, err
		}
		l, err = leases.Create(ctx, l, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			l, err = leases.Get(ctx, s.opts.Ring, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("shard: reading the ring's table %s/%s: %w", s.opts.Namespace, s.opts.Ring, err)
	}
	holders, err := decodeTable(l, s.opts.VirtualShards, s.opts.Key)
	if err != nil {
		return nil, nil, err
	}
	return l, holders, nil
}

// encodeTable writes holders into l's annotations: per holder, its shards
// as ranges ("0-3,7").
func encodeTable(l *coordinationv1.Lease, holders []string, key Key) error {
	byHolder := map[string][]string{}
	for v := 0; v < len(holders); {
		h := holders[v]
		end := v
		for end+1 < len(holders) && holders[end+1] == h {
			end++
		}
		if h != "" {
			r := strconv.Itoa(v)
			if end > v {
				r += "-" + strconv.Itoa(end)
			}
			byHolder[h] = append(byHolder[h], r)
		}
		v = end + 1
	}
	table := map[string]string{}
	for h, rs := range byHolder {
		table[h] = strings.Join(rs, ",")
	}
	b, err := json.Marshal(table)
	if err != nil {
		return err
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[holdersAnnotation] = string(b)
	l.Annotations[virtualAnnotation] = strconv.Itoa(len(holders))
	l.Annotations[keyAnnotation] = string(key)
	return nil
}

// Table is a ring's table of holders, as ReadTable returns it.
type Table struct {
	Key     Key
	Virtual int
	// Holders[v] is the holder (Identity#incarnation) of virtual shard v,
	// "" for none.
	Holders []string
}

// Held counts the virtual shards each identity holds (its incarnations
// together).
func (t Table) Held() map[string]int {
	out := map[string]int{}
	for _, h := range t.Holders {
		if h != "" {
			id, _, _ := strings.Cut(h, "#")
			out[id]++
		}
	}
	return out
}

// ReadTable reads the table of the ring named ring in namespace, e.g. for a
// dashboard. It fails with a NotFound API error before the ring's first
// member wrote it.
func ReadTable(ctx context.Context, kube kubernetes.Interface, namespace, ring string) (Table, error) {
	l, err := kube.CoordinationV1().Leases(namespace).Get(ctx, ring, metav1.GetOptions{})
	if err != nil {
		return Table{}, err
	}
	virtual, err := strconv.Atoi(l.Annotations[virtualAnnotation])
	if err != nil || checkVirtual(virtual) != nil {
		return Table{}, fmt.Errorf("%w: the ring %s's table names %q virtual shards", ErrInvalid, ring, l.Annotations[virtualAnnotation])
	}
	key := Key(l.Annotations[keyAnnotation])
	holders, err := decodeTable(l, virtual, key)
	if err != nil {
		return Table{}, err
	}
	return Table{Key: key, Virtual: virtual, Holders: holders}, nil
}

// decodeTable reads the holders of virtual shards from l, checking that
// the ring was made with the same number of shards and key.
func decodeTable(l *coordinationv1.Lease, virtual int, key Key) ([]string, error) {
	a := l.Annotations
	if got := a[virtualAnnotation]; got != strconv.Itoa(virtual) {
		return nil, fmt.Errorf("%w: the ring %s has %s virtual shards, this replica is configured with %d (use a new ring name to change it)",
			ErrInvalid, l.Name, got, virtual)
	}
	if got := a[keyAnnotation]; got != string(key) {
		return nil, fmt.Errorf("%w: the ring %s shards by %q, this replica by %q (use a new ring name to change it)", ErrInvalid, l.Name, got, key)
	}
	var table map[string]string
	if err := json.Unmarshal([]byte(a[holdersAnnotation]), &table); err != nil {
		return nil, fmt.Errorf("%w: the ring %s's table: %v", ErrInvalid, l.Name, err)
	}
	holders := make([]string, virtual)
	for h, rs := range table {
		for _, r := range strings.Split(rs, ",") {
			lo, hi, isRange := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil || a < 0 || b < a || b >= virtual {
				return nil, fmt.Errorf("%w: the ring %s's table: bad range %q of %s", ErrInvalid, l.Name, r, h)
			}
			for v := a; v <= b; v++ {
				holders[v] = h
			}
		}
	}
	return holders, nil
}

// watchTable pokes the step loop whenever the ring's table changes, so a
// released shard is claimed at once rather than at the next tick.
func (s *Sharder) watchTable(ctx context.Context) {
	leases := s.opts.Kube.CoordinationV1().Leases(s.opts.Namespace)
	for ctx.Err() == nil {
		w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", s.opts.Ring).String()})
		if err == nil {
			for range w.ResultChan() {
				s.poke()
			}
			w.Stop()
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.mem.opts.RenewPeriod):
		}
	}
}

type sharderMetrics struct {
	owned     prometheus.Gauge
	handoffs  *prometheus.CounterVec
	lost      prometheus.Counter
	conflicts prometheus.Counter
	notOwned  prometheus.Counter
}

func newSharderMetrics(reg prometheus.Registerer, ring string) (*sharderMetrics, error) {
	l := prometheus.Labels{"ring": ring}
	m := &sharderMetrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ctrlkit_shard_owned_virtual_shards", ConstLabels: l,
			Help: "Virtual shards this replica reconciles."}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctrlkit_shard_handoffs_total", ConstLabels: l,
			Help: "Virtual shards acquired, released, taken over from an expired holder, or lost to another holder (which should not happen)."}, []string{"kind"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctrlkit_shard_membership_lapses_total", ConstLabels: l,
			Help: "Times this replica could not renew its membership in time and stopped every shard."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctrlkit_shard_table_conflicts_total", ConstLabels: l,
			Help: "Writes of the ring's table that another replica's write beat (retried)."}),
		notOwned: prometheus.NewCounter(prometheus.CounterOpts{Name: "ctrlkit_shard_keys_not_owned_total", ConstLabels: l,
			Help: "Keys that reached a worker while their shard was not open here, dropped (their owner reconciles them)."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.owned, m.handoffs, m.lost, m.conflicts, m.notOwned} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("shard: metrics: %w", err)
		}
	}
	return m, nil
}
