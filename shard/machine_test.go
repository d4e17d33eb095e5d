package shard

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The tables use 8 virtual shards. With members a and b, Owners gives
// shards 2 3 5 6 to a and 0 1 4 7 to b.
const (
	tv = 8
	A  = "a#1" // this replica's incarnation
	A2 = "a#2" // its next incarnation
	B  = "b#1"
)

var (
	t0      = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	errRead = errors.New("read failed")
)

func seen(holder string, at time.Duration, members ...string) input {
	return membersSeen{holder: holder, members: members, now: t0.Add(at)}
}

// tbl is a table read: one token per shard, "." for none; expired names
// the holders whose membership Expired.
func tbl(holders string, expired ...string) input {
	in := tableRead{holders: strings.Fields(holders), expired: map[string]bool{}}
	for i, h := range in.holders {
		if h == "." {
			in.holders[i] = ""
		}
	}
	for _, h := range expired {
		in.expired[h] = true
	}
	return in
}

func fail(err error) input { return failed{err: err} }

const (
	free = ". . . . . . . ."
	allA = "a#1 a#1 a#1 a#1 a#1 a#1 a#1 a#1"
	allB = "b#1 b#1 b#1 b#1 b#1 b#1 b#1 b#1"
)

// Histories.
var (
	stepA    = []input{seen(A, 0, "a"), seen(A, 2*time.Second, "a")} // joined, grace over: reading
	claimed  = append(slices.Clone(stepA), tbl(free))                // writing its claim of every shard
	acquired = append(slices.Clone(claimed), tableWritten{})         // relisting
	openAll  = append(slices.Clone(acquired), relisted{})            // every shard open, idle
	bJoined  = append(slices.Clone(openAll), seen(A, 3*time.Second, "a", "b"))
	leaving  = append(slices.Clone(openAll), leave{holder: A})
	// partly: shard 1 was still busy when the others were released.
	partly = with(bJoined, drained{busy: []int{1}}, tbl(allA), tableWritten{}, relisted{})
)

func with(h []input, more ...input) []input { return append(slices.Clone(h), more...) }

func testMachine() *machine { return newMachine(Namespace, tv, 2*time.Second) }

// shards renders the virtual shards a selector selects.
func shards(s Selector) string {
	var vs []string
	for v := range tv {
		if s.MatchesHash(uint64(v)<<61 + 1) { // not 0: the empty selector holds the hash 0
			vs = append(vs, fmt.Sprint(v))
		}
	}
	if len(vs) == 0 {
		return "none"
	}
	return strings.Join(vs, " ")
}

func describeActions(acts []action) string {
	var s []string
	for _, a := range acts {
		s = append(s, describeAction(a))
	}
	return strings.Join(s, "; ")
}

func describeAction(a action) string {
	switch a := a.(type) {
	case wakeAt:
		return fmt.Sprintf("wake +%s", a.at.Sub(t0))
	case drain:
		if a.all {
			return "drain all"
		}
		return "drain"
	case readTable:
		return strings.TrimSpace("read " + timeoutOf(a.timeout))
	case writeTable:
		var hs []string
		for _, h := range a.holders {
			hs = append(hs, cmpOr(h, "."))
		}
		return strings.TrimSpace(fmt.Sprintf("write [%s] %s", strings.Join(hs, " "), timeoutOf(a.timeout)))
	case relist:
		return "relist"
	case setSelector:
		return "select " + shards(a.sel)
	case stop:
		return fmt.Sprintf("stop %v: %v", a.shards, a.cause)
	case lost:
		return fmt.Sprintf("lost %d to %s", a.shard, a.holder)
	case opened:
		return fmt.Sprintf("open %v owned=%d", a.shards, a.owned)
	case handoff:
		return fmt.Sprintf("%s %d", a.kind, a.n)
	case left:
		return fmt.Sprintf("left released=%v", a.released)
	}
	return fmt.Sprintf("%T", a)
}

