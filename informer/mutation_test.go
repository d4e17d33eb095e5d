package informer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/object"
)

// mutations records what an informer's detector reports.
type mutations struct {
	mu   sync.Mutex
	errs []error
}

func (m *mutations) report(err error) {
	m.mu.Lock()
	m.errs = append(m.errs, err)
	m.mu.Unlock()
}

func (m *mutations) all() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]error(nil), m.errs...)
}

// detecting returns options that report mutations to m.
func detecting(m *mutations, d informer.Detection) informer.Options[*corev1.ConfigMap] {
	return informer.Options[*corev1.ConfigMap]{FactoryOptions: informer.FactoryOptions{DetectMutations: d, OnMutation: m.report}}
}

// runUntilStopped runs inf and returns a function that stops it and waits
// for Run to return.
func runUntilStopped(t *testing.T, inf *informer.SharedIndexInformer[*corev1.ConfigMap]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// cached returns the informer's cached object name, failing if it has none.
func cached(t *testing.T, inf *informer.SharedIndexInformer[*corev1.ConfigMap], name string) *corev1.ConfigMap {
	t.Helper()
	cm, ok := inf.Reader().Get(object.ObjectName{Namespace: "ns", Name: name})
	if !ok {
		t.Fatalf("ns/%s is not cached", name)
	}
	return cm
}

// wantOne checks that m holds exactly one *MutationError, about ns/name
// and path, and that its message names both.
func wantOne(t *testing.T, m *mutations, name, path string) {
	t.Helper()
	errs := m.all()
	if len(errs) != 1 {
		t.Fatalf("reported %d mutations, want 1: %v", len(errs), errs)
	}
	var me *informer.MutationError
	if !errors.As(errs[0], &me) || me.Name != (object.ObjectName{Namespace: "ns", Name: name}) || me.Kind != "*v1.ConfigMap" ||
		len(me.Changes) != 1 || me.Changes[0].Path != path {
		t.Fatalf("reported %#v, want ns/%s at %s", errs[0], name, path)
	}
	if msg := errs[0].Error(); !strings.Contains(msg, "ns/"+name) || !strings.Contains(msg, path) {
		t.Errorf("message %q names neither ns/%s nor %s", msg, name, path)
	}
}

func TestInformer_aWriteIntoACachedObjectIsReportedWithTheObjectAndTheField(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.ConfigMap)
		path   string
		then   func(srv *fakeServer, stop func())
	}{
		{"when the object is updated", func(cm *corev1.ConfigMap) { cm.Labels["app"] = "db" }, `.metadata.labels["app"]`,
			func(srv *fakeServer, _ func()) { srv.update("a", nil) }},
		{"when the object is deleted", func(cm *corev1.ConfigMap) { cm.Data["k"] = "changed" }, `.data["k"]`,
			func(srv *fakeServer, _ func()) { srv.remove("a") }},
		{"when a relist no longer lists it", func(cm *corev1.ConfigMap) { cm.Data["new"] = "x" }, `.data["new"]`,
			func(srv *fakeServer, _ func()) {
				srv.stall()
				srv.remove("a")
				srv.expireAndResume()
			}},
		{"when the informer stops", func(cm *corev1.ConfigMap) { cm.Labels["extra"] = "x" }, `.metadata.labels["extra"]`,
			func(_ *fakeServer, stop func()) { stop() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			srv := newFakeServer()
			srv.create("a", map[string]string{"k": "v"})
			srv.mu.Lock()
			srv.objs["a"].Labels = map[string]string{"app": "web"}
			srv.mu.Unlock()
			m := &mutations{}
			inf := newInformer(t, srv, detecting(m, informer.DetectInTests))
			stop := runUntilStopped(t, inf)
			waitFor(t, wait, "the cache to sync", inf.HasSynced)
			tc.mutate(cached(t, inf, "a")) // the bug: no DeepCopy
			tc.then(srv, stop)
			waitFor(t, wait, "the mutation to be reported", func() bool { return len(m.all()) > 0 })
			stop()
			wantOne(t, m, "a", tc.path)
		})
	}
}

