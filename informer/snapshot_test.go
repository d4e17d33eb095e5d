package informer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/snapshot"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// heard records what a handler was told, as "add a (initial)", "update b",
// "delete c", in order per key.
type heard struct {
	mu     sync.Mutex
	events []string
	seen   map[string]string // the handler's view: name → resource version
}

func (h *heard) handler() handler.Handler[*corev1.ConfigMap] {
	return handler.Funcs[*corev1.ConfigMap]{
		AddFunc: func(obj *corev1.ConfigMap, initial bool) {
			s := "add " + obj.Name
			if initial {
				s += " (initial)"
			}
			h.note(s, obj.Name, obj.ResourceVersion)
		},
		UpdateFunc: func(_, obj *corev1.ConfigMap) { h.note("update "+obj.Name, obj.Name, obj.ResourceVersion) },
		DeleteFunc: func(d object.Deleted[*corev1.ConfigMap]) { h.note("delete "+d.Name.Name, d.Name.Name, "") },
	}
}

func (h *heard) note(s, name, rv string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, s)
	if h.seen == nil {
		h.seen = map[string]string{}
	}
	if rv == "" {
		delete(h.seen, name)
	} else {
		h.seen[name] = rv
	}
}

// view returns what the handler was told, replayed: each object's last
// version, without the deleted ones.
func (h *heard) view() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.seen)
}

// total returns how many events were heard.
func (h *heard) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

// counts returns how many events of each kind were heard ("add", "add
// (initial)", "update", "delete").
func (h *heard) counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, e := range h.events {
		kind, rest, _ := strings.Cut(e, " ")
		if strings.HasSuffix(rest, "(initial)") {
			kind += " (initial)"
		}
		out[kind]++
	}
	return out
}

func (h *heard) has(e string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.events {
		if x == e {
			return true
		}
	}
	return false
}

// countingLW counts what a ListerWatcher is asked: lists (a one-object
// probe of the server's resource version aside), and watches that stream
// the initial state (watch-list).
type countingLW struct {
	reflector.ListerWatcher[*corev1.ConfigMap]
	lists, probes, streams atomic.Int32
	probed                 chan struct{} // closed at the first probe, when not nil
	once                   sync.Once
}

func (c *countingLW) List(ctx context.Context, opts metav1.ListOptions) (reflector.List[*corev1.ConfigMap], error) {
	if opts.Limit == 1 && opts.ResourceVersion == "" {
		c.probes.Add(1)
		if c.probed != nil {
			c.once.Do(func() { close(c.probed) })
		}
	} else {
		c.lists.Add(1)
	}
	return c.ListerWatcher.List(ctx, opts)
}

func (c *countingLW) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		c.streams.Add(1)
	}
	return c.ListerWatcher.Watch(ctx, opts)
}

// warmRun runs one informer over cms with a snapshot at path until it has
// synced, then stops it (writing the snapshot) and reports what it did.
type warmRun struct {
	start  informer.CacheStart
	stats  informer.SnapshotStats
	heard  *heard
	lw     *countingLW
	cached map[string]string // name -> resource version
	// the metrics at the end: started warm, snapshots written (ok + error)
	warmMetric, writesMetric float64
}

// metricSum sums the samples of the metric named name.
func metricSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum
}

func runWarm(t *testing.T, cms typedcorev1.ConfigMapInterface, snap informer.Snapshot[*corev1.ConfigMap], during func()) warmRun {
	t.Helper()
	return runWarmWith(t, &countingLW{}, cms, snap, during)
}

