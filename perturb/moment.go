package perturb

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
)

// Moment is a state the cluster reaches, at which a trial perturbs the
// controller (Faults.Moments): an owner whose child now exists, a
// condition set, an object deleted. A watch of the test's shows it, and
// the trial acts then: a hold lets through every event up to the moment's
// (by resource version) and stops the ones after, so the controller
// reads the state as it was at the moment. The controller's own watch
// shows the moment at about the same time as the test's: a controller
// that acts on it and hears back within those few milliseconds may have
// been given one later event before the hold begins.
type Moment struct {
	// Name says what the state is, e.g. "an owner's Secret exists".
	Name string
	// Watch opens the watch that shows the state, with the test's client:
	// e.Kube.CoreV1().Secrets(e.Namespace).Watch(ctx, metav1.ListOptions{}),
	// or a typed client over Kube's configuration for a custom resource.
	Watch func(ctx context.Context, env Env) (watch.Interface, error)
	// When says whether an event of that watch is the moment.
	When func(watch.Event) bool
	// Stale lists resources (e.g. "configmaps") whose watch streams a
	// trial holds back from the moment for Faults.MaxHold: the
	// controller reads them as they were then. Relist lists resources held
	// the same way and then cut, as after a compaction (their events of
	// the span coalesced). Each, when set, is a trial; a crash at the
	// moment always is.
	Stale, Relist []string
}

// What a trial does at a moment.
const (
	atMomentStale  = "stale reads" // Moment.Stale's streams held for MaxHold
	atMomentRelist = "a relist"    // Moment.Relist's streams held for MaxHold, then cut
	atMomentCrash  = "a crash"     // at the controller's next write, before it is sent
)

// momentTrials are the trials at moment i, at each of its occurrences in
// the unperturbed run (seen times): the seed has no say.
func (s Scenario) momentTrials(i, seen int) []perturbation {
	m := s.Faults.Moments[i]
	var kinds []string
	if len(m.Stale) > 0 {
		kinds = append(kinds, atMomentStale)
	}
	if len(m.Relist) > 0 {
		kinds = append(kinds, atMomentRelist)
	}
	kinds = append(kinds, atMomentCrash)
	var ps []perturbation
	for n := 1; n <= seen; n++ {
		for _, kind := range kinds {
			ps = append(ps, s.momentTrial(i, n, seen, kind))
		}
	}
	return ps
}

// momentTrial is the trial doing kind at occurrence n of moment i.
func (s Scenario) momentTrial(i, n, seen int, kind string) perturbation {
	m := s.Faults.Moments[i]
	name := fmt.Sprintf("at moment %q (%d of %d): %s", m.Name, n, seen, kind)
	switch kind {
	case atMomentStale:
		name += fmt.Sprintf(": %s held for %s", strings.Join(m.Stale, ", "), s.Faults.MaxHold)
	case atMomentRelist:
		name += fmt.Sprintf(": %s held for %s then relisted", strings.Join(m.Relist, ", "), s.Faults.MaxHold)
	case atMomentCrash:
		name += " before the controller's next write is sent"
	}
	return perturbation{name: name, moment: i + 1, occurrence: n, atMoment: kind}
}

// openMoments opens the watch of every moment of the scenario, before the
// workload begins: none of its occurrences is missed.
func (f *fleet) openMoments(ctx context.Context) ([]watch.Interface, error) {
	ws := make([]watch.Interface, 0, len(f.s.Faults.Moments))
	for _, m := range f.s.Faults.Moments {
		w, err := m.Watch(ctx, f.env)
		if err != nil {
			for _, w := range ws {
				w.Stop()
			}
			return nil, fmt.Errorf("moment %q: its watch: %w", m.Name, err)
		}
		ws = append(ws, w)
	}
	return ws, nil
}

// watchMoments counts the occurrences of every moment, on the watches
// openMoments opened, until ctx ends (into seen, for the unperturbed
// trial), and at occurrence p.occurrence of moment p.moment does what p
// says to the controller's latest run.
func (f *fleet) watchMoments(ctx context.Context, ws []watch.Interface, p perturbation, seen []int) {
	done := make(chan struct{}, len(ws))
	for i, m := range f.s.Faults.Moments {
		go func() {
			defer func() { done <- struct{}{} }()
			f.watchMoment(ctx, m, ws[i], func(ev watch.Event) {
				seen[i]++
				if p.moment == i+1 && seen[i] == p.occurrence {
					f.atMoment(ctx, p, versionOf(ev))
				}
			})
		}()
	}
	for range ws {
		<-done
	}
}

// watchMoment calls at for each event of w, m's watch, that is the moment,
// until ctx ends; a watch that ends is opened again.
func (f *fleet) watchMoment(ctx context.Context, m Moment, w watch.Interface, at func(watch.Event)) {
	for {
		select {
		case <-ctx.Done():
			w.Stop()
			return
		case ev, ok := <-w.ResultChan():
			if ok {
				if m.When(ev) {
					at(ev)
				}
				continue
			}
		}
		w.Stop() // it ended: open it again
		for {
			var err error
			if w, err = m.Watch(ctx, f.env); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// versionOf is the resource version of ev's object; 0 when it has none
// (a hold from it then stops every event).
func versionOf(ev watch.Event) uint64 {
	obj, err := meta.Accessor(ev.Object)
	if err != nil {
		return 0
	}
	rv, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		return 0
	}
	return rv
}

// atMoment perturbs the controller's latest run as p says, the moment's
// object being at resource version rv, and notes it in the trial's
// record. A hold stops the events after rv: what came up to the moment
// reaches the controller, what comes after does not.
func (f *fleet) atMoment(ctx context.Context, p perturbation, rv uint64) {
	t := f.latest()
	f.fired.Store(true)
	f.noteMoment(p.name)
	m := f.s.Faults.Moments[p.moment-1]
	resources, relist := m.Stale, false
	switch p.atMoment {
	case atMomentCrash:
		t.crashBeforeNextWrite()
		return
	case atMomentRelist:
		resources, relist = m.Relist, true
	}
	for _, r := range resources {
		t.holdAfter(r, rv)
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-time.After(f.s.Faults.MaxHold):
		}
		for _, r := range resources {
			if relist {
				t.relist(r)
			} else {
				t.release(r)
			}
		}
	}()
}

// noteMoment records what the trial did, in its record of the test's
// writes (a failure prints it in its place).
func (f *fleet) noteMoment(what string) {
	f.s.acts.note(what)
}

// crashBeforeNextWrite makes the run's next write fail unsent, and the
// run crash there: a crash between what the controller read and the
// write it decided.
func (t *transport) crashBeforeNextWrite() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.crashNext = true
}

// crashesBefore reports whether req, a write of the controller, is the one
// a crash comes before; if so it records it, unsent, and crashes the run.
func (t *transport) crashesBefore(req *http.Request, cluster string, external bool) bool {
	t.mu.Lock()
	crash := t.crashNext && !t.crashed
	if crash {
		t.crashNext, t.crashed = false, true
	}
	t.mu.Unlock()
	if crash {
		t.recordWrite(req, nil, cluster, external, "not sent: the controller crashed before it")
		go t.crash()
	}
	return crash
}
