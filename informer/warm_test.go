package informer

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// The reflector's verdicts on a snapshot's resource version "5".
var (
	resumePending  = reflector.Resume{State: reflector.ResumePending, ResourceVersion: "5", Comparable: true}
	resumeAccepted = reflector.Resume{State: reflector.ResumeAccepted, ResourceVersion: "5", Comparable: true}
	resumeGone     = reflector.Resume{State: reflector.ResumeRefused, ResourceVersion: "5", Comparable: true,
		Err: apierrors.NewResourceExpired("too old resource version: 5 (9)")}
	resumeTooNew = reflector.Resume{State: reflector.ResumeRefused, ResourceVersion: "5",
		Err: errors.New("too large resource version")}
	resumeNone = reflector.Resume{}
)

// warmPhases builds a warmStart in each phase, as the driver gets there.
var warmPhases = []struct {
	name string
	make func() warmStart
}{
	{phasePending, func() warmStart { return warmStart{} }},
	{phaseLoaded, func() warmStart {
		var w warmStart
		w.loadedSnapshot(10, "5")
		w.relistBegins(resumePending) // the snapshot's own relist, met by the processing goroutine
		return w
	}},
	{phaseRefused, func() warmStart {
		var w warmStart
		w.loadedSnapshot(10, "5")
		w.relistBegins(resumePending)
		w.relistBegins(resumeGone) // the relist that supersedes it
		return w
	}},
	{"partial, before its relist", func() warmStart {
		var w warmStart
		w.loadFailed("corrupt snapshot: bad record", true, false)
		return w
	}},
	{"partial, after its relist", func() warmStart {
		var w warmStart
		w.relistBegins(resumePending) // the snapshot's own relist, met before the load failed
		w.loadFailed("corrupt snapshot: bad record", true, false)
		return w
	}},
	{phaseCold, func() warmStart {
		var w warmStart
		w.loadFailed("no snapshot yet", false, false)
		return w
	}},
	{phaseWarm, func() warmStart {
		var w warmStart
		w.loadedSnapshot(10, "5")
		w.relistBegins(resumePending)
		w.relistEnds(resumeAccepted)
		return w
	}},
}

// warmInputs is every input of the machine.
var warmInputs = []struct {
	name  string
	apply func(*warmStart) (distrust bool)
}{
	{"unusable", func(w *warmStart) bool { w.unusable("cluster identity unknown: no"); return false }},
	{"load failed", func(w *warmStart) bool { w.loadFailed("no snapshot yet", false, false); return false }},
	{"load failed halfway", func(w *warmStart) bool { w.loadFailed("corrupt snapshot: x", true, false); return false }},
	{"load stopped", func(w *warmStart) bool {
		w.loadFailed("snapshot unreadable: context canceled", true, true)
		return false
	}},
	{"loaded", func(w *warmStart) bool { w.loadedSnapshot(10, "5"); return false }},
	{"relist begins, pending", func(w *warmStart) bool { return w.relistBegins(resumePending) }},
	{"relist begins, accepted", func(w *warmStart) bool { return w.relistBegins(resumeAccepted) }},
	{"relist begins, 410", func(w *warmStart) bool { return w.relistBegins(resumeGone) }},
	{"relist begins, too new", func(w *warmStart) bool { return w.relistBegins(resumeTooNew) }},
	{"relist begins, no resume", func(w *warmStart) bool { return w.relistBegins(resumeNone) }},
	{"relist ends, accepted", func(w *warmStart) bool { w.relistEnds(resumeAccepted); return false }},
	{"relist ends, 410", func(w *warmStart) bool { w.relistEnds(resumeGone); return false }},
	{"relist ends, no resume", func(w *warmStart) bool { w.relistEnds(resumeNone); return false }},
}