// runWarmWith is runWarm with lw, whose ListerWatcher it sets.
func runWarmWith(t *testing.T, lw *countingLW, cms typedcorev1.ConfigMapInterface, snap informer.Snapshot[*corev1.ConfigMap], during func()) warmRun {
	t.Helper()
	lw.ListerWatcher = listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{})
	reg := prometheus.NewRegistry()
	inf, err := informer.New(lw, informer.Options[*corev1.ConfigMap]{Snapshot: snap,
		FactoryOptions: informer.FactoryOptions{Telemetry: telemetry.Telemetry{Registerer: reg}}})
	if err != nil {
		t.Fatal(err)
	}
	h := &heard{}
	if _, err := inf.AddEventHandler(h.handler(), informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	waitFor(t, wait, "the informer to sync", inf.HasSynced)
	if during != nil {
		during()
	}
	// Synced says the start state is in (the snapshot's, or a list's); what
	// changed since comes next on the watch: let it arrive before stopping.
	state := serverState(t, cms)
	waitFor(t, wait, "the cache and the handler to catch up with the server", func() bool {
		want, cached := state(), map[string]string{}
		for _, c := range inf.Reader().List("", nil) {
			cached[c.Name] = c.ResourceVersion
		}
		return maps.Equal(cached, want) && maps.Equal(h.view(), want)
	})
	r := warmRun{start: inf.CacheStart(), heard: h, lw: lw, cached: map[string]string{}}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.warmMetric = metricSum(t, reg, "ctrlkit_informer_cache_started_warm")
	r.writesMetric = metricSum(t, reg, "ctrlkit_informer_snapshot_writes_total")
	for _, c := range inf.Reader().List("", nil) {
		r.cached[c.Name] = c.ResourceVersion
	}
	r.stats = inf.SnapshotStats()
	return r
}

