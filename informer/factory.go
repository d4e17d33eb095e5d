package informer

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/intern"
	"github.com/ctrlkit/ctrlkit/internal/run"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/snapshot"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// ErrTypeMismatch reports asking a Factory for an informer it already holds
// with another object type.
var ErrTypeMismatch = errors.New("informer: resource already shared with another type")

// FactoryOptions configure a Factory and every informer it creates; an
// informer's Options embed them. The zero value means the defaults.
type FactoryOptions struct {
	// Reflector configures the informer's reflector: watch-list or lists,
	// page size, OnError for every list or watch error, and so on. Its
	// Name, Logger and Registerer, when empty, are the informer's (a
	// Factory's informers always name theirs after themselves). Default:
	// the reflector's defaults.
	Reflector reflector.Options
	// KeepManagedFields keeps metadata.managedFields, which are otherwise
	// stripped before caching (they are large and rarely read). Stripping
	// happens in place: objects from the ListerWatcher become the
	// informer's, so it must hand out objects it neither keeps nor shares
	// with another informer, as API clients do (each response is decoded
	// anew).
	KeepManagedFields bool
	// KeepManagedFieldsOf keeps, of metadata.managedFields, the entries of
	// these field managers (the FieldManager of a controller's applies) and
	// strips the others. apply.Apply reads a controller's own entry from
	// the cache to skip a server-side apply that would change nothing; an
	// entry costs about the size of the fields it names. The manager's
	// informers of Kubernetes' own types pick these entries on the wire and
	// skip the others undecoded, so objects the controller never applies
	// cost no more than without it. Ignored when KeepManagedFields keeps
	// them all.
	KeepManagedFieldsOf []string
	// KeepManagedFieldsOfAdded, when not nil, names more field managers
	// whose entries are kept, and may be added to while the informers run:
	// the manager's (manager.Manager.KeepManagedFieldsOf, for a
	// controller set up apart from manager.Options). Objects cached before
	// an Add keep none until they change.
	KeepManagedFieldsOfAdded *intern.FieldManagers
	// DisableInterning keeps every string of every cached object as the
	// decoder allocated it. By default the informer interns the strings
	// that repeat across objects (namespaces, labels, owners, images, ...;
	// see package intern), in place, after Transform: a cache of Pods then
	// takes about a sixth less memory (see README's benchmarks), for a hash
	// per repeated string of each object written.
	DisableInterning bool
	// ShareMaps shares equal label, annotation and node-selector maps whole
	// between cached objects, besides interning their strings (see
	// intern.Table.ShareMaps): about 300 bytes less per map, for every Pod
	// of a workload, but a reconcile that writes into a cached object's
	// labels then changes every object sharing them, and may crash the
	// process with a concurrent map write. Needs interning. Default: on
	// for projections (a Scope with As: a read-only view made for large
	// caches, never written back whole), off for full objects; true turns
	// it on for every informer, DisableInterning off for every informer.
	ShareMaps bool
	// AtomicRelist holds each relist whole and swaps it into the cache at
	// its end, as client-go's informers do since Kubernetes 1.36: a reader
	// never sees the cache half relisted (some objects from the new list,
	// others from before it), and handlers are told what changed once the
	// new state is in place: the deletes first, then the adds and updates
	// in the order listed, as client-go does. It costs memory: the
	// relist's objects beside the cache until the end (the streamed default
	// applies each page as it arrives, and tells of deletes at its end;
	// see README's S4). Default: off, streamed.
	AtomicRelist bool
	// DetectMutations says when the informer checks that nobody writes
	// into its cached objects, which every reader shares (a reconcile that
	// changes a label of an object from a Reader changes it for everyone,
	// and the cache no longer matches the server). When on, the informer
	// keeps a deep copy of each object as it is cached (after Transform
	// and interning) and compares the two, field by field, when the object
	// is replaced or deleted and when Run returns (no background sweep); a
	// difference goes to OnMutation as a *MutationError naming the object
	// and the changed fields. The comparison only reads the cached object.
	// Cost when on: twice the cache's memory, and a deep copy and a
	// comparison per event, about 20µs for an update of a Pod against
	// 0.25µs off (BenchmarkInformer_applyUpdate; see docs/reliability.md).
	// Default (DetectInTests): on in test binaries, off in programs,
	// unless the environment variable MutationDetectorEnv says otherwise.
	DetectMutations Detection
	// OnMutation receives each mutation found, a *MutationError, from the
	// informer's goroutines. Default: panic with it, which fails the test
	// binary with the error (objects and fields) as the panic's message;
	// a test may set it to record the error and fail with t.Error instead.
	OnMutation func(error)
	// Snapshots turns on warm restarts for every informer a Factory
	// creates (see Snapshot); an informer made with New uses
	// Options.Snapshot instead. Default: off.
	Snapshots SnapshotOptions
	// Telemetry: the Logger receives handler panics and cache errors, the
	// Registerer the informer's and its reflector's metrics.
	telemetry.Telemetry
}

