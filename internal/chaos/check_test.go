package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/ctrlkit/ctrlkit/internal/metrics"
)

// list returns a fresh LIST from the server as name -> resource version.
func list(t *testing.T, cms typedcorev1.ConfigMapInterface) (map[string]string, error) {
	l, err := cms.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(l.Items))
	for _, c := range l.Items {
		out[c.Name] = c.ResourceVersion
	}
	return out, nil
}

// problems returns what still differs from the end state the test demands,
// given a fresh LIST (server) and the names the driver deleted at least once:
//   - each handler's view equals the LIST, names and resource versions;
//   - the reconciler's last record of each live object is its resource
//     version, and of each key it recorded that is gone, deleted;
//   - each name deleted by the driver and absent at the end was seen deleted
//     by each handler (live event or tombstone), or never seen at all by it:
//     an object created and deleted while the handler's watch was down (a
//     restart, a stall) never reached it, and not hearing about it is correct.
func problems(ns string, server map[string]string, views []*view, rec *recorder, deletedByDriver map[string]bool) []string {
	var out []string
	for _, v := range views {
		objs, seen, gone := v.state()
		for _, name := range union(objs, server) {
			if objs[name] != server[name] {
				out = append(out, fmt.Sprintf("%s: %s at %q, server at %q", v.name, name, objs[name], server[name]))
			}
		}
		for name := range deletedByDriver {
			if _, live := server[name]; !live && seen[name] && !gone[name] {
				out = append(out, fmt.Sprintf("%s: %s seen, deleted, but never seen deleted", v.name, name))
			}
		}
	}
	last := rec.seen()
	for name, rv := range server {
		if got := last[ns+"/"+name]; got != rv {
			out = append(out, fmt.Sprintf("reconciler: %s last seen at %q, server at %s", name, got, rv))
		}
	}
	for key, rv := range last {
		name := strings.TrimPrefix(key, ns+"/")
		if _, live := server[name]; !live && rv != deleted {
			out = append(out, fmt.Sprintf("reconciler: %s gone, last seen at %s", name, rv))
		}
	}
	sort.Strings(out)
	return out
}

func union(a, b map[string]string) []string {
	keys := maps.Clone(a)
	maps.Copy(keys, b)
	return slices.Sorted(maps.Keys(keys))
}

// unless returns []string{problem} if ok is false.
func unless(ok bool, problem string) []string {
	if ok {
		return nil
	}
	return []string{problem}
}

// waitFor polls cond until it reports no problem, and fails the test with
// the last problems if d passes first.
func waitFor(t *testing.T, d time.Duration, what string, cond func() []string) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		ps := cond()
		if len(ps) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; %d problems, first: %s", d, what, len(ps),
				strings.Join(ps[:min(len(ps), 20)], "; "))
		}
		<-tick.C
	}
}

// sumMetric returns the sum of the series of the metric family name
// (counters and gauges) of one handler, or of all series if handler is "".
func sumMetric(t *testing.T, reg *prometheus.Registry, name string, handler string) float64 {
	t.Helper()
	var match map[string]string
	if handler != "" {
		match = map[string]string{"handler": handler}
	}
	v, err := metrics.Sum(reg, name, match)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func family(mfs []*dto.MetricFamily, name string) []*dto.Metric {
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// lagSampler records the largest age of a pending notification any handler
// had, sampled from ctrlkit_informer_handler_oldest_pending_seconds.
// mu guards max and who.
type lagSampler struct {
	reg *prometheus.Registry

	mu  sync.Mutex
	max float64
	who string
}

func (l *lagSampler) run(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		mfs, err := l.reg.Gather()
		if err != nil {
			continue
		}
		l.mu.Lock()
		for _, m := range family(mfs, "ctrlkit_informer_handler_oldest_pending_seconds") {
			if v := m.GetGauge().GetValue(); v > l.max {
				l.max, l.who = v, label(m, "handler")
			}
		}
		l.mu.Unlock()
	}
}

type summaryInput struct {
	d                     *driver
	f                     *faults
	reg                   *prometheus.Registry
	views                 []*view
	rec                   *recorder
	lag                   *lagSampler
	total, drove, settled time.Duration
}

func logSummary(t *testing.T, in summaryInput) {
	t.Helper()
	ops, deleted := in.d.summary()
	faults, _ := in.f.summary()
	var b strings.Builder
	fmt.Fprintf(&b, "summary: %s in all, %s driving, converged %s after the last write\n",
		in.total.Round(time.Second), in.drove.Round(time.Second), in.settled.Round(time.Millisecond))
	fmt.Fprintf(&b, "  operations answered: %d (%s); names deleted at least once: %d\n", in.d.ops.Load(), counts(ops), len(deleted))
	fmt.Fprintf(&b, "  faults: %s\n", counts(faults))
	fmt.Fprintf(&b, "  reflector: relists %v, watches %v (%s), lists %v\n",
		sumMetric(t, in.reg, "ctrlkit_reflector_relists_total", ""), sumMetric(t, in.reg, "ctrlkit_reflector_watches_total", ""),
		byLabel(t, in.reg, "ctrlkit_reflector_watches_total", "result"), sumMetric(t, in.reg, "ctrlkit_reflector_lists_total", ""))
	for _, v := range in.views {
		objs, seen, gone := v.state()
		v.mu.Lock()
		fmt.Fprintf(&b, "  handler %s: %d events, %d live, %d names seen, %d seen deleted (%d as final-state-unknown tombstones), %d panics\n",
			v.name, v.events, len(objs), len(seen), len(gone), v.tombstones, v.panics)
		v.mu.Unlock()
	}
	fmt.Fprintf(&b, "  panics recovered (metric): %v\n", sumMetric(t, in.reg, "ctrlkit_informer_handler_panics_total", ""))
	in.rec.mu.Lock()
	fmt.Fprintf(&b, "  reconciles: %d, injected failures: %d\n", in.rec.reconciles, in.rec.failures)
	in.rec.mu.Unlock()
	in.lag.mu.Lock()
	fmt.Fprintf(&b, "  maximum handler lag (oldest pending notification, sampled every 100ms): %.2fs (%s)", in.lag.max, in.lag.who)
	in.lag.mu.Unlock()
	t.Logf("%s", b.String())
}

// counts formats a map of counts in key order.
func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// byLabel formats the series of a counter family by one label's value.
func byLabel(t *testing.T, reg *prometheus.Registry, name, labelName string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, s := range family(mfs, name) {
		m[label(s, labelName)] += int(s.GetCounter().GetValue())
	}
	return counts(m)
}
