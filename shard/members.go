package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/lease"
)

// RingLabel labels every member's Lease with its ring.
const RingLabel = "ctrlkit.io/ring"

// ErrIdentityInUse reports a member Lease held by another incarnation of
// the same identity that has not expired: Run keeps trying until it does.
var ErrIdentityInUse = errors.New("shard: identity in use")

// tagAnnotation holds MembershipOptions.Tag on a member's Lease.
const tagAnnotation = "ctrlkit.io/member-tag"

// MembershipOptions configure a Membership. Kube, Namespace and Ring are
// required.
type MembershipOptions struct {
	Kube      kubernetes.Interface
	Namespace string // where the ring's Leases live
	Ring      string // the group of replicas sharing the work
	// Identity names this replica, unique within the ring. Default:
	// lease.DefaultIdentity().
	Identity string
	// Timing: the others keep counting a member that stopped renewing for
	// LeaseDuration; a member that could not renew for RenewDeadline,
	// counted from when its last successful renewal was sent, makes Run
	// fail, so that the replica stops its share before the others count
	// it dead; a member renews its Lease and reads the ring's every
	// RetryPeriod.
	lease.Timing
	// Tag, when set, is written on the member's Lease; members whose Tag
	// differs are not counted (a replica configured differently, e.g.
	// with another number of virtual shards, must not take a share).
	Tag string
	// OnChange is called, from a goroutine of Run, with the live members
	// (sorted) whenever they change, first once this member's Lease exists.
	OnChange func(members []string)
}

// Membership keeps this replica's Lease in its ring and tells which members
// are alive: a member is alive while its Lease's renew time keeps changing,
// as observed by this replica's own clock (so clock skew between replicas
// does not matter), and for LeaseDuration after the last change observed.
//
// Each Run is a new incarnation of the member: its Lease names the holder
// Identity#incarnation (see Holder), so what an earlier incarnation claimed
// (a replica restarted under the same name, or one that lost its Lease and
// joined again) is never mistaken for what this one holds.
type Membership struct {
	opts MembershipOptions

	mu      sync.Mutex
	members []string
	holder  string // this incarnation; "" outside Run
	joined  bool   // this incarnation's Lease was written
	// seen holds, per holder, its last renew time and when this member saw
	// it change; kept a while after the Lease is gone (see Expired).
	seen      map[string]observed
	firstList time.Time // the first successful read of the ring
	lastList  time.Time // the last one
}

// NewMembership checks opts and returns a Membership; Run starts it.
func NewMembership(opts MembershipOptions) (*Membership, error) {
	if opts.Kube == nil || opts.Namespace == "" || opts.Ring == "" {
		return nil, errors.New("shard: MembershipOptions needs Kube, Namespace and Ring")
	}
	var err error
	if opts.Identity, opts.Timing, err = lease.Defaults(opts.Identity, opts.Timing); err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	if strings.Contains(opts.Identity, "#") {
		return nil, fmt.Errorf("shard: identity %q contains '#'", opts.Identity)
	}
	return &Membership{opts: opts, seen: map[string]observed{}}, nil
}

// Members returns the identities of the live members as last seen (sorted).
func (m *Membership) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members)
}

// Holder returns this incarnation's holder name, Identity#incarnation, and
// whether it has joined: its Lease was written and the ring's read once;
// "" outside Run.
func (m *Membership) Holder() (holder string, joined bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.holder, m.joined
}

// Expired reports that holder (an Identity#incarnation, as Holder returns)
// is dead for certain: a successful read of the ring, made at least
// LeaseDuration after this member last saw holder's renew time change,
// found it unchanged or its Lease gone; or, for a holder never seen, this
// member has read the ring for LeaseDuration without seeing it. Reads that
// failed prove nothing, so a member cut off from the server expires nobody.
func (m *Membership) Expired(holder string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.seen[holder]; ok {
		return m.lastList.Sub(o.at) >= m.opts.LeaseDuration
	}
	return !m.firstList.IsZero() && m.lastList.Sub(m.firstList) >= m.opts.LeaseDuration
}

// nextExpiry returns the earliest time at which a read could find a member
// that is not expired yet expired: LeaseDuration after its last change was
// received.
func (m *Membership) nextExpiry() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Time
	for _, o := range m.seen {
		at := o.at.Add(m.opts.LeaseDuration)
		if m.lastList.Before(at) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next, !next.IsZero()
}

func (m *Membership) leaseName() string { return m.opts.Ring + "-" + m.opts.Identity }

// Run renews this member's Lease and reads the ring's until ctx ends, then
// deletes its Lease (a graceful leave: the others see it at once) and
// returns nil. When it cannot renew for RenewDeadline it returns an error
// at once (not at its next round), so that the replica stops working on
// its share before the others count it dead (LeaseDuration).
func (m *Membership) Run(ctx context.Context) error {
	var b [4]byte
	_, _ = rand.Read(b[:])
	holder := m.opts.Identity + "#" + hex.EncodeToString(b[:])
	m.setHolder(holder, false)
	err := m.serve(ctx, holder)
	m.setHolder("", false)
	if err != nil {
		// Return at once: the replica must stop its share now, and the
		// server is likely out of reach; the Lease expires by itself.
		return err
	}
	m.leave(holder)
	return nil
}

func (m *Membership) setHolder(holder string, joined bool) {
	m.mu.Lock()
	m.holder, m.joined = holder, joined
	m.mu.Unlock()
}