// SnapshotOptions configure the snapshots of a Factory's informers: each
// informer writes its cache to a file of its own in Dir, named after its
// Scope, with an identity made of Cluster, Server and the Scope.
type SnapshotOptions struct {
	// Dir is the directory of the snapshot files, which must survive a
	// restart; "" turns snapshots off. It is created (0700) when missing.
	// When it is this process's user's and no one else can write it, the
	// files are kept there; when other users can write it (an emptyDir
	// volume's mount point, /tmp), in a private folder "ctrlkit-<uid>"
	// made inside it; otherwise every informer starts cold, saying why,
	// and writes nothing there (see snapshot.PrepareDir).
	Dir string
	// Cluster returns the cluster's identity (the manager uses the UID of
	// the kube-system namespace), called once, at the first informer's
	// Run. An error makes every informer start cold, naming it. Required
	// with Dir.
	Cluster func(context.Context) (string, error)
	// Server is the API server's address, part of the identity.
	Server string
	// Interval is how often each informer writes its cache; see
	// Snapshot.Interval.
	Interval time.Duration
	// Secrets lets informers of core Secrets (their full type or a
	// projection) write and read snapshots too. Off by default: a
	// snapshot would put the Secrets' data on the node's disk (an
	// emptyDir is disk-backed), where the kubelet keeps the Secrets it
	// mounts in memory; such an informer lists at every start, saying so
	// (CacheStart).
	Secrets bool
}

// secretsOff is the cold start's reason of an informer of Secrets with
// snapshots in a directory that does not take them.
const secretsOff = "Secrets are not snapshotted (FactoryOptions.Snapshots.Secrets)"

// takes reports whether the snapshots take the informer of scope.
func (o SnapshotOptions) takes(scope Scope) bool {
	return o.Secrets || scope.Resource.Group != "" || scope.Resource.Resource != "secrets"
}

// snapshotFor returns the Snapshot options of the informer of scope.
func (o SnapshotOptions) snapshotFor(scope Scope) (string, snapshot.Identity) {
	name := scope.String()
	sum := sha256.Sum256([]byte(name))
	file := strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, name)
	if len(file) > 80 {
		file = file[:80]
	}
	id := snapshot.Identity{Server: o.Server, Group: scope.Resource.Group, Version: scope.Resource.Version,
		Resource: scope.Resource.Resource, Namespace: scope.Namespace,
		LabelSelector: scope.LabelSelector, FieldSelector: scope.FieldSelector} // a projection differs by Type
	return filepath.Join(o.Dir, fmt.Sprintf("%s-%x.snap", file, sum[:4])), id
}

// Factory shares one informer per resource, namespace and selector between
// the controllers of a process, so each is listed, watched and cached once.
// Get informers with For, Run the factory, and WaitForCacheSync. Safe for
// concurrent use.
type Factory struct {
	opts FactoryOptions

	// mu guards informers and stopped; wake (buffer 1) tells Run that For
	// added an informer.
	mu        sync.Mutex
	informers map[Scope]*shared
	once      run.Once
	stopped   bool
	wake      chan struct{}
	cluster   func(context.Context) (string, error) // Snapshots.Cluster, called once
}

// Scope identifies one shared informer: what it lists and watches. Callers
// asking for an equal Scope share one informer.
type Scope struct {
	// Resource is the resource, e.g. {Group: "apps", Version: "v1",
	// Resource: "deployments"}.
	Resource schema.GroupVersionResource
	// Namespace limits the informer to one namespace; "" is every
	// namespace (and the only choice for a cluster-scoped resource).
	Namespace string
	// LabelSelector and FieldSelector filter on the server; "" selects
	// everything. Their syntax is the API's (labels.Parse, fields.Parse).
	LabelSelector string
	FieldSelector string
	// As names the projection the informer decodes the resource into
	// (see listwatch.Projected), e.g. "PodView"; "" for the full type.
	// An informer of a projection is another informer than the full
	// type's of the same resource.
	As string
}

