// Package election is leader election on a coordination.k8s.io/v1 Lease,
// built on client-go's tools/leaderelection (the field's implementation of
// the protocol; this package does not write it again). It adds what a
// controller manager needs around it:
//
//   - Warm standby: Run campaigns while the caller's caches keep running;
//     only the work passed to Run waits for the lease.
//   - Fencing: when the lease cannot be renewed within RenewDeadline, the
//     context given to the work is cancelled with cause ErrLost at once, so
//     the work stops before another replica can acquire the lease (which it
//     can only after LeaseDuration, longer than RenewDeadline).
//   - Release after the work stopped: when Run's context ends, the work is
//     told to stop first, and the lease is released only once it has
//     returned, so a standby takes over within about one RetryPeriod and
//     never while this replica still works.
//   - Metrics: whether this replica leads, transitions, time of the last
//     renewal.
//
// Concurrency: an Elector is safe for concurrent use; Run may be called once.
package election

import (
	"context"
	"errors"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/ctrlkit/ctrlkit/internal/run"
	"github.com/ctrlkit/ctrlkit/lease"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// Errors of Run; classify them with errors.Is.
var (
	// ErrLost is the cause of the work's context when the lease was lost,
	// and what Run returns then.
	ErrLost = errors.New("election: lease lost")
	// ErrStarted reports a second call to Run.
	// It is the same value as the other packages' ErrStarted.
	ErrStarted = run.ErrStarted
)

// Options configure an Elector. The zero value is not valid: Name is
// required.
type Options struct {
	// Name and Namespace name the Lease. Namespace default: "default".
	Name      string
	Namespace string
	// Identity names this replica in the Lease. Default:
	// lease.DefaultIdentity().
	Identity string
	// Timing: a standby takes the lease LeaseDuration after the last
	// renewal it saw; the leader stops its work RenewDeadline after its
	// last successful renewal was sent; attempts are RetryPeriod apart.
	// Defaults (see lease.Timing): 15s, 10s, 2s; a shorter LeaseDuration
	// alone scales the other two with it.
	lease.Timing
	// Telemetry: the Logger receives transitions, the Registerer the
	// election's metrics.
	telemetry.Telemetry
}

func (o Options) withDefaults() (Options, error) {
	if o.Name == "" {
		return o, errors.New("election: a Lease name is required")
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	var err error
	if o.Identity, o.Timing, err = lease.Defaults(o.Identity, o.Timing); err != nil {
		return o, fmt.Errorf("election: %w", err)
	}
	o.Logger = o.Log()
	return o, nil
}

// Elector campaigns for one Lease.
type Elector struct {
	opts    Options
	kube    kubernetes.Interface
	metrics *metrics

	mu      sync.Mutex // guards the fields below
	once    run.Once   // Run
	leading bool
	leader  string // the identity last seen holding the lease
}

// New returns an Elector for the Lease opts names on the API server of cfg;
// it starts nothing. Its requests time out after RenewDeadline (a stalled
// connection must not keep a replica that lost its lease from giving up).
// It fails on invalid options or when metrics cannot be registered.
func New(cfg *rest.Config, opts Options) (*Elector, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = opts.RenewDeadline
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("election: %w", err)
	}
	m, err := newMetrics(opts.Telemetry, opts.Namespace+"/"+opts.Name)
	if err != nil {
		return nil, fmt.Errorf("election: %w", err)
	}
	return &Elector{opts: opts, kube: kube, metrics: m}, nil
}

// Identity returns this replica's identity in the Lease.
func (e *Elector) Identity() string { return e.opts.Identity }

// IsLeader reports whether this replica holds the lease now.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading
}

// Leader returns the identity last seen holding the lease ("" before the
// first observation).
func (e *Elector) Leader() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leader
}

