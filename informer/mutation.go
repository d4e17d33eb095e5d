package informer

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ctrlkit/ctrlkit/object"
)

// Detection says when an informer checks that nobody writes into the objects
// it caches (see FactoryOptions.DetectMutations).
type Detection int

const (
	// DetectInTests, the default, checks in test binaries (those go test
	// builds, as testing.Testing reports) and not in programs, unless the
	// environment variable CTRLKIT_CACHE_MUTATION_DETECTOR says otherwise.
	DetectInTests Detection = iota
	// DetectAlways checks in every binary, whatever the environment says.
	DetectAlways
	// DetectNever never checks, whatever the environment says.
	DetectNever
)

// MutationDetectorEnv is the environment variable that turns the check on
// ("1", "true") or off ("0", "false") for informers left at DetectInTests,
// e.g. to run a program's end-to-end tests with it, or a slow test
// without it. Any other non-empty value makes New fail.
const MutationDetectorEnv = "CTRLKIT_CACHE_MUTATION_DETECTOR"

// MutationError reports a cached object that was changed in place: someone
// wrote into an object the informer handed out (from its Reader, a Lister,
// or a handler's arguments) instead of into a DeepCopy of it.
type MutationError struct {
	// Informer is the informer's name.
	Informer string
	// Kind is the object's kind when it carries one, else its Go type.
	Kind string
	// Name is the object's namespace and name.
	Name object.ObjectName
	// Changes are the fields that differ from the object as it was cached
	// (at most 8).
	Changes []FieldChange
}

func (e *MutationError) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "informer %s: cached %s %s was modified in place (cached objects are shared and read-only: DeepCopy one before changing it):",
		e.Informer, e.Kind, e.Name)
	for _, c := range e.Changes {
		fmt.Fprintf(&sb, " %s: %s -> %s;", c.Path, c.Was, c.Now)
	}
	return strings.TrimSuffix(sb.String(), ";")
}

// detectEnabled decides whether an informer checks for mutations, from its
// option, the environment variable's value and whether this is a test
// binary.
func detectEnabled(d Detection, env string, testBinary bool) (bool, error) {
	switch d {
	case DetectAlways:
		return true, nil
	case DetectNever:
		return false, nil
	case DetectInTests:
	default:
		return false, fmt.Errorf("informer: DetectMutations %d is not a Detection", d)
	}
	if env == "" {
		return testBinary, nil
	}
	on, err := strconv.ParseBool(env)
	if err != nil {
		return false, fmt.Errorf("informer: %s=%q: want 1, true, 0 or false", MutationDetectorEnv, env)
	}
	return on, nil
}

// cachedCopy is a cached object and the deep copy taken as it was cached.
type cachedCopy[T object.Object] struct {
	cached, copied T
	reported       atomic.Bool // a mutation of it was reported (once is enough)
}

// detector keeps a deep copy of every object the cache holds and compares
// the two when the object leaves the cache (replaced or deleted) and when
// the informer stops. It only ever reads the cached objects.
//
// There is no periodic sweep, on purpose: a goroutine reading every cached
// object now and then is ordered by nothing with the reconciler that wrote
// into one, so under -race each such write would also be reported as a
// data race with the detector. A replace or delete is checked on the
// informer's goroutine after the store's write lock was taken, which
// follows every earlier read of the cache (a reconciler that changed an
// object and read the cache again is ordered before it), and the last sweep
// follows the end of everything Run started (and, in the manager, of every
// controller). A nil *detector detects nothing and costs nothing.
type detector[T object.Object] struct {
	name   string
	copy   func(T) T
	report func(error)

	// mu guards entries and found. Invariant: entries[key].cached is the
	// object the cache holds under key.
	mu      sync.Mutex
	entries map[string]*cachedCopy[T]
	found   []error // detected under the informer's lock, reported after it
}