// Every transition of the warm-start machine: each phase (as the driver
// gets there) under each input. reached says whether the driver can give
// that input in that phase (a snapshot is loaded once, before any relist
// ends); the rest pin down that the machine stays coherent anyway: a
// decided start is never undone by a relist, a warm start never carries a
// reason.
func TestWarmStart_everyTransition(t *testing.T) {
	type row struct {
		from, input, phase string
		distrust           bool
		reason             string
		off, reached       bool
	}
	table := []row{
		{"pending", "unusable", "cold", false, "cluster identity unknown: no", true, true},
		{"pending", "load failed", "cold", false, "no snapshot yet", false, true},
		{"pending", "load failed halfway", "partial", false, "corrupt snapshot: x", false, true},
		{"pending", "load stopped", "partial", false, "", false, true},
		{"pending", "loaded", "loaded", false, "", false, true},
		{"pending", "relist begins, pending", "pending", false, "", false, true},
		{"pending", "relist begins, accepted", "pending", false, "", false, true},
		{"pending", "relist begins, 410", "pending", false, "", false, true},
		{"pending", "relist begins, too new", "pending", false, "", false, true},
		{"pending", "relist begins, no resume", "pending", false, "", false, true},
		{"pending", "relist ends, accepted", "cold", false, "no snapshot loaded", false, false},
		{"pending", "relist ends, 410", "cold", false, "no snapshot loaded", false, false},
		{"pending", "relist ends, no resume", "cold", false, "no snapshot loaded", false, false},
		{"loaded", "unusable", "cold", false, "cluster identity unknown: no", true, false},
		{"loaded", "load failed", "cold", false, "no snapshot yet", false, false},
		{"loaded", "load failed halfway", "partial", false, "corrupt snapshot: x", false, false},
		{"loaded", "load stopped", "loaded", false, "", false, false},
		{"loaded", "loaded", "loaded", false, "", false, false},
		{"loaded", "relist begins, pending", "loaded", false, "", false, true},
		{"loaded", "relist begins, accepted", "loaded", false, "", false, true},
		{"loaded", "relist begins, 410", "refused", false, "the server no longer has resource version 5", false, true},
		{"loaded", "relist begins, too new", "refused", true, "the snapshot's resource version 5 is newer than the server's", false, true},
		{"loaded", "relist begins, no resume", "loaded", false, "", false, true},
		{"loaded", "relist ends, accepted", "warm", false, "", false, true},
		{"loaded", "relist ends, 410", "cold", false, "the server no longer has resource version 5", false, true},
		{"loaded", "relist ends, no resume", "cold", false, "the snapshot's resource version  was not confirmed", false, true},
		{"refused", "unusable", "cold", false, "cluster identity unknown: no", true, false},
		{"refused", "load failed", "cold", false, "no snapshot yet", false, false},
		{"refused", "load failed halfway", "partial", false, "corrupt snapshot: x", false, false},
		{"refused", "load stopped", "refused", false, "the server no longer has resource version 5", false, false},
		{"refused", "loaded", "loaded", false, "", false, false},
		{"refused", "relist begins, pending", "refused", false, "the server no longer has resource version 5", false, true},
		{"refused", "relist begins, accepted", "refused", false, "the server no longer has resource version 5", false, true},
		{"refused", "relist begins, 410", "refused", false, "the server no longer has resource version 5", false, true},
		{"refused", "relist begins, too new", "refused", true, "the snapshot's resource version 5 is newer than the server's", false, true},
		{"refused", "relist begins, no resume", "refused", false, "the server no longer has resource version 5", false, true},
		{"refused", "relist ends, accepted", "cold", false, "the server no longer has resource version 5", false, true},
		{"refused", "relist ends, 410", "cold", false, "the server no longer has resource version 5", false, true},
		{"refused", "relist ends, no resume", "cold", false, "the server no longer has resource version 5", false, true},
		{"partial, before its relist", "unusable", "partial", false, "cluster identity unknown: no", true, false},
		{"partial, before its relist", "load failed", "partial", false, "no snapshot yet", false, false},
		{"partial, before its relist", "load failed halfway", "partial", false, "corrupt snapshot: x", false, false},
		{"partial, before its relist", "load stopped", "partial", false, "corrupt snapshot: bad record", false, false},
		{"partial, before its relist", "loaded", "loaded", false, "", false, false},
		{"partial, before its relist", "relist begins, pending", "partial", false, "corrupt snapshot: bad record", false, true},
		{"partial, before its relist", "relist begins, accepted", "partial", false, "corrupt snapshot: bad record", false, true},
		{"partial, before its relist", "relist begins, 410", "partial", false, "corrupt snapshot: bad record", false, true},
		{"partial, before its relist", "relist begins, too new", "partial", false, "corrupt snapshot: bad record", false, true},
		{"partial, before its relist", "relist begins, no resume", "partial", false, "corrupt snapshot: bad record", false, true},
		{"partial, before its relist", "relist ends, accepted", "cold", false, "corrupt snapshot: bad record", false, true},
		{"partial, before its relist", "relist ends, 410", "cold", false, "corrupt snapshot: bad record", false, true},
		{"partial, before its relist", "relist ends, no resume", "cold", false, "corrupt snapshot: bad record", false, true},
		{"partial, after its relist", "unusable", "partial", false, "cluster identity unknown: no", true, false},
		{"partial, after its relist", "load failed", "partial", false, "no snapshot yet", false, false},
		{"partial, after its relist", "load failed halfway", "partial", false, "corrupt snapshot: x", false, false},
		{"partial, after its relist", "load stopped", "partial", false, "corrupt snapshot: bad record", false, false},
		{"partial, after its relist", "loaded", "loaded", false, "", false, false},
		{"partial, after its relist", "relist begins, pending", "cold", true, "corrupt snapshot: bad record", false, true},
		{"partial, after its relist", "relist begins, accepted", "cold", true, "corrupt snapshot: bad record", false, true},
		{"partial, after its relist", "relist begins, 410", "cold", true, "corrupt snapshot: bad record", false, true},
		{"partial, after its relist", "relist begins, too new", "cold", true, "corrupt snapshot: bad record", false, true},
		{"partial, after its relist", "relist begins, no resume", "cold", true, "corrupt snapshot: bad record", false, true},
		{"partial, after its relist", "relist ends, accepted", "cold", false, "corrupt snapshot: bad record", false, true},
		{"partial, after its relist", "relist ends, 410", "cold", false, "corrupt snapshot: bad record", false, true},
		{"partial, after its relist", "relist ends, no resume", "cold", false, "corrupt snapshot: bad record", false, true},
		{"cold", "unusable", "cold", false, "cluster identity unknown: no", true, false},
		{"cold", "load failed", "cold", false, "no snapshot yet", false, false},
		{"cold", "load failed halfway", "partial", false, "corrupt snapshot: x", false, false},
		{"cold", "load stopped", "partial", false, "no snapshot yet", false, false},
		{"cold", "loaded", "loaded", false, "", false, false},
		{"cold", "relist begins, pending", "cold", false, "no snapshot yet", false, true},
		{"cold", "relist begins, accepted", "cold", false, "no snapshot yet", false, true},
		{"cold", "relist begins, 410", "cold", false, "no snapshot yet", false, true},
		{"cold", "relist begins, too new", "cold", false, "no snapshot yet", false, true},
		{"cold", "relist begins, no resume", "cold", false, "no snapshot yet", false, true},
		{"cold", "relist ends, accepted", "cold", false, "no snapshot yet", false, true},
		{"cold", "relist ends, 410", "cold", false, "no snapshot yet", false, true},
		{"cold", "relist ends, no resume", "cold", false, "no snapshot yet", false, true},
		{"warm", "unusable", "cold", false, "cluster identity unknown: no", true, false},
		{"warm", "load failed", "cold", false, "no snapshot yet", false, false},
		{"warm", "load failed halfway", "partial", false, "corrupt snapshot: x", false, false},
		{"warm", "load stopped", "partial", false, "", false, false},
		{"warm", "loaded", "loaded", false, "", false, false},
		{"warm", "relist begins, pending", "warm", false, "", false, true},
		{"warm", "relist begins, accepted", "warm", false, "", false, true},
		{"warm", "relist begins, 410", "warm", false, "", false, true},
		{"warm", "relist begins, too new", "warm", false, "", false, true},
		{"warm", "relist begins, no resume", "warm", false, "", false, true},
		{"warm", "relist ends, accepted", "warm", false, "", false, true},
		{"warm", "relist ends, 410", "warm", false, "", false, true},
		{"warm", "relist ends, no resume", "warm", false, "", false, true},
	}
	seen := map[[2]string]bool{}
	for _, r := range table {
		seen[[2]string{r.from, r.input}] = true
	}
	for _, ph := range warmPhases {
		for _, in := range warmInputs {
			if !seen[[2]string{ph.name, in.name}] {
				t.Errorf("no row for %s under %q", ph.name, in.name)
			}
		}
	}
	phases := map[string]func() warmStart{}
	for _, ph := range warmPhases {
		phases[ph.name] = ph.make
	}
	inputs := map[string]func(*warmStart) bool{}
	for _, in := range warmInputs {
		inputs[in.name] = in.apply
	}
	reached := 0
	for _, r := range table {
		w := phases[r.from]()
		distrust := inputs[r.input](&w)
		if w.phase() != r.phase || distrust != r.distrust || w.start.Reason != r.reason || w.off != r.off {
			t.Errorf("%s under %q: phase %s, distrust %v, reason %q, off %v; want %s, %v, %q, %v",
				r.from, r.input, w.phase(), distrust, w.start.Reason, w.off, r.phase, r.distrust, r.reason, r.off)
		}
		if w.start.Warm && w.start.Reason != "" {
			t.Errorf("%s under %q: warm with a reason (%q)", r.from, r.input, w.start.Reason)
		}
		if w.phase() == phaseWarm || w.phase() == phaseCold { // partial may be undecided: a load cut short by stopping
			if !w.start.Decided {
				t.Errorf("%s under %q: phase %s but the start is not decided", r.from, r.input, w.phase())
			}
		}
		if r.reached {
			reached++
		}
	}
	t.Logf("%d transitions, %d of them reachable from the driver", len(table), reached)
}

