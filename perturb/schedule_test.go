package perturb

import (
	"context"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// A seed replays the same perturbations: the trials are drawn from it
// alone (and from the unperturbed run's count of writes).
func TestSchedule_aSeedReplaysTheSamePerturbations(t *testing.T) {
	s := Scenario{Seed: 42, Faults: Faults{StaleReads: []string{"secrets", "pods"}, Relists: []string{"configmaps"},
		Failovers: 2, CrashAtEveryWrite: true, ClusterCuts: 2, ExternalTimeouts: true, APIErrors: 2,
		Moments: []Moment{{Name: "ready", Stale: []string{"pods"}, Relist: []string{"pods"}}}},
		Clusters: map[string]*rest.Config{"east": {}, "west": {}, "north": {}}}.withDefaults()
	names := func(s Scenario, writes int) []string {
		var out []string
		for _, p := range s.schedule(writes, 2, []int{2}) {
			out = append(out, p.name)
		}
		return out
	}
	first := s.schedule(5, 2, []int{2})
	if again := s.schedule(5, 2, []int{2}); !slices.EqualFunc(first, again, samePerturbation) {
		t.Fatalf("seed 42 drew different trials twice, the second time:\n%s", strings.Join(names(s, 5), "\n"))
	}
	// 3 stale, 3 relist, 2 failovers, 2 cuts, 2 API errors, three kinds at
	// each of the moment's 2 occurrences, 2 external writes twice, 5 crashes.
	if got, want := len(first), 3+3+2+2+2+3*2+2*2+5; got != want {
		t.Fatalf("%d trials, want %d: %s", got, want, strings.Join(names(s, 5), "\n"))
	}
	for _, p := range first {
		for _, h := range p.holds {
			if h.d <= 0 || h.d > s.Faults.MaxHold {
				t.Errorf("%s: a span of %s, want within (0, %s]", p.name, h.d, s.Faults.MaxHold)
			}
		}
		if failover := strings.HasPrefix(p.name, "failover"); failover && (p.stallAt < 1 || p.stallAt > 5) || !failover && p.stallAt != 0 {
			t.Errorf("%s: stalls at write %d of 5", p.name, p.stallAt)
		}
		if api := strings.HasPrefix(p.name, "API error"); api && (p.errAt < 1 || p.errAt > 3 || p.errKind >= apiErrors) || !api && p.errAt != 0 {
			t.Errorf("%s: error %v at write %d of the 3 to the API server", p.name, p.errKind, p.errAt)
		}
		if at := strings.HasPrefix(p.name, "at moment"); at && (p.moment != 1 || p.occurrence < 1 || p.occurrence > 2 || p.atMoment == "") ||
			!at && p.moment != 0 {
			t.Errorf("%s: at occurrence %d of moment %d: %q", p.name, p.occurrence, p.moment, p.atMoment)
		}
		if ext := strings.HasPrefix(p.name, "external"); ext && p.dropCall+p.loseCall == 0 || p.dropCall > 2 || p.loseCall > 2 ||
			!ext && p.dropCall+p.loseCall > 0 {
			t.Errorf("%s: drops external write %d, loses %d's answer (of 2)", p.name, p.dropCall, p.loseCall)
		}
		if cut := strings.HasPrefix(p.name, "cluster cut"); cut && (s.Clusters[p.cut] == nil || p.cutAt < 0 || p.cutAt > s.Faults.MaxHold/2) ||
			!cut && p.cut != "" {
			t.Errorf("%s: cuts %q at %s", p.name, p.cut, p.cutAt)
		}
	}
	other := s
	other.Seed = 43
	if slices.EqualFunc(first, other.schedule(5, 2, []int{2}), samePerturbation) {
		t.Fatalf("seeds 42 and 43 drew the same trials:\n%s", strings.Join(names(other, 5), "\n"))
	}
	// Spans follow one another: each starts after the previous ended.
	for _, p := range first {
		for i := 1; i < len(p.holds); i++ {
			if prev := p.holds[i-1]; p.holds[i].at < prev.at+prev.d {
				t.Errorf("%s: span %d starts before span %d ends", p.name, i+1, i)
			}
		}
	}
	none := s.schedule(0, 0, []int{0})
	if len(none) != 3+3+2 || slices.ContainsFunc(none, func(p perturbation) bool { return p.stallAt > 0 || p.crashAfter > 0 }) {
		t.Fatalf("with no writes to stop at: %s", strings.Join(names(s, 0), "\n"))
	}
}

func samePerturbation(a, b perturbation) bool {
	return a.name == b.name && slices.Equal(a.holds, b.holds) && a.runFaults == b.runFaults && a.moment == b.moment && a.occurrence == b.occurrence && a.atMoment == b.atMoment &&
		a.resumeAfter == b.resumeAfter && a.cut == b.cut && a.cutAt == b.cutAt
}

// A scenario that cannot run fails at setup, saying why, before any trial.
func TestCheck_aScenarioThatCannotRunFailsAtSetup(t *testing.T) {
	noop := func(context.Context, Env) error { return nil }
	for _, c := range []struct {
		s    Scenario
		want string
	}{
		{Scenario{Run: noop, Workload: noop, Settled: noop}, "Config, Run, Workload and Settled are required"},
		{Scenario{Config: &rest.Config{Host: "127.0.0.1:1"}, Run: noop, Workload: noop, Settled: noop,
			Faults: Faults{StaleTrials: 2}}, "2 stale-read trials, but no resource in Faults.StaleReads"},
		{Scenario{Config: &rest.Config{Host: "127.0.0.1:1"}, Run: noop, Workload: noop, Settled: noop,
			Faults: Faults{RelistTrials: 1}}, "1 relist trials, but no resource in Faults.Relists"},
		{Scenario{Config: &rest.Config{Host: "127.0.0.1:1"}, Run: noop, Workload: noop, Settled: noop,
			Faults: Faults{Failovers: -1}}, "a negative duration or count"},
		{Scenario{Config: &rest.Config{Host: "127.0.0.1:1"}, Run: noop, Workload: noop, Settled: noop,
			Clusters: map[string]*rest.Config{"east": {Host: "127.0.0.1:1"}},
			Faults:   Faults{ClusterCuts: 1}}, "1 cluster-cut trials need two Clusters or more, not 1"},
		{Scenario{Config: &rest.Config{Host: "127.0.0.1:1"}, Run: noop, Workload: noop, Settled: noop,
			Faults: Faults{Moments: []Moment{{Name: "ready"}}}}, "Moments[0] needs a Name, a Watch and a When"},
	} {
		res := Check(t.Context(), c.s)
		if res.Trials != 0 || len(res.Failures) != 1 || res.Failures[0].Trial != "setup" ||
			!strings.Contains(res.Failures[0].Err.Error(), c.want) {
			t.Errorf("%+v: got %d trials, failures %v; want a setup failure saying %q", c.s.Faults, res.Trials, res.Err(), c.want)
		}
	}
}

// A controller's Run that returns the same error at every restart is said
// once, with the runs that returned it; different errors each once, in
// the order they first came.
func TestGroupRunErrors_saysARepeatedErrorOnceWithItsCount(t *testing.T) {
	var errs []runError
	for run := 1; run <= 291; run++ {
		errs = append(errs, runError{replica: "a", run: run, err: "no such kind Foo"})
		if run == 5 {
			errs = append(errs, runError{replica: "b", run: 1, err: "lease lost"})
		}
	}
	errs = append(errs, runError{replica: "a", run: 292, err: "another"})
	got := groupRunErrors(errs)
	want := "replica a, runs 1 to 291 (291 times): no such kind Foo; replica b, run 1: lease lost; replica a, run 292: another"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if groupRunErrors(nil) != "" {
		t.Error("no error: want an empty string")
	}
}
