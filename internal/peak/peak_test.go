package peak

import (
	"fmt"
	"testing"
)

func TestShrink_RebuildsOnlyAMapFarBelowALargePeak(t *testing.T) {
	var tr Tracker
	m := map[string]int{}
	for i := range 2 * MinPeak {
		m[fmt.Sprint(i)] = i
		tr.Grew(len(m))
	}
	same := func(a, b map[string]int) bool { // the same map, not an equal one
		a["probe"] = 1
		_, ok := b["probe"]
		delete(a, "probe")
		return ok
	}
	i := 0
	for ; len(m) > 2*MinPeak/8; i++ {
		delete(m, fmt.Sprint(i))
		if got := Shrink(&tr, m); !same(got, m) {
			t.Fatalf("rebuilt at %d entries of a peak of %d; want at fewer than an eighth", len(m), 2*MinPeak)
		}
	}
	delete(m, fmt.Sprint(i))
	i++
	got := Shrink(&tr, m)
	if same(got, m) {
		t.Fatalf("not rebuilt at %d entries of a peak of %d", len(m), 2*MinPeak)
	}
	if len(got) != len(m) {
		t.Fatalf("rebuilt map holds %d entries; want %d", len(got), len(m))
	}
	for k, v := range m {
		if got[k] != v {
			t.Fatalf("rebuilt map has %s=%d; want %d", k, got[k], v)
		}
	}
	m = got
	for ; i < 2*MinPeak; i++ { // the new peak is the rebuilt size, below MinPeak: no more rebuilds
		delete(m, fmt.Sprint(i))
		if got := Shrink(&tr, m); !same(got, m) {
			t.Fatalf("rebuilt again at %d entries after a peak below MinPeak", len(m))
		}
	}
	if len(m) != 0 {
		t.Fatalf("%d entries left; want 0", len(m))
	}
}

func TestShrink_LeavesASmallMapAlone(t *testing.T) {
	var tr Tracker
	m := map[int]bool{}
	for i := range MinPeak - 1 {
		m[i] = true
		tr.Grew(len(m))
	}
	clear(m)
	m[1] = true
	if got := Shrink(&tr, m); len(got) != 1 || !got[1] {
		t.Fatalf("Shrink = %v; want the map itself", got)
	}
	got := Shrink(&tr, m)
	got[2] = true
	if !m[2] {
		t.Fatal("a map whose peak was below MinPeak was rebuilt")
	}
}

// BenchmarkShrink_LookupsAfterABurst is a queue's steady state after a
// burst of 100,000 keys drained: 64 keys in flight, added and deleted, in
// the map the burst grew and in a map rebuilt by Shrink.
func BenchmarkShrink_LookupsAfterABurst(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns-%03d/cm-%07d", i%100, i)
	}
	for _, rebuild := range []bool{false, true} {
		b.Run(fmt.Sprint("rebuilt=", rebuild), func(b *testing.B) {
			var tr Tracker
			m := map[string]uint64{}
			for _, k := range keys {
				m[k] = 1
				tr.Grew(len(m))
			}
			for _, k := range keys {
				delete(m, k)
				if rebuild {
					m = Shrink(&tr, m)
				}
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