func timeoutOf(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

var phaseNames = map[phase]string{idle: "idle", draining: "draining", reading: "reading", writing: "writing",
	relisting: "relisting", done: "done"}

// where names the machine's mode and phase.
func where(m *machine) string {
	if m.leaving {
		return "leaving/" + phaseNames[m.phase]
	}
	return phaseNames[m.phase]
}

// describeState renders the phase, each shard's state (. closed,
// a acquiring, o open, r releasing) and the error kept for Ready.
func describeState(m *machine) string {
	var b strings.Builder
	b.WriteString(where(m) + " ")
	for _, x := range m.states {
		b.WriteByte(".aor"[x])
	}
	if m.err != nil {
		fmt.Fprintf(&b, " err=%v", m.err)
	}
	return b.String()
}

func inputName(in input) string { return strings.TrimPrefix(fmt.Sprintf("%T", in), "shard.") }

// feed runs in through m, checking that each step asks for at most one
// answer.
func feed(t *testing.T, m *machine, in input) []action {
	t.Helper()
	acts := m.next(in)
	requests := 0
	for _, a := range acts {
		switch a.(type) {
		case drain, readTable, writeTable, relist:
			requests++
		}
	}
	if requests > 1 {
		t.Fatalf("%s asked for %d answers at once: %s", inputName(in), requests, describeActions(acts))
	}
	return acts
}

// handled lists every transition: (where the machine is) × (input) pairs
// the machine acts on. Any other pair must change nothing
// (TestMachine_ignoresAnswersInOtherPhases); the table below covers each
// of these at least once (TestMachine checks).
var handled = map[string][]string{
	"idle":             {"membersSeen", "lapsed", "leave"},
	"draining":         {"drained", "failed", "lapsed", "leave"},
	"reading":          {"tableRead", "failed", "lapsed", "leave"},
	"writing":          {"tableWritten", "tableConflict", "failed", "lapsed", "leave"},
	"relisting":        {"relisted", "failed", "lapsed", "leave"},
	"leaving/draining": {"drained", "failed", "lapsed"},
	"leaving/reading":  {"tableRead", "failed", "lapsed"},
	"leaving/writing":  {"tableWritten", "tableConflict", "failed", "lapsed"},
	"leaving/done":     {},
}

var errLapse = fmt.Errorf("%w: renew deadline passed", ErrLost)

func TestMachine(t *testing.T) {
	stopAll := "stop [0 1 2 3 4 5 6 7]: "
	for _, tc := range []struct {
		name    string
		history []input
		in      input
		want    string // the actions
		state   string // describeState after in
	}{
		// Joining.
		{name: "a member not joined yet does nothing", in: seen("", 0),
			want: "", state: "idle ........"},
		{name: "a new incarnation claims nothing during the join grace", in: seen(A, 0, "a"),
			want: "wake +2s", state: "idle ........"},
		{name: "after the join grace a step reads the table", history: stepA[:1], in: seen(A, 2*time.Second, "a"),
			want: "read", state: "reading ........"},
		{name: "a new incarnation starts from nothing, closing what the earlier one had open",
			history: openAll, in: seen(A2, 5*time.Second, "a"),
			want: stopAll + "shard: this replica no longer holds the shard; select none; wake +7s", state: "idle ........"},
		{name: "members that cannot be assigned fail the step", history: stepA[:1], in: seen(A, 2*time.Second, "a", ""),
			want: "", state: `idle ........ err=shard: invalid selector: an empty member name`},

		// Releasing first.
		{name: "shards the members give another close at once and are drained", history: openAll,
			in: seen(A, 3*time.Second, "a", "b"), want: "drain", state: "draining rrooroor"},
		{name: "once drained the step reads the table", history: bJoined, in: drained{},
			want: "read", state: "reading rrooroor"},
		{name: "drained shards lose this holder in the table", history: with(bJoined, drained{}), in: tbl(allA),
			want: "write [. . a#1 a#1 . a#1 a#1 .]", state: "writing rrooroor"},
		{name: "once written they close and the caches list the rest", history: with(bJoined, drained{}, tbl(allA)),
			in: tableWritten{}, want: "released 4; select 2 3 5 6; relist", state: "relisting ..oo.oo."},
		{name: "a relist that opens nothing ends the step", history: with(bJoined, drained{}, tbl(allA), tableWritten{}),
			in: relisted{}, want: "", state: "idle ..oo.oo."},
		{name: "a shard still busy keeps this holder in the table; the drained ones lose it", history: with(bJoined, drained{busy: []int{1}}),
			in: tbl(allA), want: "write [. a#1 a#1 a#1 . a#1 a#1 .]", state: "writing rrooroor"},
		{name: "once written the drained ones close; the busy one stays cached and closed to reconciles",
			history: with(bJoined, drained{busy: []int{1}}, tbl(allA)), in: tableWritten{},
			want: "released 3; select 1 2 3 5 6; relist", state: "relisting .roo.oo."},
		{name: "the next step drains it again", history: partly, in: seen(A, 4*time.Second, "a", "b"),
			want: "drain", state: "draining .roo.oo."},
		{name: "drained at last, it loses this holder in the table", history: with(partly, seen(A, 4*time.Second, "a", "b"), drained{}),
			in: tbl(". a#1 a#1 a#1 . a#1 a#1 ."), want: "write [. . a#1 a#1 . a#1 a#1 .]", state: "writing .roo.oo."},
		{name: "and closes, leaving the caches", history: with(partly, seen(A, 4*time.Second, "a", "b"), drained{}, tbl(". a#1 a#1 a#1 . a#1 a#1 .")),
			in: tableWritten{}, want: "released 1; select 2 3 5 6; relist", state: "relisting ..oo.oo."},
		{name: "a drain cut short fails the step; the shards stay closed to reconciles", history: bJoined,
			in: fail(errRead), want: "", state: "idle rrooroor err=read failed"},

		// Claiming.
		{name: "free shards the owners give this replica are claimed", history: stepA, in: tbl(free),
			want: "write [a#1 a#1 a#1 a#1 a#1 a#1 a#1 a#1]", state: "writing ........"},
		{name: "a shard held by a live member is left to it", history: []input{seen(A, 0, "a"), seen(A, 2*time.Second, "a")},
			in: tbl(allB), want: "relist", state: "relisting ........"},
		{name: "a shard held by an expired holder is claimed", history: stepA, in: tbl(allB, B),
			want: "write [a#1 a#1 a#1 a#1 a#1 a#1 a#1 a#1]", state: "writing ........"},
		{name: "taking over is counted once written", history: with(stepA, tbl(allB, B)), in: tableWritten{},
			want: "taken_over 8; select 0 1 2 3 4 5 6 7; relist", state: "relisting aaaaaaaa"},
		{name: "a shard this incarnation holds in the table is claimed without a write, one it no longer owns is cleared",
			history: []input{seen(A, 0, "a", "b"), seen(A, 2*time.Second, "a", "b")}, in: tbl(allA),
			want: "write [. . a#1 a#1 . a#1 a#1 .]", state: "writing ........"},
		{name: "claimed shards are acquiring: listed, not yet reconciled", history: claimed, in: tableWritten{},
			want: "select 0 1 2 3 4 5 6 7; relist", state: "relisting aaaaaaaa"},
		{name: "shards open once the caches reflect them", history: acquired, in: relisted{},
			want: "open [0 1 2 3 4 5 6 7] owned=8", state: "idle oooooooo"},
		{name: "a failed relist keeps them shut", history: acquired, in: fail(errRead),
			want: "", state: "idle aaaaaaaa err=read failed"},
		{name: "the next step lists again without writing", history: with(acquired, fail(errRead), seen(A, 3*time.Second, "a")),
			in: tbl(allA), want: "relist", state: "relisting aaaaaaaa err=read failed"},
		{name: "a step with nothing to do ends at the table", history: with(openAll, seen(A, 3*time.Second, "a")),
			in: tbl(allA), want: "", state: "idle oooooooo"},
		{name: "a table that cannot be read fails the step", history: stepA, in: fail(errRead),
			want: "", state: "idle ........ err=read failed"},
		{name: "a write that fails claims nothing", history: claimed, in: fail(errRead),
			want: "", state: "idle ........ err=read failed"},
		{name: "a write that conflicts reads again", history: claimed, in: tableConflict{},
			want: "read", state: "reading ........"},
		{name: "conflicts on every read fail the step", history: conflicts(maxTableReads - 1), in: tableConflict{},
			want: "", state: "idle ........ err=" + errTableConflicts.Error()},

		// Another holder in the table.
		{name: "an open shard the table gives another stops at once", history: with(openAll, seen(A, 3*time.Second, "a")),
			in:   tbl("b#1 a#1 a#1 a#1 a#1 a#1 a#1 a#1"),
			want: "lost 0 to b#1; released 1; select 1 2 3 4 5 6 7; relist", state: "relisting .ooooooo"},

		// The fence.
		{name: "a lapse closes every shard at once", history: openAll, in: lapsed{cause: errLapse},
			want: stopAll + errLapse.Error() + "; select none", state: "idle ........"},
		{name: "a lapse while draining abandons the step", history: bJoined, in: lapsed{cause: errLapse},
			want: stopAll + errLapse.Error() + "; select none", state: "idle ........"},
		{name: "a lapse while reading abandons the step", history: with(openAll, seen(A, 3*time.Second, "a")),
			in: lapsed{cause: errLapse}, want: stopAll + errLapse.Error() + "; select none", state: "idle ........"},
		{name: "a lapse while writing abandons the claim", history: claimed, in: lapsed{cause: errLapse},
			want: "", state: "idle ........"},
		{name: "a lapse while relisting closes the acquiring shards", history: acquired, in: lapsed{cause: errLapse},
			want: stopAll + errLapse.Error() + "; select none", state: "idle ........"},
		{name: "a write that succeeds after a lapse acquires nothing", history: with(claimed, lapsed{cause: errLapse}),
			in: tableWritten{}, want: "", state: "idle ........"},
		{name: "a relist that ends after a lapse opens nothing", history: with(acquired, lapsed{cause: errLapse}),
			in: relisted{}, want: "", state: "idle ........"},

		// Leaving.
		{name: "a leave closes every shard and drains them", history: openAll, in: leave{holder: A},
			want: "drain all", state: "leaving/draining rrrrrrrr"},
		{name: "a leave abandons a step draining", history: bJoined, in: leave{holder: A},
			want: "drain all", state: "leaving/draining rrrrrrrr"},
		{name: "a leave abandons a step reading", history: stepA, in: leave{holder: A},
			want: "drain all", state: "leaving/draining ........"},
		{name: "a leave abandons a step writing", history: claimed, in: leave{holder: A},
			want: "drain all", state: "leaving/draining ........"},
		{name: "a leave abandons a step relisting", history: acquired, in: leave{holder: A},
			want: "drain all", state: "leaving/draining rrrrrrrr"},
		{name: "drained, a leave reads the table within its timeout", history: leaving, in: drained{},
			want: "read 5s", state: "leaving/reading rrrrrrrr"},
		{name: "it clears this holder in the table", history: with(leaving, drained{}),
			in:   tbl("a#1 a#1 b#1 a#1 a#1 a#1 a#1 a#1"),
			want: "write [. . b#1 . . . . .] 5s", state: "leaving/writing rrrrrrrr"},
		{name: "once written the replica has left", history: with(leaving, drained{}, tbl(allA)), in: tableWritten{},
			want:  "released 8; " + stopAll + "shard: this replica no longer holds the shard; select none; left released=true",
			state: "leaving/done ........"},
		{name: "a table without this holder needs no write", history: with(leaving, drained{}), in: tbl(allB),
			want:  stopAll + "shard: this replica no longer holds the shard; select none; left released=true",
			state: "leaving/done ........"},
		{name: "a member that never joined has nothing to clear", history: with(openAll, leave{holder: ""}), in: drained{},
			want:  stopAll + "shard: this replica no longer holds the shard; select none; left released=true",
			state: "leaving/done ........"},
		{name: "a conflicting leave reads again", history: with(leaving, drained{}, tbl(allA)), in: tableConflict{},
			want: "read 5s", state: "leaving/reading rrrrrrrr"},
		{name: "a leave whose write fails leaves the table to expire", history: with(leaving, drained{}, tbl(allA)),
			in:    fail(errRead),
			want:  stopAll + "shard: this replica no longer holds the shard; select none; left released=false",
			state: "leaving/done ........"},
		{name: "a leave whose read fails leaves the table to expire", history: with(leaving, drained{}), in: fail(errRead),
			want:  stopAll + "shard: this replica no longer holds the shard; select none; left released=false",
			state: "leaving/done ........"},
		{name: "a leave whose drain is cut short leaves the table to expire", history: leaving, in: fail(errRead),
			want:  stopAll + "shard: this replica no longer holds the shard; select none; left released=false",
			state: "leaving/done ........"},
		{name: "a lapse while leaving and draining stops everything", history: leaving, in: lapsed{cause: errLapse},
			want: stopAll + errLapse.Error() + "; select none", state: "leaving/done ........"},
		{name: "a lapse while leaving and reading stops everything", history: with(leaving, drained{}),
			in: lapsed{cause: errLapse}, want: stopAll + errLapse.Error() + "; select none", state: "leaving/done ........"},
		{name: "a lapse while leaving and writing stops everything", history: with(leaving, drained{}, tbl(allA)),
			in: lapsed{cause: errLapse}, want: stopAll + errLapse.Error() + "; select none", state: "leaving/done ........"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testMachine()
			for _, in := range tc.history {
				feed(t, m, in)
			}
			covered[where(m)+" × "+inputName(tc.in)] = true
			if got := describeActions(feed(t, m, tc.in)); got != tc.want {
				t.Errorf("actions:\n got %s\nwant %s", got, tc.want)
			}
			if got := describeState(m); got != tc.state {
				t.Errorf("state:\n got %s\nwant %s", got, tc.state)
			}
		})
	}
	for w, ins := range handled {
		for _, in := range ins {
			if !covered[w+" × "+in] {
				t.Errorf("no case covers %s × %s", w, in)
			}
		}
	}
}

