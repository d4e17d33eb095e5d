package informer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sync"
	"time"

	"github.com/ctrlkit/ctrlkit/intern"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/snapshot"
)

// Snapshot configures one informer's warm restarts: the cache is written to
// a file at shutdown and every Interval, and the next Run starts from that
// file when it is of exactly what the informer watches, watching from its
// resource version instead of listing (see package snapshot for the file and
// reflector.ResumeWhileLoading for the resume, which the server confirms
// while the objects load).
//
// A snapshot is read at Run's start. When it is missing, of another
// identity, damaged, unreadable or untrusted (anything but a regular file
// of this process's user, in a directory only this user can write,
// written with that directory's key: see package snapshot), the informer
// starts cold (lists as usual) and Start says why without quoting the
// file (a Decode error is quoted as Decode wrote it); when the directory
// itself is refused, it also writes no snapshot there. The load ends when Run's context does. (An intact
// snapshot whose Decode refuses an object halfway starts cold too, after
// handlers heard of the objects before it as the initial list: the list
// that follows notifies every object it gives and deletes the others.)
// When it matches, its objects are cached and
// handed to handlers as the initial list (OnAdd with isInInitialList), and
// the informer watches from its version; it counts as synced once the
// server has accepted that version (an event or bookmark after it, or, on
// a quiet resource, the resuming watch ending cleanly after a second; the
// server is asked while the objects load). When the server no longer has
// the history after it (410 Gone), the informer relists and handlers hear
// only what changed against the snapshot: updates for objects whose
// resource version moved, adds for new ones, deletes for the vanished.
// When the snapshot is newer than the server (another etcd, a restore from
// backup), its versions mean nothing: every relisted object is notified
// as an update, as after a cold start.
//
// A snapshot is written only of a consistent cache: synced, not in the
// middle of a relist, with every event received applied (so the cache is
// exactly the server's state at its resource version). The view is taken
// on the informer's processing goroutine, which pauses for the time it
// takes to list the cache's pointers (the objects are shared read-only);
// encoding and writing happen on a goroutine of their own.
type Snapshot[T object.Object] struct {
	// Path is the snapshot file; "" turns snapshots off (the default).
	// Give each informer its own file (Factory does, in FactoryOptions.
	// Snapshots's directory). A missing directory is created (0700). When
	// it is this process's user's and no other user can write it, the file
	// is kept there; when others can write it (an emptyDir volume, /tmp),
	// in the private folder "ctrlkit-<uid>" made inside it; otherwise the
	// start is cold and no snapshot is written (see snapshot.PrepareDir).
	// The folder also holds the key that authenticates its snapshots
	// (snapshot.KeyFile).
	Path string
	// Identity says what the cache is of: the cluster (e.g. the UID of the
	// kube-system namespace), the server, the resource, namespace,
	// selectors and shard ranges. Type and Fingerprint default to T's (see
	// snapshot.Fingerprint): a change of the Go type's fields refuses the
	// snapshots written before it.
	Identity snapshot.Identity
	// Interval is how often the cache is written while the informer runs,
	// when it changed since the last write. Default: 5 minutes; negative:
	// at shutdown only.
	Interval time.Duration
	// Cluster, when set, fills Identity.Cluster at Run; an error makes the
	// informer start cold, naming it (and write no snapshot).
	Cluster func(context.Context) (string, error)
	// Encode and Decode turn an object into a snapshot record and back.
	// Default: protobuf for types with Marshal and Unmarshal methods
	// (client-go's built-in types), else JSON.
	Encode func(T) ([]byte, error)
	Decode func([]byte) (T, error)
}

// CacheStart says how an informer's cache started: warm, from a snapshot
// the server accepted, or cold, by listing, and why.
type CacheStart struct {
	// Warm is true when the cache started from a snapshot without listing.
	Warm bool
	// Reason says why the cache started cold, in a few words ("no snapshot
	// configured", "no snapshot yet", "snapshot of another Namespace",
	// "corrupt snapshot: ...", "untrusted snapshot: ...", "the server no
	// longer has resource version 123", ...); empty while the start is
	// undecided and for a warm start. It quotes no file's bytes (a Decode
	// error is quoted as Decode wrote it).
	Reason string
	// Objects is the number of objects the snapshot held, and
	// ResourceVersion its version, when one was loaded.
	Objects         int
	ResourceVersion string
	// Decided is false while the start is not known: before Run, and from
	// loading a snapshot until the server accepts or refuses its version.
	Decided bool
}

// String renders the start for logs and status pages: "warm (1000
// objects at resource version 123)", "cold: no snapshot yet", "pending".
func (s CacheStart) String() string {
	switch {
	case !s.Decided && s.Objects > 0:
		return fmt.Sprintf("pending (%d objects loaded at resource version %s)", s.Objects, s.ResourceVersion)
	case !s.Decided:
		return "pending"
	case s.Warm:
		return fmt.Sprintf("warm (%d objects at resource version %s)", s.Objects, s.ResourceVersion)
	}
	return "cold: " + s.Reason
}