// The paths the driver takes, end to end: a snapshot accepted (warm), a
// snapshot expired (cold, compared by version), one newer than the server
// (cold, distrusted), one abandoned halfway (cold, the next relist
// distrusted), none at all.
func TestWarmStart_paths(t *testing.T) {
	var warm warmStart
	warm.loadedSnapshot(40, "5")
	warm.relistBegins(resumePending)
	warm.relistEnds(resumeAccepted)
	if got := warm.start; !got.Warm || !got.Decided || got.Objects != 40 || got.String() != "warm (40 objects at resource version 5)" {
		t.Errorf("accepted: %v", got)
	}
	var gone warmStart
	gone.loadedSnapshot(40, "5")
	gone.relistBegins(resumePending)
	if gone.relistBegins(resumeGone) {
		t.Error("410: the relist distrusts versions it can compare")
	}
	gone.relistEnds(resumeGone)
	if got := gone.start; got.Warm || !strings.Contains(got.String(), "no longer has resource version 5") {
		t.Errorf("410: %v", got)
	}
	var tooNew warmStart
	tooNew.loadedSnapshot(40, "5")
	if !tooNew.relistBegins(resumeTooNew) {
		t.Error("a version newer than the server's: the relist trusts it")
	}
	var half warmStart
	half.relistBegins(resumePending)
	half.loadFailed("corrupt snapshot: x", true, false)
	if !half.relistBegins(resumeNone) {
		t.Error("a snapshot abandoned halfway: the next relist trusts its versions")
	}
	half.relistEnds(resumeNone)
	if half.phase() != phaseCold || half.start.Reason != "corrupt snapshot: x" {
		t.Errorf("abandoned: %s, %v", half.phase(), half.start)
	}
	var none warmStart
	none.loadFailed("no snapshot yet", false, false)
	none.relistBegins(resumeNone)
	none.relistEnds(resumeNone)
	if none.start.String() != "cold: no snapshot yet" {
		t.Errorf("none: %v", none.start)
	}
}
