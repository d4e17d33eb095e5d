package intern

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

// A string and the bytes of it hash alike at every length the hash reads
// differently (under 4, 4 to 7, 8, and past one word): bytesString finds
// what String took in.
func TestHash_bytesHashAsTheirString(t *testing.T) {
	const text = "app.kubernetes.io/name=registry.example.com/team/app"
	for n := range len(text) + 1 {
		s := text[:n]
		if hash(s) != hash([]byte(s)) {
			t.Errorf("hash(%q) differs between string and []byte", s)
		}
	}
}

// A string's pair of slots is picked by its hash's low bits, which spread
// strings that differ in a character or two (suffixes, counters) as a random
// function would. FNV-1a, the hash before this one, spread these as well
// in its low bits but clumped its high ones, which picked the second slot
// then (a chi-squared per slot of 27 to 64 for the sets below).
func TestHash_pairsSpreadSimilarStrings(t *testing.T) {
	tab := NewTable(DefaultTableSize)
	tab.slots, tab.mask = make([]string, DefaultTableSize), DefaultTableSize-1 // grown to its full size
	pairs := len(tab.slots) / 2
	sets := map[string]func(int) string{
		"hex":     func(i int) string { return fmt.Sprintf("%x", i) },
		"app":     func(i int) string { return fmt.Sprintf("app-%d", i) },
		"hash":    func(i int) string { return fmt.Sprintf("7d9f8c%d", i) },
		"node":    func(i int) string { return fmt.Sprintf("ip-10-0-%d-%d.ec2.internal", i/256, i%256) },
		"pod-uid": func(i int) string { return fmt.Sprintf("%08x-1d2e-4f50-8a6b-%012x", i, i*7919) },
	}
	for name, gen := range sets {
		counts := make([]int, pairs)
		const n = 6000
		for i := range n {
			counts[tab.pairOf(hash(gen(i)))/2]++
		}
		mean, chi := float64(n)/float64(pairs), 0.0
		for _, c := range counts {
			d := float64(c) - mean
			chi += d * d / mean
		}
		// A random function gives 1 ± 0.03 here (4095 degrees of freedom).
		if chi /= float64(pairs); chi > 1.2 {
			t.Errorf("%s strings: chi-squared per pair %.2f, want about 1", name, chi)
		}
	}
}

// Two strings whose hashes pick the same pair are both kept, however often
// they alternate: the second slot holds the one the other moved there. (A
// table that looked each string up in two slots of its own lost the moved
// one, and two such strings then evicted each other at every turn.)
func TestTable_twoStringsOfOnePairAreBothKept(t *testing.T) {
	tab := NewTable(64)
	a, b := "app-0", ""
	for i := 1; b == ""; i++ {
		if c := fmt.Sprintf("app-%d", i); tab.pairOf(hash(c)) == tab.pairOf(hash(a)) {
			b = c
		}
	}
	kept := map[string]string{a: tab.String(strings.Clone(a)), b: tab.String(strings.Clone(b))}
	for range 3 {
		for _, s := range []string{a, b} {
			if got := tab.String(strings.Clone(s)); unsafe.StringData(got) != unsafe.StringData(kept[s]) {
				t.Fatalf("%q, which shares its pair with one other string, was evicted", s)
			}
		}
	}
}

// A table starts small, doubles as strings keep missing, stops at the size
// it was made with, and keeps through each growth the strings it held.
func TestTable_growsToItsSizeKeepingWhatItHeld(t *testing.T) {
	tab := NewTable(4096)
	if len(tab.slots) != startSlots {
		t.Fatalf("a new table has %d slots, want %d", len(tab.slots), startSlots)
	}
	for range 2 {
		for i := range 50 {
			tab.String(fmt.Sprintf("label-%d", i))
		}
	}
	if len(tab.slots) != startSlots {
		t.Errorf("50 strings, each seen twice, grew the table to %d slots", len(tab.slots))
	}
	for i := 0; len(tab.slots) == startSlots; i++ { // up to the string before a growth
		if tab.misses == len(tab.slots)-1 {
			break
		}
		tab.String(fmt.Sprintf("name-%d", i))
	}
	held := map[string]*byte{}
	for _, s := range tab.slots {
		if s != "" {
			held[s] = unsafe.StringData(s)
		}
	}
	tab.String("the one that makes it grow")
	if len(tab.slots) != 2*startSlots {
		t.Fatalf("after %d misses the table has %d slots, want %d", startSlots, len(tab.slots), 2*startSlots)
	}
	for s, p := range held {
		if got := tab.String(strings.Clone(s)); unsafe.StringData(got) != p {
			t.Fatalf("%q, held before the table grew, not found after", s)
		}
	}
	for i := range 10000 {
		tab.String(fmt.Sprintf("name-%d", i))
	}
	if len(tab.slots) != 4096 || tab.mask != 4095 {
		t.Errorf("after 10,000 distinct strings the table has %d slots (mask %d), want its size, 4096", len(tab.slots), tab.mask)
	}
}
