package perturb

import (
	"slices"
	"strings"
	"testing"
)

// A seed replays the same perturbations: the trials are drawn from it
// alone (and from the unperturbed run's count of writes).
func TestSchedule_aSeedReplaysTheSamePerturbations(t *testing.T) {
	s := Scenario{Seed: 42, Faults: Faults{StaleReads: []string{"secrets", "pods"}, Relists: []string{"configmaps"},
		Failovers: 2, CrashAtEveryWrite: true}}.withDefaults()
	names := func(s Scenario, writes int) []string {
		var out []string
		for _, p := range s.schedule(writes) {
			out = append(out, p.name)
		}
		return out
	}
	first := s.schedule(5)
	if again := s.schedule(5); !slices.EqualFunc(first, again, samePerturbation) {
		t.Fatalf("seed 42 drew different trials twice, the second time:\n%s", strings.Join(names(s, 5), "\n"))
	}
	if got, want := len(first), 3+3+2+5; got != want {
		t.Fatalf("%d trials, want %d: %s", got, want, strings.Join(names(s, 5), "\n"))
	}
	for _, p := range first {
		for _, h := range p.holds {
			if h.d <= 0 || h.d > s.Faults.MaxHold {
				t.Errorf("%s: a span of %s, want within (0, %s]", p.name, h.d, s.Faults.MaxHold)
			}
		}
		if p.stallAt < 0 || p.stallAt > 5 {
			t.Errorf("%s: stalls at write %d of 5", p.name, p.stallAt)
		}
	}
	other := s
	other.Seed = 43
	if slices.EqualFunc(first, other.schedule(5), samePerturbation) {
		t.Fatalf("seeds 42 and 43 drew the same trials:\n%s", strings.Join(names(s, 5), "\n"))
	}
	// Spans follow one another: each starts after the previous ended.
	for _, p := range first {
		for i := 1; i < len(p.holds); i++ {
			if prev := p.holds[i-1]; p.holds[i].at < prev.at+prev.d {
				t.Errorf("%s: span %d starts before span %d ends", p.name, i+1, i)
			}
		}
	}
	none := s.schedule(0)
	if len(none) != 3+3 || slices.ContainsFunc(none, func(p perturbation) bool { return p.stallAt > 0 || p.crashAfter > 0 }) {
		t.Fatalf("with no writes to stop at: %s", strings.Join(names(s, 0), "\n"))
	}
}

func samePerturbation(a, b perturbation) bool {
	return a.name == b.name && slices.Equal(a.holds, b.holds) && a.crashAfter == b.crashAfter && a.stallAt == b.stallAt
}