// serve runs the rounds until ctx ends (nil) or the fence lapses: no
// renewal succeeded for RenewDeadline since the last successful one was
// sent. The deadline is armed by the first successful renewal: before it
// there is nothing to stop, and joining may wait for an earlier
// incarnation's Lease to expire.
func (m *Membership) serve(ctx context.Context, holder string) error {
	fence := lease.NewFence(m.opts.RenewDeadline)
	defer fence.Stop()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lastErr := make(chan error, 1)
	go func() { lastErr <- m.rounds(rctx, holder, fence) }()
	select {
	case <-ctx.Done():
		<-lastErr
		return nil
	case <-fence.Lapsed():
		cancel()
		return fmt.Errorf("shard: member %s could not renew its lease for %s (last error: %v)", holder, m.opts.RenewDeadline, <-lastErr)
	}
}

// rounds renews and reads every RetryPeriod, and also when a member not yet
// expired could be (so that its death is seen then rather than up to a
// period later), until ctx ends; it returns the last renewal error.
func (m *Membership) rounds(ctx context.Context, holder string, fence *lease.Fence) error {
	var lastErr error
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return lastErr
		case <-timer.C:
		}
		start := time.Now()
		if err := m.round(ctx, holder, start, fence); err != nil {
			lastErr = err
		}
		next := start.Add(m.opts.RetryPeriod)
		if at, ok := m.nextExpiry(); ok && at.Before(next) {
			next = at
		}
		timer.Reset(time.Until(next))
	}
}

// round renews this member's Lease, then reads the ring's; the member has
// joined once both succeeded. It returns the renewal's error.
func (m *Membership) round(ctx context.Context, holder string, start time.Time, fence *lease.Fence) error {
	err := m.renew(ctx, start, holder)
	if err == nil {
		fence.Renewed(start)
	}
	lctx, cancel := context.WithTimeout(ctx, m.opts.RenewDeadline)
	defer cancel()
	asked := time.Now()
	list, lerr := m.opts.Kube.CoordinationV1().Leases(m.opts.Namespace).List(lctx,
		metav1.ListOptions{LabelSelector: RingLabel + "=" + m.opts.Ring})
	if lerr != nil {
		return err
	}
	m.observe(list.Items, asked, time.Now())
	if err == nil {
		m.setHolder(holder, true)
	}
	return err
}

// leave deletes this incarnation's Lease, and only this incarnation's:
// another process may hold the name.
//
// It may take up to RenewDeadline: until the Lease is gone the others count
// this member and leave its shards unclaimed, so a delete given up early
// makes them wait a whole LeaseDuration (a RetryPeriod was too short for a
// loaded server).
func (m *Membership) leave(holder string) {
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.RenewDeadline)
	defer cancel()
	leases := m.opts.Kube.CoordinationV1().Leases(m.opts.Namespace)
	if l, err := leases.Get(ctx, m.leaseName(), metav1.GetOptions{}); err == nil &&
		l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == holder {
		rv := l.ResourceVersion
		_ = leases.Delete(ctx, m.leaseName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	}
}

type observed struct {
	renew string
	at    time.Time
}

// observe records a successful read of the ring's Leases, sent at asked and
// answered at now. Both ends are used where they are the safe side: a
// renewal is counted as seen when the answer came (it may have been written
// just before), and "unchanged since" holds only as of when the read was
// sent (a renewal under way then may have been written just after).
func (m *Membership) observe(items []coordinationv1.Lease, asked, now time.Time) {
	var live []string
	m.mu.Lock()
	if m.firstList.IsZero() {
		m.firstList = now
	}
	m.lastList = asked
	for _, l := range items {
		if l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
			continue
		}
		holder := *l.Spec.HolderIdentity
		if l.Annotations[tagAnnotation] != m.opts.Tag {
			continue
		}
		renew := l.Spec.RenewTime.String()
		o, ok := m.seen[holder]
		if !ok || o.renew != renew {
			o = observed{renew: renew, at: now}
			m.seen[holder] = o
		}
		if now.Sub(o.at) < m.opts.LeaseDuration {
			id, _, _ := strings.Cut(holder, "#")
			live = append(live, id)
		}
	}
	for h, o := range m.seen { // forget holders long gone
		if now.Sub(o.at) > 10*m.opts.LeaseDuration {
			delete(m.seen, h)
		}
	}
	slices.Sort(live)
	live = slices.Compact(live)
	changed := !slices.Equal(live, m.members)
	m.members = live
	m.mu.Unlock()
	if changed && m.opts.OnChange != nil {
		m.opts.OnChange(slices.Clone(live))
	}
}

func (m *Membership) renew(ctx context.Context, now time.Time, holder string) error {
	leases := m.opts.Kube.CoordinationV1().Leases(m.opts.Namespace)
	ctx, cancel := context.WithTimeout(ctx, m.opts.RenewDeadline)
	defer cancel()
	secs := max(int32(m.opts.LeaseDuration/time.Second), 1)
	renewTime := metav1.NewMicroTime(now)
	l, err := leases.Get(ctx, m.leaseName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: m.leaseName(), Namespace: m.opts.Namespace, Labels: map[string]string{RingLabel: m.opts.Ring},
				Annotations: map[string]string{tagAnnotation: m.opts.Tag}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs,
				AcquireTime: &renewTime, RenewTime: &renewTime},
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if other := l.Spec.HolderIdentity; other != nil && *other != holder && !m.Expired(*other) {
		// Another incarnation holds this identity's Lease and may be alive:
		// a second process with the same Identity, or this replica before
		// a restart. Take the Lease only once that one expired.
		return fmt.Errorf("%w: the Lease %s is held by %s, not yet expired", ErrIdentityInUse, m.leaseName(), *other)
	}
	l = l.DeepCopy()
	if l.Annotations[tagAnnotation] != m.opts.Tag {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[tagAnnotation] = m.opts.Tag
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != holder {
		l.Spec.HolderIdentity, l.Spec.AcquireTime = &holder, &renewTime
	}
	l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &renewTime, &secs
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}