// covered records the transitions TestMachine's cases exercised.
var covered = map[string]bool{}

// conflicts is a history of a step whose first n writes conflicted.
func conflicts(n int) []input {
	h := slices.Clone(claimed)
	for range n {
		h = append(h, tableConflict{}, tbl(free))
	}
	return h
}

// snapshot copies m's state for comparison.
func snapshot(m *machine) machine {
	c := *m
	c.states, c.owners, c.claim = slices.Clone(m.states), slices.Clone(m.owners), slices.Clone(m.claim)
	return c
}

func TestMachine_ignoresAnswersInOtherPhases(t *testing.T) {
	at := map[string][]input{ // a history that ends in each place
		"idle": openAll, "draining": bJoined, "reading": stepA, "writing": claimed, "relisting": acquired,
		"leaving/draining": leaving, "leaving/reading": with(leaving, drained{}),
		"leaving/writing": with(leaving, drained{}, tbl(allA)),
		"leaving/done":    with(leaving, drained{}, tbl(allA), tableWritten{}),
	}
	inputs := []input{seen(A, time.Minute, "a", "b"), drained{}, tbl(free), tableWritten{}, tableConflict{},
		fail(errRead), relisted{}, lapsed{cause: errLapse}, leave{holder: A}}
	if len(at) != len(handled) {
		t.Fatalf("%d places have histories, %d have transitions", len(at), len(handled))
	}
	for w, h := range at {
		for _, in := range inputs {
			if slices.Contains(handled[w], inputName(in)) {
				continue
			}
			m := testMachine()
			for _, x := range h {
				feed(t, m, x)
			}
			if got := where(m); got != w {
				t.Fatalf("the history for %s ends in %s", w, got)
			}
			before := snapshot(m)
			if acts := feed(t, m, in); len(acts) > 0 || !reflect.DeepEqual(before, snapshot(m)) {
				t.Errorf("%s × %s: did %q and moved to %s, want nothing", w, inputName(in), describeActions(acts), describeState(m))
			}
		}
	}
}
