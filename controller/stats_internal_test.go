package controller

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/peak"
)

// sameMap reports whether a and b are one map (a write to a shows in b).
func sameMap[V any](a, b map[string]V) bool {
	var zero V
	a["probe"] = zero
	_, ok := b["probe"]
	delete(a, "probe")
	return ok
}

func TestTracker_rebuildsItsMapsSmallOnceABacklogDrains(t *testing.T) {
	tr := tracker[string]{epoch: time.Now()}
	n := 2 * peak.MinPeak
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "ns/obj-" + strconv.Itoa(i)
		tr.note(keys[i], Reason{Event: "add", Source: "configmaps", At: tr.now()})
		tr.finished(keys[i], 0, errors.New("boom"), 1, tr.now())
	}
	why, failing := tr.why, tr.failing
	for i, k := range keys {
		tr.started(k, 0)
		tr.finished(k, 0, nil, 0, tr.now())
		if i < n-n/8 { // still above an eighth of the peak
			if !sameMap(tr.why, why) || !sameMap(tr.failing, failing) {
				t.Fatalf("a map was rebuilt after %d of %d keys drained, with %d left", i+1, n, n-i-1)
			}
		}
	}
	// Steady work after the backlog: a key added and reconciled, failing
	// once, over and over. The maps are rebuilt once they stayed below an
	// eighth of their peak for half the peak's deletes.
	for range n / 2 {
		tr.note("ns/steady", Reason{Event: "update", At: tr.now()})
		tr.started("ns/steady", 0)
		tr.finished("ns/steady", 0, errors.New("boom"), 1, tr.now())
		tr.started("ns/steady", 0)
		tr.finished("ns/steady", 0, nil, 0, tr.now())
	}
	if len(tr.why) != 0 || len(tr.failing) != 0 || len(tr.inFlight()) != 0 {
		t.Fatalf("after every key finished: %d reasons, %d failing, %d running; want none", len(tr.why), len(tr.failing), len(tr.inFlight()))
	}
	if sameMap(tr.why, why) || sameMap(tr.failing, failing) {
		t.Fatalf("the reasons' and failures' maps still the ones that held %d keys (rebuilt: reasons %v, failures %v)",
			n, !sameMap(tr.why, why), !sameMap(tr.failing, failing))
	}
	// What a rebuilt map holds is what the old one did.
	tr.note("ns/again", Reason{Event: "update", At: tr.now()})
	if w, ok := tr.why["ns/again"]; !ok || w.adds != 1 || tr.unpack(w.first).Event != "update" {
		t.Fatalf("a key noted after the rebuild: %+v, %v", w, ok)
	}
}