func TestInformer_warmRestartResumesFromTheSnapshotWithoutListing(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	cms := configMaps(t, srv.Config(), ns)
	w := newWriter(cms, 40)
	w.createAll(t)
	dir := filepath.Join(t.TempDir(), "cache") // created by the informer
	snap := informer.Snapshot[*corev1.ConfigMap]{Path: filepath.Join(dir, "cms.snap"),
		Identity: snapshot.Identity{Cluster: "test", Version: "v1", Resource: "configmaps", Namespace: ns}}

	cold := runWarm(t, cms, snap, nil)
	// The snapshot holds the cached objects: only this user may read it.
	for path, want := range map[string]os.FileMode{dir: 0o700, snap.Path: 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
	if cold.start.Warm || cold.start.Reason != "no snapshot yet" {
		t.Fatalf("first start: %v, want cold: no snapshot yet", cold.start)
	}
	if cold.stats.Writes != 1 || cold.stats.LastObjects != 40 || cold.stats.LastBytes == 0 {
		t.Fatalf("first run's snapshot writes: %+v, want one of 40 objects", cold.stats)
	}
	if cold.warmMetric != 0 || cold.writesMetric != 1 {
		t.Fatalf("first run's metrics: started warm %v, snapshots written %v; want 0 and 1", cold.warmMetric, cold.writesMetric)
	}

	// While no controller runs: one change, one delete, one create.
	ctx := t.Context()
	if _, err := cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-00001"}, Data: map[string]string{"v": "2"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "cm-00002", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	warm := runWarm(t, cms, snap, nil)
	if !warm.start.Warm || warm.start.Objects != 40 || warm.warmMetric != 1 {
		t.Fatalf("second start: %v (metric %v), want warm from 40 objects", warm.start, warm.warmMetric)
	}
	if l, s, p := warm.lw.lists.Load(), warm.lw.streams.Load(), warm.lw.probes.Load(); l != 0 || s != 0 || p != 1 {
		t.Fatalf("a warm start listed %d times, streamed %d times and probed %d, want one probe alone", l, s, p)
	}
	want := serverState(t, cms)()
	if !maps.Equal(warm.cached, want) {
		t.Fatalf("cache after a warm start:\n%v\nserver:\n%v", warm.cached, want)
	}
	// Handlers hear the snapshot as the initial list, then what changed:
	// what they were told is the server's state, and nothing more was said
	// (a slow handler may hear an object's initial add and its change as
	// one event: an informer's listener coalesces per key).
	got := warm.heard.counts()
	if !maps.Equal(warm.heard.view(), want) || warm.heard.total() > 40+3 || got["update"] > 1 || got["delete"] > 1 {
		t.Fatalf("handler heard %v (%v), its view differs from the server's or it heard more than the snapshot and 3 changes",
			got, warm.heard.events)
	}
}

func TestInformer_refusedSnapshotsRelistAndNotifyOnlyWhatChanged(t *testing.T) {
	leakcheck.Check(t)                                    // last: after the server (whose restart starts goroutines) has stopped
	srv := apiserver.StartForTest(t, apiserver.Options{}) // of its own: it compacts and restarts
	ns := srv.Namespace(t)
	cms := configMaps(t, srv.Config(), ns)
	w := newWriter(cms, 30)
	w.createAll(t)
	id := snapshot.Identity{Cluster: "test", Version: "v1", Resource: "configmaps", Namespace: ns}
	encode := func(c *corev1.ConfigMap) ([]byte, error) { return c.Marshal() }

	for _, tc := range []struct {
		name       string
		rv         func(listed string) string
		wantReason string
		// updates is how many of the 30 objects handlers hear as updates:
		// the one changed when the versions compare, all when they cannot.
		updates int
	}{
		{name: "410: history compacted", rv: func(listed string) string { return listed },
			wantReason: "the server no longer has resource version", updates: 1},
		{name: "a snapshot newer than the server", rv: func(string) string { return "999999999999" },
			wantReason: "newer than the server's", updates: 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := cms.List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			objs := make([]*corev1.ConfigMap, len(l.Items))
			for k := range l.Items {
				objs[k] = &l.Items[k]
			}
			path := filepath.Join(t.TempDir(), "cms.snap")
			if err := snapshot.Write(path, id, tc.rv(l.ResourceVersion), objs, encode); err != nil {
				t.Fatal(err)
			}
			// Changed since the snapshot: one update; then the history
			// after the snapshot is compacted away, and the server restarts
			// (its watch cache starts from now).
			cm := objs[0].DeepCopy()
			cm.Data = map[string]string{"n": tc.name}
			if _, err := cms.Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Compact(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := srv.Restart(t.Context()); err != nil {
				t.Fatal(err)
			}
			r := runWarm(t, cms, informer.Snapshot[*corev1.ConfigMap]{Path: path, Identity: id}, nil)
			if r.start.Warm || !strings.Contains(r.start.Reason, tc.wantReason) {
				t.Fatalf("start: %v, want cold naming %q", r.start, tc.wantReason)
			}
			got := r.heard.counts()
			want := serverState(t, cms)()
			// At most 30 initial adds and the updates (a slow handler may
			// hear an initial add and its update as one), and a view that
			// is the server's.
			if got["add (initial)"] != 30 || got["update"] > tc.updates || got["delete"] != 0 || !maps.Equal(r.heard.view(), want) {
				t.Fatalf("handler heard %v, want 30 initial adds and at most %d updates, its view the server's", got, tc.updates)
			}
			if !maps.Equal(r.cached, want) {
				t.Fatalf("cache:\n%v\nserver:\n%v", r.cached, want)
			}
		})
	}
}

func TestInformer_untrustedSnapshotsStartCold(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	cms := configMaps(t, srv.Config(), ns)
	w := newWriter(cms, 10)
	w.createAll(t)
	id := snapshot.Identity{Cluster: "test", Version: "v1", Resource: "configmaps", Namespace: ns}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.snap")
	if r := runWarm(t, cms, informer.Snapshot[*corev1.ConfigMap]{Path: good, Identity: id}, nil); r.stats.Writes != 1 {
		t.Fatalf("no snapshot written: %+v", r.stats)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	other := func(f func(*snapshot.Identity)) snapshot.Identity { o := id; f(&o); return o }
	for _, tc := range []struct {
		name   string
		id     snapshot.Identity
		file   func(path string)
		reason string
	}{
		{name: "another cluster", id: other(func(o *snapshot.Identity) { o.Cluster = "elsewhere" }), reason: "snapshot of another Cluster"},
		{name: "another namespace", id: other(func(o *snapshot.Identity) { o.Namespace = "x" }), reason: "snapshot of another Namespace"},
		{name: "other selectors", id: other(func(o *snapshot.Identity) { o.LabelSelector = "a=b" }), reason: "snapshot of another LabelSelector"},
		{name: "another schema", id: other(func(o *snapshot.Identity) { o.Fingerprint = "v2" }), reason: "snapshot of another Fingerprint"},
		{name: "truncated", id: id, file: func(p string) { write(t, p, data[:len(data)/2]) }, reason: "corrupt snapshot"},
		{name: "a flipped byte", id: id, file: func(p string) {
			bad := append([]byte(nil), data...)
			bad[len(bad)/2] ^= 0x40
			write(t, p, bad)
		}, reason: "corrupt snapshot"},
		{name: "unreadable", id: id, file: func(p string) { write(t, p, data); chmod(t, p, 0) }, reason: "snapshot unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".snap") // beside good.snap: its key holds
			if tc.file != nil {
				tc.file(path)
			} else {
				write(t, path, data)
			}
			reason := tc.reason
			if os.Geteuid() == 0 && tc.name == "unreadable" {
				t.Log("running as root: the file stays readable; checking a directory in its place instead")
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(path, 0o700); err != nil {
					t.Fatal(err)
				}
				reason = "untrusted snapshot: snapshot: untrusted: " + path + " is not a regular file (a directory)"
			}
			r := runWarm(t, cms, informer.Snapshot[*corev1.ConfigMap]{Path: path, Identity: tc.id}, nil)
			if r.start.Warm || !strings.Contains(r.start.Reason, reason) {
				t.Fatalf("start: %v, want cold: %s", r.start, reason)
			}
			if got := r.heard.counts(); got["add (initial)"] != 10 || len(got) != 1 {
				t.Fatalf("handler heard %v, want the 10 objects as a cold initial list", got)
			}
			if r.lw.lists.Load()+r.lw.streams.Load() == 0 {
				t.Fatal("a cold start did not list")
			}
		})
	}
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestInformer_aSnapshotThatCannotBeWrittenLosesNothing(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	cms := configMaps(t, srv.Config(), ns)
	w := newWriter(cms, 10)
	w.createAll(t)
	// The snapshot's directory is a file: every write fails, as on a full
	// or read-only disk.
	blocker := filepath.Join(t.TempDir(), "not-a-dir")
	write(t, blocker, []byte("x"))
	snap := informer.Snapshot[*corev1.ConfigMap]{Path: filepath.Join(blocker, "cms.snap"),
		Identity: snapshot.Identity{Cluster: "test", Version: "v1", Resource: "configmaps", Namespace: ns}}
	r := runWarm(t, cms, snap, nil)
	if r.start.Warm || !strings.Contains(r.start.Reason, "snapshot unreadable") {
		t.Errorf("start: %v, want cold, the snapshot unreadable", r.start)
	}
	if r.stats.Writes != 0 || r.stats.Failures != 1 || r.stats.LastErr == nil {
		t.Errorf("snapshot stats %+v, want one failed write with its error", r.stats)
	}
	if want := serverState(t, cms)(); !maps.Equal(r.cached, want) {
		t.Errorf("cache:\n%v\nserver:\n%v", r.cached, want)
	}
}

// Snapshots written while objects change are each exactly the server's
// state at their resource version (an exact LIST at that version).
func TestInformer_periodicSnapshotsAreConsistentUnderChanges(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	cms := configMaps(t, srv.Config(), ns)
	w := newWriter(cms, 60)
	w.createAll(t)
	path := filepath.Join(t.TempDir(), "cms.snap")
	id := snapshot.Identity{Cluster: "test", Version: "v1", Resource: "configmaps", Namespace: ns}
	snap := informer.Snapshot[*corev1.ConfigMap]{Path: path, Identity: id, Interval: 20 * time.Millisecond}
	protoDecode := func(b []byte) (*corev1.ConfigMap, error) {
		c := &corev1.ConfigMap{}
		return c, c.Unmarshal(b)
	}
	checked := map[string]bool{} // resource versions of the snapshots checked
	check := func() {
		rv, objs, err := snapshot.Read(t.Context(), path, id, protoDecode)
		if err != nil || checked[rv] {
			return // not written yet, or seen
		}
		checked[rv] = true
		l, err := cms.List(t.Context(), metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil {
			t.Fatalf("exact LIST at %s: %v", rv, err)
		}
		want, got := map[string]string{}, map[string]string{}
		for _, c := range l.Items {
			want[c.Name] = c.ResourceVersion
		}
		for _, c := range objs {
			got[c.Name] = c.ResourceVersion
		}
		if !maps.Equal(got, want) {
			t.Errorf("snapshot at %s:\n%v\nserver at %s:\n%v", rv, got, rv, want)
		}
	}
	runWarm(t, cms, snap, func() {
		for round := range 6 {
			w.do(t, 40, uint64(round))
			waitFor(t, wait, "a snapshot of the changes", func() bool {
				rv, _, err := snapshot.Read(t.Context(), path, id, protoDecode)
				return err == nil && !checked[rv]
			})
			check()
		}
	})
	check() // the one written at shutdown
	if len(checked) < 6 {
		t.Fatalf("checked %d distinct snapshots, want at least 6", len(checked))
	}
}

func TestInformer_shareMapsSharesEqualLabelMapsOnlyWhenAsked(t *testing.T) {
	cms, ns := twoLabelledConfigMaps(t, "informer-share-maps")
	for _, share := range []bool{false, true} {
		inf := realInformer(t, cms, informer.Options[*corev1.ConfigMap]{FactoryOptions: informer.FactoryOptions{ShareMaps: share}})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- inf.Run(ctx) }()
		waitFor(t, wait, "sync", inf.HasSynced)
		a, _ := inf.Reader().Get(object.ObjectName{Namespace: ns, Name: "a"})
		b, _ := inf.Reader().Get(object.ObjectName{Namespace: ns, Name: "b"})
		shared := fmt.Sprintf("%p", a.Labels) == fmt.Sprintf("%p", b.Labels)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if shared != share || a.Labels["app"] != "web" || b.Labels["tier"] != "front" {
			t.Errorf("ShareMaps %t: labels shared %t (%v, %v)", share, shared, a.Labels, b.Labels)
		}
	}
}

// A snapshot hands its objects over batch by batch as they decode; one that
// fails to decode halfway (intact bytes the decoder refuses) starts cold:
// the list that follows deletes what the batches before the failure added
// and nothing of the snapshot is served as synced.
func TestInformer_aSnapshotThatFailsToDecodeHalfwayStartsColdAndSettles(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	cms := configMaps(t, srv.Config(), ns)
	w := newWriter(cms, 10)
	w.createAll(t)
	list, err := cms.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The snapshot: the 10 real objects, then 590 that the server never had.
	objs := make([]*corev1.ConfigMap, 0, 600)
	for i := range list.Items {
		objs = append(objs, &list.Items[i])
	}
	for i := len(objs); i < 600; i++ {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("ghost-%03d", i),
			ResourceVersion: list.ResourceVersion}})
	}
	id := snapshot.Identity{Cluster: "test", Version: "v1", Resource: "configmaps", Namespace: ns}
	path := filepath.Join(t.TempDir(), "cms.snap")
	encode := func(c *corev1.ConfigMap) ([]byte, error) { return c.Marshal() }
	if err := snapshot.Write(path, id, list.ResourceVersion, objs, encode); err != nil {
		t.Fatal(err)
	}
	decode := func(b []byte) (*corev1.ConfigMap, error) {
		c := new(corev1.ConfigMap)
		if err := c.Unmarshal(b); err != nil {
			return nil, err
		}
		if c.Name == "ghost-550" {
			return nil, errors.New("refused")
		}
		return c, nil
	}
	r := runWarm(t, cms, informer.Snapshot[*corev1.ConfigMap]{Path: path, Identity: id, Encode: encode, Decode: decode}, nil)
	if r.start.Warm || !strings.Contains(r.start.Reason, "object 550 of 600") {
		t.Fatalf("start: %v, want cold naming object 550", r.start)
	}
	if len(r.cached) != 10 {
		t.Fatalf("cache holds %d objects after the sync, want the server's 10", len(r.cached))
	}
	for name := range r.cached {
		if strings.HasPrefix(name, "ghost-") {
			t.Fatalf("cache holds %s, which only the refused snapshot had", name)
		}
	}
	t.Logf("the handler heard %v", r.heard.counts())
	// What the handler was told, replayed: the server's 10 objects. (A
	// ghost's add and delete may have coalesced into nothing.)
	view := map[string]bool{}
	r.heard.mu.Lock()
	for _, e := range r.heard.events {
		kind, rest, _ := strings.Cut(e, " ")
		name, _, _ := strings.Cut(rest, " ")
		view[name] = kind != "delete"
	}
	r.heard.mu.Unlock()
	for name, present := range view {
		if present != (r.cached[name] != "") {
			t.Errorf("the handler was last told %s is present=%t; the cache says %t", name, present, !present)
		}
	}
	for name := range r.cached {
		if !view[name] {
			t.Errorf("the handler never heard of %s", name)
		}
	}
}