// Run campaigns for the lease until ctx ends. Once it holds the lease it
// calls work with a context that ends when ctx ends (cause: ctx's) or when
// the lease is lost (cause ErrLost), and keeps renewing. Run returns after
// work has returned and the lease was released (when ctx ended) or given up:
// nil when ctx ended, an error wrapping ErrLost when the lease was lost, or
// work's error (the lease is released then too). It can be called once.
func (e *Elector) Run(ctx context.Context, work func(ctx context.Context) error) error {
	if err := e.once.Start("election"); err != nil {
		return err
	}

	lock := &observedLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  leaseMeta(e.opts),
		Client:     e.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.opts.Identity},
	}, identity: e.opts.Identity, renewed: e.metrics.renewed, fence: lease.NewFence(e.opts.RenewDeadline)}
	defer lock.fence.Stop()
	// The elector runs under its own context: ctx ending must first stop
	// the work, and only then release the lease.
	electCtx, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()
	var r runState
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: e.opts.Name, ReleaseOnCancel: true,
		LeaseDuration: e.opts.LeaseDuration, RenewDeadline: e.opts.RenewDeadline, RetryPeriod: e.opts.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) {
				if !r.begin() {
					return // le.Run already returned
				}
				defer r.end()
				r.err, r.lost = e.lead(ctx, leadCtx, lock, work)
				stopElecting() // release the lease, or give it up after a loss
			},
			OnStoppedLeading: func() { e.setLeading(false) },
			OnNewLeader:      e.observe,
		},
	})
	if err != nil {
		return fmt.Errorf("election: %w", err)
	}
	watched := make(chan struct{})
	go func() { // ctx ending stops a campaign at once, but a leader only after its work returned
		defer close(watched)
		select {
		case <-ctx.Done():
			if !e.IsLeader() {
				stopElecting()
			}
		case <-electCtx.Done():
		}
	}()
	le.Run(electCtx)
	r.wait()
	stopElecting()
	<-watched
	if r.lost {
		return fmt.Errorf("election: lease %s/%s: %w", e.opts.Namespace, e.opts.Name, ErrLost)
	}
	return r.err
}

// runState joins the work that client-go's elector starts on a goroutine of
// its own: once wait has been called, begin refuses to start work.
type runState struct {
	mu      sync.Mutex // guards stopped and done
	stopped bool
	done    chan struct{} // closed by end; nil when no work started
	err     error         // written by the work's goroutine before end
	lost    bool
}

func (r *runState) begin() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return false
	}
	r.done = make(chan struct{})
	return true
}

func (r *runState) end() { close(r.done) }

func (r *runState) wait() {
	r.mu.Lock()
	r.stopped = true
	done := r.done
	r.mu.Unlock()
	if done != nil {
		<-done
	}
}

// lead runs work while this replica leads: its context ends with ctx
// (graceful) or with ErrLost when the lease is lost. The loss is detected
// here, not only from client-go's leadCtx: that ends only after client-go
// has tried to release the lease, which on a stalled connection takes up to
// a whole request timeout, by which time another replica may lead. Here the
// work is stopped RenewDeadline after the last successful renewal was sent,
// before the lease (LeaseDuration from no earlier than that moment) can
// expire for the others.
func (e *Elector) lead(ctx, leadCtx context.Context, lock *observedLock, work func(context.Context) error) (err error, lost bool) {
	e.setLeading(true)
	e.opts.Logger.Info("election: leading", "lease", e.opts.Namespace+"/"+e.opts.Name, "identity", e.opts.Identity)
	workCtx, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(nil)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if e.fence(ctx, leadCtx, workCtx, lock) {
			lost = true
			e.opts.Logger.Warn("election: lease lost or not renewed in time; stopping work now",
				"lease", e.opts.Namespace+"/"+e.opts.Name, "last renewal sent", lock.fence.LastSent())
			stop(ErrLost)
			return
		}
		stop(context.Cause(ctx))
	}()
	err = work(workCtx)
	stop(nil)
	<-watched
	return err, lost
}

// fence waits until ctx ends (false), the work ends (false), or the lease
// must be taken as lost (true): client-go gave it up, or no renewal has
// succeeded for RenewDeadline.
func (e *Elector) fence(ctx, leadCtx, workCtx context.Context, lock *observedLock) bool {
	select {
	case <-ctx.Done():
		return false
	case <-workCtx.Done():
		return false
	case <-leadCtx.Done():
		return ctx.Err() == nil
	case <-lock.fence.Lapsed():
		return true
	}
}

func (e *Elector) setLeading(v bool) {
	e.mu.Lock()
	changed := e.leading != v
	e.leading = v
	e.mu.Unlock()
	if changed {
		e.metrics.leading(v)
	}
}

func (e *Elector) observe(identity string) {
	e.mu.Lock()
	e.leader = identity
	e.mu.Unlock()
	e.opts.Logger.Info("election: leader observed", "lease", e.opts.Namespace+"/"+e.opts.Name, "leader", identity)
}

// leaseMeta names the Lease of opts.
func leaseMeta(opts Options) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: opts.Name, Namespace: opts.Namespace}
}