// String names the scope in logs, metrics and errors:
// "deployments.apps/v1 in namespace web where app=x", "pods/v1 as PodView".
func (s Scope) String() string {
	name := s.Resource.Resource
	if s.Resource.Group != "" {
		name += "." + s.Resource.Group
	}
	name += "/" + s.Resource.Version
	if s.As != "" {
		name += " as " + s.As
	}
	if s.Namespace != "" {
		name += " in namespace " + s.Namespace
	}
	sel := s.LabelSelector
	if s.FieldSelector != "" {
		sel = strings.TrimPrefix(sel+","+s.FieldSelector, ",")
	}
	if sel != "" {
		name += " where " + sel
	}
	return name
}

// shared is the type-erased view of one informer the Factory needs.
type shared struct {
	name    string
	inf     any // *SharedIndexInformer[T]
	run     func(context.Context) error
	synced  <-chan struct{}
	lastErr func() error
	stats   func() reflector.Stats // the reflector's: a short lock, no encoding
	start   func() CacheStart
	close   func() // the informer's Close
	started bool
	cancel  context.CancelFunc // once started: stops it
	done    chan struct{}      // once started: closed when its Run returned
}

// NewFactory returns an empty Factory; it starts nothing.
func NewFactory(opts FactoryOptions) *Factory {
	f := &Factory{opts: opts, informers: map[Scope]*shared{}, wake: make(chan struct{}, 1)}
	if c := opts.Snapshots.Cluster; c != nil {
		f.cluster = onceCluster(c)
	}
	return f
}

// onceCluster calls c once, with the first caller's context; every caller
// gets its answer.
func onceCluster(c func(context.Context) (string, error)) func(context.Context) (string, error) {
	var (
		mu   sync.Mutex
		done bool
		id   string
		err  error
	)
	return func(ctx context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			id, err = c(ctx)
			done = ctx.Err() == nil // a call cut short by ctx is tried again
		}
		return id, err
	}
}

// For returns the informer of scope, creating it with a ListerWatcher from
// newLW on first use. Every caller gets the same informer; asking again
// with another T fails with ErrTypeMismatch. An informer added while the
// factory runs starts at once; after Run returned, For fails with
// ErrStopped.
func For[T object.Object](f *Factory, scope Scope, newLW func() reflector.ListerWatcher[T]) (*SharedIndexInformer[T], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.informers[scope]; ok {
		inf, ok := s.inf.(*SharedIndexInformer[T])
		if !ok {
			var zero T
			return nil, fmt.Errorf("%w: %s is %T, not %T", ErrTypeMismatch, s.name, s.inf, zero)
		}
		return inf, nil
	}
	if f.stopped {
		return nil, fmt.Errorf("informer %s: %w", scope, ErrStopped)
	}
	name := scope.String()
	common := f.opts
	common.Reflector.Name = ""
	common.ShareMaps = common.ShareMaps || scope.As != ""
	opts := Options[T]{Name: name, FactoryOptions: common}
	so := f.opts.Snapshots
	secretsLeftOut := so.Dir != "" && !so.takes(scope)
	if so.Dir != "" && !secretsLeftOut {
		opts.Snapshot.Path, opts.Snapshot.Identity = so.snapshotFor(scope)
		opts.Snapshot.Interval, opts.Snapshot.Cluster = so.Interval, f.cluster
	}
	inf, err := New(newLW(), opts)
	if err != nil {
		return nil, err
	}
	if secretsLeftOut {
		inf.noSnapshot = secretsOff
	}
	f.informers[scope] = &shared{name: name, inf: inf, run: inf.Run, synced: inf.syncedC, lastErr: inf.LastError,
		stats: inf.refl.Stats, start: inf.CacheStart, close: inf.Close}
	select {
	case f.wake <- struct{}{}:
	default:
	}
	return inf, nil
}

// Run runs every informer of the factory, including those For adds while it
// runs, until ctx ends; it returns nil once all of them have exited. A
// second call returns ErrStarted.
func (f *Factory) Run(ctx context.Context) error {
	if err := f.once.Start("informer factory"); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		f.startPending(ctx, &wg)
		select {
		case <-ctx.Done():
			f.mu.Lock()
			f.stopped = true
			f.mu.Unlock()
			return nil
		case <-f.wake:
		}
	}
}

