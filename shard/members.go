package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// RingLabel labels every member's Lease with its ring.
const RingLabel = "ctrlkit.io/ring"

// MembershipOptions configure a Membership. Kube, Namespace, Ring and
// Identity are required.
type MembershipOptions struct {
	Kube      kubernetes.Interface
	Namespace string // where the ring's Leases live
	Ring      string // the group of replicas sharing the work
	Identity  string // this replica, unique within the ring
	// LeaseDuration is how long a member that stops renewing is still
	// counted. Default: 15s.
	LeaseDuration time.Duration
	// RenewPeriod is how often the member renews its Lease and reads the
	// ring's. Default: LeaseDuration / 3.
	RenewPeriod time.Duration
	// OnChange is called, from Run's goroutine, with the live members
	// (sorted) whenever they change, first once this member's Lease exists.
	OnChange func(members []string)
}

// Membership keeps this replica's Lease in its ring and tells which members
// are alive: a member is alive while its Lease's renew time keeps changing,
// as observed by this replica's own clock (so clock skew between replicas
// does not matter), and for LeaseDuration after the last change observed.
type Membership struct {
	opts MembershipOptions

	mu      sync.Mutex
	members []string
}

// NewMembership checks opts and returns a Membership; Run starts it.
func NewMembership(opts MembershipOptions) (*Membership, error) {
	if opts.Kube == nil || opts.Namespace == "" || opts.Ring == "" || opts.Identity == "" {
		return nil, errors.New("shard: MembershipOptions needs Kube, Namespace, Ring and Identity")
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = 15 * time.Second
	}
	if opts.RenewPeriod <= 0 {
		opts.RenewPeriod = opts.LeaseDuration / 3
	}
	if opts.RenewPeriod >= opts.LeaseDuration {
		return nil, fmt.Errorf("shard: RenewPeriod %s must be shorter than LeaseDuration %s", opts.RenewPeriod, opts.LeaseDuration)
	}
	return &Membership{opts: opts}, nil
}

// Members returns the live members as last seen (sorted).
func (m *Membership) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members)
}

func (m *Membership) leaseName() string { return m.opts.Ring + "-" + m.opts.Identity }

// Run renews this member's Lease and watches the ring's until ctx ends,
// then deletes its Lease (a graceful leave: the others see it at once) and
// returns nil. A member that cannot renew for LeaseDuration is counted dead
// by the others; Run then returns an error so that the replica stops
// working on its share.
func (m *Membership) Run(ctx context.Context) error {
	leases := m.opts.Kube.CoordinationV1().Leases(m.opts.Namespace)
	defer func() {
		del, cancel := context.WithTimeout(context.Background(), m.opts.RenewPeriod)
		defer cancel()
		_ = leases.Delete(del, m.leaseName(), metav1.DeleteOptions{})
	}()
	seen := map[string]observed{} // lease name -> its renew time and when we saw it change
	lastRenew := time.Now()
	tick := time.NewTicker(m.opts.RenewPeriod)
	defer tick.Stop()
	for {
		now := time.Now()
		if err := m.renew(ctx, now); err == nil {
			lastRenew = now
		} else if ctx.Err() == nil && now.Sub(lastRenew) >= m.opts.LeaseDuration {
			return fmt.Errorf("shard: member %s could not renew its lease for %s: %w", m.opts.Identity, m.opts.LeaseDuration, err)
		}
		lctx, cancel := context.WithTimeout(ctx, m.opts.RenewPeriod)
		list, err := leases.List(lctx, metav1.ListOptions{LabelSelector: RingLabel + "=" + m.opts.Ring})
		cancel()
		if err == nil {
			m.observe(list.Items, seen, time.Now())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

type observed struct {
	renew string
	at    time.Time
}

// observe updates seen from the ring's leases and publishes the live
// members.
func (m *Membership) observe(items []coordinationv1.Lease, seen map[string]observed, now time.Time) {
	var live []string
	present := map[string]bool{}
	for _, l := range items {
		if l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
			continue
		}
		present[l.Name] = true
		renew := l.Spec.RenewTime.String()
		o, ok := seen[l.Name]
		if !ok || o.renew != renew {
			o = observed{renew: renew, at: now}
			seen[l.Name] = o
		}
		if now.Sub(o.at) < m.opts.LeaseDuration {
			live = append(live, *l.Spec.HolderIdentity)
		}
	}
	for name := range seen {
		if !present[name] {
			delete(seen, name)
		}
	}
	slices.Sort(live)
	m.mu.Lock()
	changed := !slices.Equal(live, m.members)
	m.members = live
	m.mu.Unlock()
	if changed && m.opts.OnChange != nil {
		m.opts.OnChange(slices.Clone(live))
	}
}

// renew creates or renews this member's Lease.
func (m *Membership) renew(ctx context.Context, now time.Time) error {
	leases := m.opts.Kube.CoordinationV1().Leases(m.opts.Namespace)
	ctx, cancel := context.WithTimeout(ctx, m.opts.RenewPeriod)
	defer cancel()
	secs := max(int32(m.opts.LeaseDuration/time.Second), 1)
	renewTime := metav1.NewMicroTime(now)
	l, err := leases.Get(ctx, m.leaseName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: m.leaseName(), Namespace: m.opts.Namespace, Labels: map[string]string{RingLabel: m.opts.Ring}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &m.opts.Identity, LeaseDurationSeconds: &secs,
				AcquireTime: &renewTime, RenewTime: &renewTime},
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l = l.DeepCopy()
	l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &renewTime, &secs
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}