// Under a long random run of creates, updates, deletes and relists after
// a compaction (some finding an object deleted and created again), with
// handlers reading every object (a coalescing backlog, a resync), nothing
// is reported and the handlers hear each object's life as it was (no
// update or delete across two UIDs); a write into the cache at the end
// still is.
// (Relists on request are left out: Relist can wait forever once the FIFO
// dropped a queued relist that the reflector counted as ended.)
func TestInformer_aLongRunOfChangesAndRelistsReportsNoMutation(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer()
	m := &mutations{}
	inf := newInformer(t, srv, detecting(m, informer.DetectAlways))
	plain, resyncing := newMirror(), newMirror()
	register(t, inf, plain, "plain", 0)
	register(t, inf, resyncing, "resyncing", 50*time.Millisecond)
	stop := runUntilStopped(t, inf)
	waitFor(t, wait, "the cache to sync", inf.HasSynced)
	rnd := rand.New(rand.NewPCG(1, 2))
	const keys, ops = 50, 3000
	for n := range ops {
		name := fmt.Sprintf("cm-%d", rnd.IntN(keys))
		_, exists := srv.state()[name]
		switch r := rnd.IntN(100); {
		case r < 2: // an outage: the object changes, or is deleted and created again
			srv.stall()
			if exists && r == 1 {
				srv.remove(name)
				srv.create(name, map[string]string{"n": fmt.Sprint(n)})
			} else {
				srv.update(name, map[string]string{"n": fmt.Sprint(n)})
			}
			srv.expireAndResume()
		case !exists:
			srv.create(name, map[string]string{"n": fmt.Sprint(n)})
		case r < 70:
			srv.update(name, map[string]string{"n": fmt.Sprint(n)})
		default:
			srv.remove(name)
		}
	}
	plain.waitForView(t, wait, srv.state)
	resyncing.waitForView(t, wait, srv.state)
	plain.check(t)
	resyncing.check(t)
	if errs := m.all(); len(errs) != 0 {
		t.Fatalf("reported %d mutations of a cache nobody wrote into: %v", len(errs), errs)
	}
	names := inf.Reader().Keys()
	if len(names) == 0 {
		t.Fatal("the run left nothing cached")
	}
	cm, _ := inf.Reader().Get(names[0])
	cm.Data["n"] = "written" // the detector is on: this is caught when Run returns
	stop()
	errs := m.all()
	var me *informer.MutationError
	if len(errs) != 1 || !errors.As(errs[0], &me) || me.Name != names[0] || me.Changes[0].Path != `.data["n"]` {
		t.Fatalf("after a write at the end, reported %v; want one mutation of %s at .data[\"n\"]", errs, names[0])
	}
}

func TestInformer_mutationsAreNotCheckedWhenDetectionIsOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    informer.Detection
		env  string
	}{
		{"by the option", informer.DetectNever, "1"},
		{"by the environment", informer.DetectInTests, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(informer.MutationDetectorEnv, tc.env)
			leakcheck.Check(t)
			srv := newFakeServer()
			srv.create("a", map[string]string{"k": "v"})
			m := &mutations{}
			inf := newInformer(t, srv, detecting(m, tc.d))
			h := newMirror()
			register(t, inf, h, "h", 0)
			stop := runUntilStopped(t, inf)
			waitFor(t, wait, "the cache to sync", inf.HasSynced)
			cached(t, inf, "a").Data["k"] = "changed"
			srv.update("a", nil)
			h.waitForView(t, wait, srv.state)
			stop()
			if errs := m.all(); len(errs) != 0 {
				t.Errorf("reported %v with detection off", errs)
			}
		})
	}
}

func TestNew_failsOnAnEnvironmentVariableItCannotRead(t *testing.T) {
	t.Setenv(informer.MutationDetectorEnv, "sometimes")
	_, err := informer.New(newFakeServer(), informer.Options[*corev1.ConfigMap]{})
	if err == nil || !strings.Contains(err.Error(), informer.MutationDetectorEnv+`="sometimes"`) {
		t.Errorf("New = %v, want an error naming %s", err, informer.MutationDetectorEnv)
	}
}

// envPanicChild makes the test binary run the body of
// TestInformer_byDefaultAMutationPanicsAndFailsTheTestBinary.
const envPanicChild = "CTRLKIT_TEST_MUTATION_PANIC_CHILD"

// By default a mutation panics: the test binary fails, and its output
// names the object and the field.
func TestInformer_byDefaultAMutationPanicsAndFailsTheTestBinary(t *testing.T) {
	if os.Getenv(envPanicChild) == "1" {
		srv := newFakeServer("a")
		inf := newInformer(t, srv, informer.Options[*corev1.ConfigMap]{})
		runUntilStopped(t, inf)
		waitFor(t, wait, "the cache to sync", inf.HasSynced)
		cached(t, inf, "a").Data = map[string]string{"x": "y"}
		srv.update("a", nil)
		select {} // the panic ends the process
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestInformer_byDefaultAMutationPanicsAndFailsTheTestBinary$", "-test.count=1")
	cmd.Env = append(os.Environ(), envPanicChild+"=1", informer.MutationDetectorEnv+"=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the child test binary: %v, want it to fail; output:\n%s", err, out)
	}
	want := `panic: informer *v1.ConfigMap: cached *v1.ConfigMap ns/a was modified in place (cached objects are shared and read-only: DeepCopy one before changing it): .data: nil -> map[x:y]`
	if !strings.Contains(string(out), want) {
		t.Errorf("the child's output lacks %q:\n%s", want, out)
	}
}