// snapshots is an informer's snapshot state. The fields after mu are
// guarded by it; the others are set by New (identity's Cluster and path
// by loadSnapshot, before the reflector starts, so before any write) and
// read-only after.
type snapshots[T object.Object] struct {
	cfg      Snapshot[T]
	identity snapshot.Identity
	// path is the file read and written: cfg.Path, or its name in the
	// private folder snapshot.PrepareDir chose in cfg.Path's directory.
	path     string
	proto    *protoCodec[T] // the default codec, when protobuf
	interned bool           // Decode interns what it decodes (internWhileDecoding)
	// interrupt interrupts the processing loop's Pop once the FIFO is
	// empty: take a view (the FIFO's Interrupt).
	interrupt func()
	wg        sync.WaitGroup // periodic writes under way

	mu      sync.Mutex
	warm    warmStart // how the cache starts: the decision, a pure machine
	writing bool      // a write is under way (see wg)
	lastRV  string    // the resource version of the last snapshot written or loaded
	stats   SnapshotStats
}

// SnapshotStats are an informer's snapshot writes so far.
type SnapshotStats struct {
	Writes, Failures int
	// LastObjects, LastBytes, LastPause and LastDuration describe the
	// last write: objects, file size, the processing goroutine's pause to
	// take the view, and the time to encode, write and sync the file.
	LastObjects  int
	LastBytes    int64
	LastPause    time.Duration
	LastDuration time.Duration
	LastErr      error
}

// view is a consistent cache taken for a write.
type view[T object.Object] struct {
	objs []T
	rv   string
}

func newSnapshots[T object.Object](cfg Snapshot[T]) (*snapshots[T], error) {
	if cfg.Path == "" {
		return nil, nil
	}
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Minute
	}
	if (cfg.Encode == nil) != (cfg.Decode == nil) {
		return nil, errors.New("snapshot: set both Encode and Decode, or neither")
	}
	s := &snapshots[T]{cfg: cfg, identity: cfg.Identity, path: cfg.Path}
	if cfg.Encode == nil {
		if s.proto = newProtoCodec[T](); s.proto != nil {
			s.cfg.Encode, s.cfg.Decode = s.proto.encode, s.proto.decode
		} else {
			s.cfg.Encode, s.cfg.Decode = snapshot.JSON[T]()
		}
	}
	return s, nil
}

// protoCodec is the default codec for a T with Marshal and Unmarshal
// (client-go's types): protobuf. Other types' default is JSON.
type protoCodec[T object.Object] struct {
	elem reflect.Type // what T points to
}

type (
	marshaler   interface{ Marshal() ([]byte, error) }
	unmarshaler interface{ Unmarshal([]byte) error }
)

// newProtoCodec returns T's protobuf codec, nil if T has none.
func newProtoCodec[T object.Object]() *protoCodec[T] {
	var zero T
	t := reflect.TypeOf(zero)
	if t == nil || t.Kind() != reflect.Pointer {
		return nil
	}
	_, canMarshal := any(zero).(marshaler)
	_, canUnmarshal := any(zero).(unmarshaler)
	if !canMarshal || !canUnmarshal {
		return nil
	}
	return &protoCodec[T]{elem: t.Elem()}
}

func (c *protoCodec[T]) encode(obj T) ([]byte, error) { return any(obj).(marshaler).Marshal() }

func (c *protoCodec[T]) decode(b []byte) (T, error) {
	obj := c.new()
	return obj, any(obj).(unmarshaler).Unmarshal(b)
}

// new returns a new, zero object for decode to fill.
func (c *protoCodec[T]) new() T { return reflect.New(c.elem).Interface().(T) }

// internWhileDecoding makes s's protobuf codec intern each object as it
// decodes it, on the goroutines that decode the snapshot, each with a table
// of its own (kept between calls in a free list: a sync.Pool would drop
// them at each collection): the metadata as it is read (a namespace, label
// or annotation string the table holds is never allocated), the rest after
// (intern.Table's Body); the loader then interns nothing. Objects not laid
// out as encoders write them are decoded whole, then interned. It does
// nothing for a codec the caller gave, for JSON, or with shareMaps (the
// metadata decoder interns a map's strings but does not share maps whole).
func (s *snapshots[T]) internWhileDecoding(shareMaps bool) {
	if s == nil || s.proto == nil || shareMaps {
		return
	}
	free := make(chan *intern.Table, runtime.GOMAXPROCS(0)) // tables not in use
	s.cfg.Decode = func(b []byte) (T, error) {
		var t *intern.Table
		select {
		case t = <-free:
		default:
			t = intern.NewTable(0)
		}
		defer func() {
			select {
			case free <- t:
			default:
			}
		}()
		obj := s.proto.new()
		internAfter := t.Object
		if m := intern.MetaOf(obj); m != nil {
			if rest, ok := t.UnmarshalLeadingMeta(b, m, intern.ManagedFields{All: true}); ok {
				b, internAfter = rest, t.Body // the metadata is decoded and interned
			}
		}
		err := any(obj).(unmarshaler).Unmarshal(b)
		if err == nil {
			internAfter(any(obj))
		}
		return obj, err
	}
	s.interned = true
}