// TestInformer_theServerConfirmsTheSnapshotWhileItLoads: the reflector
// probes the server (and watches from the snapshot's version) while the
// snapshot's objects are still decoding, instead of after: a decode that
// waits for the probe completes, and the start is warm.
func TestInformer_theServerConfirmsTheSnapshotWhileItLoads(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	cms := configMaps(t, srv.Config(), ns)
	w := newWriter(cms, 20)
	w.createAll(t)
	snap := informer.Snapshot[*corev1.ConfigMap]{Path: filepath.Join(t.TempDir(), "cms.snap"),
		Identity: snapshot.Identity{Cluster: "test", Version: "v1", Resource: "configmaps", Namespace: ns}}
	if cold := runWarm(t, cms, snap, nil); cold.start.Warm || cold.stats.Writes != 1 {
		t.Fatalf("first start: %v, %d snapshot writes; want cold and one", cold.start, cold.stats.Writes)
	}
	lw := &countingLW{probed: make(chan struct{})}
	snap.Encode = func(c *corev1.ConfigMap) ([]byte, error) { return c.Marshal() }
	snap.Decode = func(b []byte) (*corev1.ConfigMap, error) {
		c := new(corev1.ConfigMap)
		if err := c.Unmarshal(b); err != nil {
			return nil, err
		}
		if c.Name == "cm-00010" { // halfway through the snapshot
			select {
			case <-lw.probed:
			case <-time.After(time.Minute): // a bound, not a synchronisation: fails the load
				return nil, errors.New("no probe while the snapshot loaded")
			}
		}
		return c, nil
	}
	warm := runWarmWith(t, lw, cms, snap, nil)
	if !warm.start.Warm || warm.start.Objects != 20 {
		t.Fatalf("second start: %v, want warm from 20 objects", warm.start)
	}
	if want := serverState(t, cms)(); !maps.Equal(warm.cached, want) {
		t.Fatalf("cache after a warm start:\n%v\nserver:\n%v", warm.cached, want)
	}
}