// newDetector returns the detector opts ask for, or nil when none: not
// enabled, or T is not a runtime.Object (then the informer logs that it
// cannot check).
func newDetector[T object.Object](opts Options[T]) (*detector[T], error) {
	on, err := detectEnabled(opts.DetectMutations, os.Getenv(MutationDetectorEnv), testing.Testing())
	if err != nil || !on {
		return nil, err
	}
	cp := copierOf[T]()
	if cp == nil {
		opts.Log().Warn("informer: cannot check for cache mutations: the type has no DeepCopyObject", "informer", opts.Name)
		return nil, nil
	}
	report := opts.OnMutation
	if report == nil {
		report = func(err error) { panic(err) }
	}
	return &detector[T]{name: opts.Name, copy: cp, report: report, entries: map[string]*cachedCopy[T]{}}, nil
}

// copierOf returns T's deep copy, DeepCopyObject; nil when T is not a
// runtime.Object. (Not the typed DeepCopy: a call through an interface
// naming it would keep every API type's DeepCopy in every program, about
// 0.7 MB, while DeepCopyObject is linked in anyway.)
func copierOf[T object.Object]() func(T) T {
	var zero T
	if _, ok := any(zero).(runtime.Object); !ok {
		return nil
	}
	return func(obj T) T { c, _ := any(obj).(runtime.Object).DeepCopyObject().(T); return c }
}

// stored records that the cache now holds obj under key, after checking
// the object it replaced. The informer's lock is held.
func (d *detector[T]) stored(key string, obj T) {
	if d == nil {
		return
	}
	c := &cachedCopy[T]{cached: obj, copied: d.copy(obj)}
	d.mu.Lock()
	defer d.mu.Unlock()
	if old := d.entries[key]; old != nil {
		d.checkLocked(key, old)
	}
	d.entries[key] = c
}

// removed records that the cache no longer holds key, after checking the
// object it held. The informer's lock is held.
func (d *detector[T]) removed(key string) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if old := d.entries[key]; old != nil {
		d.checkLocked(key, old)
		delete(d.entries, key)
	}
}

func (d *detector[T]) checkLocked(key string, c *cachedCopy[T]) {
	if err := d.check(key, c); err != nil {
		d.found = append(d.found, err)
	}
}

// check compares c's object with its copy, and returns a *MutationError if
// they differ and it was not reported yet.
func (d *detector[T]) check(key string, c *cachedCopy[T]) error {
	changes := diffObjects(c.cached, c.copied)
	if len(changes) == 0 || !c.reported.CompareAndSwap(false, true) {
		return nil
	}
	name, err := object.ParseObjectName(key)
	if err != nil {
		name = object.NameOf(c.copied)
	}
	return &MutationError{Informer: d.name, Kind: kindOf(c.copied), Name: name, Changes: changes}
}

// flush reports what was found under the informer's lock. The informer
// calls it with no lock held.
func (d *detector[T]) flush() {
	if d == nil {
		return
	}
	d.mu.Lock()
	found := d.found
	d.found = nil
	d.mu.Unlock()
	for _, err := range found {
		d.report(err)
	}
}

// sweep compares every cached object with its copy and reports each
// mutation. The objects are read without any lock held.
func (d *detector[T]) sweep() {
	if d == nil {
		return
	}
	d.flush()
	d.mu.Lock()
	keys := make([]string, 0, len(d.entries))
	all := make([]*cachedCopy[T], 0, len(d.entries))
	for k, c := range d.entries {
		keys = append(keys, k)
		all = append(all, c)
	}
	d.mu.Unlock()
	for n, c := range all {
		if err := d.check(keys[n], c); err != nil {
			d.report(err)
		}
	}
}

// kindOf names obj's kind: the one it carries, or its Go type.
func kindOf(obj any) string {
	if o, ok := obj.(runtime.Object); ok {
		if k := o.GetObjectKind().GroupVersionKind().Kind; k != "" {
			return k
		}
	}
	return fmt.Sprintf("%T", obj)
}