// loadSnapshot reads the snapshot and, when it is of what the informer
// watches, hands its objects to the FIFO as a relist held open and tells
// the reflector to resume from its version; otherwise the start is cold.
// It closes resume once the reflector may start: when the snapshot's
// header and checksum are verified and the reflector was told to resume
// while the objects load (it holds its first call to the FIFO until they
// are in), or when the start is cold.
func (i *SharedIndexInformer[T]) loadSnapshot(ctx context.Context, resume chan<- struct{}) {
	var once sync.Once
	letRun := func() { once.Do(func() { close(resume) }) }
	defer letRun()
	s := i.snap
	if err := s.resolve(ctx); err != nil {
		i.unusable(err.Error())
		return
	}
	if !i.prepareSnapshotDir() {
		return
	}
	// The objects go to the FIFO as a relist held open, batch by batch as
	// they decode, so the processing goroutine applies some while the next
	// decode. The reflector starts at once, probing the server and
	// watching from the snapshot's version, and touches the FIFO only once
	// all of them are in (ready).
	var rv string
	var ready func(error)
	objects, begun := 0, false
	err := snapshot.ReadEach(ctx, s.path, s.identity, s.cfg.Decode, func(version string, count int) error {
		if version == "" { // Write refuses one
			return fmt.Errorf("%w: no resource version", snapshot.ErrCorrupt)
		}
		rv, begun = version, true
		i.reserve(count)
		if err := i.fifo.BeginRelist(); err != nil {
			return err
		}
		var err error
		if ready, err = i.refl.ResumeWhileLoading(rv); err != nil {
			return err
		}
		letRun()
		return nil
	}, func(objs []T) error {
		if err := ctx.Err(); err != nil {
			return err // stopping: no need to read the rest
		}
		if i.table != nil && !s.interned {
			for _, obj := range objs {
				i.table.Object(any(obj))
			}
		}
		objects += len(objs)
		return i.fifo.RelistItems(objs)
	})
	if err != nil {
		i.startCold(ctx, err, begun, ready)
		return
	}
	s.mu.Lock()
	s.warm.loadedSnapshot(objects, rv)
	s.lastRV = rv
	s.mu.Unlock()
	i.log.Info("informer: resuming from snapshot", "informer", i.name, "objects", objects, "resourceVersion", rv)
	ready(nil)
}

// startCold ends a snapshot load that failed with err: begun when objects
// had gone to the FIFO, ready the reflector's, if it was told to resume.
func (i *SharedIndexInformer[T]) startCold(ctx context.Context, err error, begun bool, ready func(error)) {
	s := i.snap
	reason := coldReason(err)
	if begun {
		// What was applied stays, unsynced, and handlers heard of it as
		// the initial list; the list that follows settles it, telling
		// handlers of every object it lists (versions read from a
		// refused snapshot are not trusted to mean unchanged).
		i.fifo.AbandonRelist()
	}
	stopping := ctx.Err() != nil
	if !stopping {
		level := i.log.Warn
		if errors.Is(err, snapshot.ErrNotFound) {
			level = i.log.Info
		}
		level("informer: starting cold", "informer", i.name, "reason", reason, "path", s.path)
	}
	s.mu.Lock()
	s.warm.loadFailed(reason, begun, stopping)
	s.mu.Unlock()
	if ready != nil {
		ready(err) // after decide: the sync that follows must find the start cold
	}
}

// unusable starts cold for reason, writing no snapshot this run.
func (i *SharedIndexInformer[T]) unusable(reason string) {
	i.log.Warn("informer: starting cold, writing no snapshot", "informer", i.name, "reason", reason)
	i.snap.mu.Lock()
	defer i.snap.mu.Unlock()
	i.snap.warm.unusable(reason)
}