// A warm start's objects are interned as a cold start's are: the default
// protobuf codec interns while it decodes (repeated label values and data
// keys share one string), DisableInterning interns nothing, and ShareMaps
// shares equal label maps whole; every object decodes to the server's.
func TestInformer_aWarmStartInternsAsAColdStartDoes(t *testing.T) {
	cms, ns := twoLabelledConfigMaps(t, "informer-warm-interns")
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	for _, tc := range []struct {
		name             string
		opts             informer.FactoryOptions
		interned, shared bool
	}{
		{"default", informer.FactoryOptions{}, true, false},
		{"DisableInterning", informer.FactoryOptions{DisableInterning: true}, false, false},
		{"ShareMaps", informer.FactoryOptions{ShareMaps: true}, true, true},
	} {
		snap := informer.Snapshot[*corev1.ConfigMap]{Path: filepath.Join(t.TempDir(), "cms.snap"),
			Identity: snapshot.Identity{Cluster: "test", Version: "v1", Resource: "configmaps", Namespace: ns}}
		var a, b *corev1.ConfigMap
		for run := range 2 { // cold, writing the snapshot; then warm from it
			inf := realInformer(t, cms, informer.Options[*corev1.ConfigMap]{Snapshot: snap, FactoryOptions: tc.opts})
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error)
			go func() { done <- inf.Run(ctx) }()
			waitFor(t, wait, "sync", inf.HasSynced)
			a, _ = inf.Reader().Get(object.ObjectName{Namespace: ns, Name: "a"})
			b, _ = inf.Reader().Get(object.ObjectName{Namespace: ns, Name: "b"})
			start := inf.CacheStart()
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if start.Warm != (run == 1) {
				t.Fatalf("%s, run %d: %v", tc.name, run, start)
			}
		}
		for _, o := range []*corev1.ConfigMap{a, b} {
			want, err := cms.Get(t.Context(), o.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if o.ResourceVersion != want.ResourceVersion || !maps.Equal(o.Labels, want.Labels) || !maps.Equal(o.Data, want.Data) ||
				o.Namespace != ns || o.UID != want.UID {
				t.Errorf("%s: warm %s = %+v, server has %+v", tc.name, o.Name, o, want)
			}
		}
		var aKey, bKey string
		for k := range a.Data {
			aKey = k
		}
		for k := range b.Data {
			bKey = k
		}
		interned := same(a.Labels["app"], b.Labels["app"]) && same(aKey, bKey) && same(a.Namespace, b.Namespace)
		shared := fmt.Sprintf("%p", a.Labels) == fmt.Sprintf("%p", b.Labels)
		if interned != tc.interned || shared != tc.shared {
			t.Errorf("%s: warm objects' strings interned %v, label maps shared %v; want %v, %v", tc.name, interned, shared, tc.interned, tc.shared)
		}
	}
}

// twoLabelledConfigMaps creates ConfigMaps a and b in namespace ns, with
// equal labels and one data key each (value: the name). The namespace has
// the fixed name it is given, not srv.Namespace's random one, as the tests
// check which strings the informer's lossy intern table shares (a random
// name whose hash crowds the pair of slots of two checked strings makes
// them miss in turn, now and then); it is made when missing, and a and b of
// a run before are deleted.
func twoLabelledConfigMaps(t *testing.T, ns string) (typedcorev1.ConfigMapInterface, string) {
	t.Helper()
	srv := env.Get(t)
	leakcheck.Check(t)
	cs := apiserver.Client(t, srv.Config()) // its idle connections closed before the leak check
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cms := cs.CoreV1().ConfigMaps(ns)
	remove := func() {
		for _, name := range []string{"a", "b"} {
			if err := cms.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		}
	}
	remove()
	t.Cleanup(remove)
	for _, name := range []string{"a", "b"} {
		if _, err := cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"app": "web", "tier": "front"}}, Data: map[string]string{"config.yaml": name}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return cms, ns
}
