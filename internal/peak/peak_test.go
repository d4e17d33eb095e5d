package peak

import (
	"fmt"
	"testing"
)

// same reports whether a and b are one map, not two equal ones.
func same(a, b map[string]int) bool {
	a["probe"] = 1
	_, ok := b["probe"]
	delete(a, "probe")
	return ok
}

// fill returns a map of n entries "0".."n-1" and its tracker.
func fill(n int) (map[string]int, *Tracker) {
	var tr Tracker
	m := map[string]int{}
	for i := range n {
		m[fmt.Sprint(i)] = i
		tr.Grew(len(m))
	}
	return m, &tr
}

func TestShrink_RebuildsAMapThatStayedFarBelowALargePeak(t *testing.T) {
	n := 2 * MinPeak
	m, tr := fill(n)
	below := 0 // deletes that left the map below an eighth of its peak
	check := func(got map[string]int) bool {
		t.Helper()
		if len(m) < n/8 {
			below++
		}
		if below < n/2 {
			if !same(got, m) {
				t.Fatalf("rebuilt at %d entries after %d deletes below an eighth of %d; want %d", len(m), below, n, n/2)
			}
			return false
		}
		if same(got, m) {
			t.Fatalf("not rebuilt after %d deletes below an eighth", below)
		}
		if len(got) != len(m) {
			t.Fatalf("rebuilt map holds %d entries; want %d", len(got), len(m))
		}
		for k, v := range m {
			if got[k] != v {
				t.Fatalf("rebuilt map has %s=%d; want %d", k, got[k], v)
			}
		}
		return true
	}
	for i := 0; len(m) > n/16; i++ { // drained to a sixteenth
		delete(m, fmt.Sprint(i))
		check(Shrink(tr, m))
	}
	// Then inserts and deletes in turn (a queue's steady state) until the
	// map has been small for n/2 deletes.
	for d := 1; ; d++ {
		k := fmt.Sprint("x", d)
		m[k] = d
		tr.Grew(len(m))
		delete(m, k)
		if got := Shrink(tr, m); check(got) {
			m = got
			break
		}
	}
	if tr.Peak() != len(m) {
		t.Fatalf("peak %d after the rebuild; want its size %d", tr.Peak(), len(m))
	}
}

func TestShrink_LeavesAMapThatSwingsBackUpAlone(t *testing.T) {
	n := 2 * MinPeak
	m, tr := fill(n)
	for round := range 4 { // drained below an eighth for fewer than n/2 deletes, then back to the peak
		for i := range n - n/16 {
			delete(m, fmt.Sprint(i))
			if got := Shrink(tr, m); !same(got, m) {
				t.Fatalf("round %d: rebuilt at %d entries", round, len(m))
			}
		}
		for i := range n - n/16 {
			m[fmt.Sprint(i)] = i
			tr.Grew(len(m))
		}
	}
}

func TestShrink_LeavesASmallMapAlone(t *testing.T) {
	m, tr := fill(MinPeak - 1)
	for i := range MinPeak - 2 {
		delete(m, fmt.Sprint(i))
		if got := Shrink(tr, m); !same(got, m) {
			t.Fatalf("a map whose peak was below MinPeak was rebuilt at %d entries", len(m))
		}
	}
}

// BenchmarkDrainedMap_AddDelete is a queue's steady state after a burst
// of 100,000 keys drained: 64 keys in flight, added and deleted, in the map
// the burst grew and in a new map (what Shrink gives).
func BenchmarkDrainedMap_AddDelete(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns-%03d/cm-%07d", i%100, i)
	}
	for _, rebuilt := range []bool{false, true} {
		b.Run(fmt.Sprint("rebuilt=", rebuilt), func(b *testing.B) {
			m := map[string]uint64{}
			for _, k := range keys {
				m[k] = 1
			}
			clear(m)
			if rebuilt {
				m = map[string]uint64{}
			}
			i := 0
			for b.Loop() {
				m[keys[(i*7919)%len(keys)]] = uint64(i)
				if i >= 64 {
					delete(m, keys[((i-64)*7919)%len(keys)])
				}
				i++
			}
		})
	}
}

func TestClear_DropsALargeTableAndKeepsASmallMap(t *testing.T) {
	m, tr := fill(2 * MinPeak)
	got := Clear(tr, m)
	if len(got) != 0 || same(got, m) || tr.Peak() != 0 {
		t.Errorf("Clear of a map that held %d: %d entries, same map %v, peak %d; want a new empty map, peak 0", 2*MinPeak, len(got), same(got, m), tr.Peak())
	}
	small, str := fill(10)
	if got := Clear(str, small); len(got) != 0 || !same(got, small) {
		t.Errorf("Clear of a small map: %d entries, same map %v; want the map itself, empty", len(got), same(got, small))
	}
}