// prepareSnapshotDir creates the snapshot's directory if need be, checks
// it and sets the path of the file: in the directory, or in the private
// folder snapshot.PrepareDir chose in it. When another user could change
// what is there it decides a cold start, turns writes off (nothing is read
// from the directory or written into it) and reports false.
func (i *SharedIndexInformer[T]) prepareSnapshotDir() bool {
	s := i.snap
	dir, err := snapshot.PrepareDir(filepath.Dir(s.cfg.Path))
	switch {
	case errors.Is(err, snapshot.ErrUntrusted):
		i.unusable(coldReason(err))
		return false
	case err != nil: // the read and the writes fail too, saying why
		i.log.Warn("informer: snapshot directory unusable", "informer", i.name, "err", err)
	default:
		s.path = filepath.Join(dir, filepath.Base(s.cfg.Path))
	}
	return true
}

// coldReason says in a few words why a snapshot was refused.
func coldReason(err error) string {
	var mismatch *snapshot.MismatchError
	switch {
	case errors.Is(err, snapshot.ErrNotFound):
		return "no snapshot yet"
	case errors.As(err, &mismatch):
		return "snapshot of another " + mismatch.Field
	case errors.Is(err, snapshot.ErrCorrupt):
		return "corrupt snapshot: " + err.Error()
	case errors.Is(err, snapshot.ErrUntrusted):
		return "untrusted snapshot: " + err.Error()
	}
	return "snapshot unreadable: " + err.Error()
}

// resolve fills the identity's cluster, if it comes from Snapshot.Cluster.
// On failure, snapshots are off for this run.
func (s *snapshots[T]) resolve(ctx context.Context) error {
	if s.cfg.Cluster == nil {
		return nil
	}
	id, err := s.cfg.Cluster(ctx)
	if err == nil && id == "" {
		err = errors.New("empty")
	}
	if err != nil {
		return fmt.Errorf("cluster identity unknown: %w", err)
	}
	s.identity.Cluster = id
	return nil
}

// relistBegins is told, under the informer's lock, that a relist begins. It
// reports whether the relist must notify every object as changed (see
// warmStart.relistBegins).
func (s *snapshots[T]) relistBegins(resume reflector.Resume) (distrust bool) {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.warm.relistBegins(resume)
}

// relistEnds is told, under the informer's lock, that a relist ended and
// the informer is synced: the start is decided.
func (s *snapshots[T]) relistEnds(resume reflector.Resume) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.warm.relistEnds(resume)
}

// CacheStart says how the cache started: warm from a snapshot, or cold and why.
// Decided is false until the informer has synced. Safe for concurrent use.
func (i *SharedIndexInformer[T]) CacheStart() CacheStart {
	if i.snap == nil {
		return CacheStart{Reason: cmp.Or(i.noSnapshot, "no snapshot configured"), Decided: true}
	}
	i.snap.mu.Lock()
	defer i.snap.mu.Unlock()
	return i.snap.warm.start
}

// SnapshotStats returns the snapshot writes so far; zero without snapshots.
// Safe for concurrent use.
func (i *SharedIndexInformer[T]) SnapshotStats() SnapshotStats {
	if i.snap == nil {
		return SnapshotStats{}
	}
	i.snap.mu.Lock()
	defer i.snap.mu.Unlock()
	return i.snap.stats
}

// ticker interrupts the processing loop's Pop every Interval (a snapshot
// is due) until ctx ends.
func (s *snapshots[T]) ticker(ctx context.Context) {
	if s.cfg.Interval < 0 {
		return
	}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.mu.Lock()
			writing := s.writing
			s.mu.Unlock()
			if !writing {
				s.interrupt()
			}
		}
	}
}

// takeView returns the cache as it is, if it is consistent and changed
// since the last snapshot. It runs on the processing goroutine with the
// FIFO empty: every event received has been applied.
func (i *SharedIndexInformer[T]) takeView() (view[T], bool) {
	start := time.Now()
	i.mu.Lock()
	ok := i.synced && !i.relisting && i.held == nil
	var v view[T]
	if ok {
		v = view[T]{objs: i.idx.List(), rv: i.idx.ResourceVersion()}
	}
	i.mu.Unlock()
	s := i.snap
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok || s.warm.off || s.writing || v.rv == "" || v.rv == s.lastRV {
		return view[T]{}, false
	}
	s.writing = true
	s.stats.LastPause = time.Since(start)
	return v, true
}

// write writes v to the snapshot file and records how it went.
func (i *SharedIndexInformer[T]) write(v view[T]) {
	s := i.snap
	start := time.Now()
	err := snapshot.Write(s.path, s.identity, v.rv, v.objs, s.cfg.Encode)
	took := time.Since(start)
	var size int64
	if err == nil {
		size = fileSize(s.path)
	} else {
		i.log.Error("informer: snapshot write failed; the previous one stays", "informer", i.name, "path", s.path, "err", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writing = false
	s.stats.LastErr = err
	if err != nil {
		s.stats.Failures++
		return
	}
	s.lastRV = v.rv
	s.stats.Writes++
	s.stats.LastObjects, s.stats.LastBytes, s.stats.LastDuration = len(v.objs), size, took
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