// startPending starts the informers not yet started.
func (f *Factory) startPending(ctx context.Context, wg *sync.WaitGroup) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.informers {
		if !s.started {
			s.started = true
			ictx, cancel := context.WithCancel(ctx)
			s.cancel, s.done = cancel, make(chan struct{})
			wg.Go(func() {
				defer close(s.done)
				if err := s.run(ictx); err != nil {
					f.opts.Log().Error("informer: run failed", "informer", s.name, "err", err)
				}
			})
		}
	}
}

// Remove stops the informer of scope and forgets it: its reflector and
// its handlers stop, its metrics are unregistered, and its cache goes with
// the last reference to it; the next For of scope makes a new informer. It
// returns once the informer's Run returned (at once if it never started),
// false when the factory has no informer of scope. Whoever still holds
// the informer reads a cache that no longer changes.
func (f *Factory) Remove(scope Scope) bool {
	f.mu.Lock()
	s, ok := f.informers[scope]
	delete(f.informers, scope)
	f.mu.Unlock()
	if !ok {
		return false
	}
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
	s.close()
	return true
}

// Status is one informer's state, as /readyz reports it.
type Status struct {
	Name string
	// Synced reports that the informer's first list was applied.
	Synced bool
	// Err is the last list or watch error (nil once one succeeded since),
	// explained as WaitForCacheSync explains it.
	Err error
	// FailingSince is when the lists and watches began to fail, zero
	// while the last one succeeded (reflector.Stats.FailingSince). It is
	// read before Err: a zero FailingSince with Err set is a failure that
	// began meanwhile.
	FailingSince time.Time
	// Start says whether the cache started warm, from a snapshot, or cold
	// and why.
	Start CacheStart
}

// Statuses returns the state of every informer of the factory, by name.
func (f *Factory) Statuses() []Status {
	f.mu.Lock()
	all := make([]*shared, 0, len(f.informers))
	for _, s := range f.informers {
		all = append(all, s)
	}
	f.mu.Unlock()
	out := make([]Status, 0, len(all))
	for _, s := range all {
		st := Status{Name: s.name, Start: s.start(), FailingSince: s.stats().FailingSince}
		select {
		case <-s.synced:
			st.Synced = true
		default:
		}
		if err := s.lastErr(); err != nil {
			st.Err = syncCause(context.Background(), s.name, err)
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// WaitForCacheSync blocks until every started informer has synced, and
// returns nil, or until ctx ends. Then it returns an error naming each
// informer that has not synced and why, from its last list or watch error:
// 403 Forbidden (with the verb and resource the server refused), resource
// not found (a missing CustomResourceDefinition or wrong version), or
// another error; and ctx's error when no informer reported one.
func (f *Factory) WaitForCacheSync(ctx context.Context) error {
	f.mu.Lock()
	all := make([]*shared, 0, len(f.informers))
	for _, s := range f.informers {
		all = append(all, s)
	}
	f.mu.Unlock()
	var errs []error
	for _, s := range all {
		select {
		case <-s.synced:
			continue
		case <-ctx.Done():
		}
		select {
		case <-s.synced: // both were ready
			continue
		default:
		}
		errs = append(errs, syncCause(ctx, s.name, s.lastErr()))
	}
	return errors.Join(errs...)
}

// syncFailure says why a cache did not sync. It unwraps to the informer's
// last error (a *reflector.Error), or to ctx's cause when there was none.
type syncFailure struct {
	msg string
	err error
}

func (e *syncFailure) Error() string { return e.msg }
func (e *syncFailure) Unwrap() error { return e.err }

// syncCause explains why the cache of informer name did not sync, from its
// reflector's last error.
func syncCause(ctx context.Context, name string, err error) error {
	prefix := "informer: cache of " + name + " did not sync: "
	var rerr *reflector.Error
	if !errors.As(err, &rerr) {
		if err == nil {
			err = context.Cause(ctx)
			return &syncFailure{msg: prefix + "no list or watch error reported: " + err.Error(), err: err}
		}
		return &syncFailure{msg: prefix + "last error: " + err.Error(), err: err}
	}
	var hint string
	switch rerr.Code {
	case http.StatusForbidden:
		hint = fmt.Sprintf("forbidden (403): the credentials may not %s it (grant the verb with RBAC): ", rerr.Op)
	case http.StatusNotFound:
		hint = "resource not found (404): is its CustomResourceDefinition installed and served at this version? "
	default:
		return &syncFailure{msg: prefix + "last error: " + rerr.Error(), err: err}
	}
	return &syncFailure{msg: prefix + hint + rerr.Err.Error(), err: err}
}
