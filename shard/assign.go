package shard

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
)

// DefaultVirtualShards is the number of virtual shards a resource is cut
// into when none is given: enough that 2 to 16 replicas get near-equal
// shares, few enough that a selector stays short.
const DefaultVirtualShards = 64

// Assign cuts the hash space into virtual equal ranges and gives each to one
// of members by rendezvous hashing with bounded load: each range goes to
// the member whose hash with the range's number is highest among those that
// do not yet hold their share (V/N ranges, at most one more). So every
// member computes the same assignment from the same member list, in any
// order; shares differ by at most one range; and when a member joins or
// leaves, mostly the ranges it gains or held move (about 1/N of them, plus
// a few to keep shares even). It returns each member's selector on key, adjacent ranges merged.
// virtual must be a power of two; members must be non-empty and distinct.
func Assign(key Key, members []string, virtual int) (map[string]Selector, error) {
	owners, err := Owners(members, virtual)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Selector, len(members))
	for v, owner := range owners {
		s := out[owner]
		s.Key = key
		s.Ranges = appendRange(s.Ranges, v, virtual)
		out[owner] = s
	}
	return out, nil
}

// Owners returns the owner of each of virtual ranges by Assign's rule:
// owners[v] owns range v, [v·2⁶⁴/virtual, (v+1)·2⁶⁴/virtual).
func Owners(members []string, virtual int) ([]string, error) {
	if err := checkVirtual(virtual); err != nil {
		return nil, err
	}
	if len(members) == 0 {
		return nil, fmt.Errorf("%w: no member", ErrInvalid)
	}
	sorted := slices.Clone(members)
	slices.Sort(sorted)
	if i := slices.IndexFunc(sorted[1:], func(m string) bool { return m == "" }); sorted[0] == "" || i >= 0 {
		return nil, fmt.Errorf("%w: an empty member name", ErrInvalid)
	}
	if len(slices.Compact(slices.Clone(sorted))) != len(sorted) {
		return nil, fmt.Errorf("%w: a member is listed twice", ErrInvalid)
	}
	// Every (member, range) pair gets a score; pairs are taken best first,
	// each range by the first member that still has room. Room is V/N
	// ranges, rounded down, and V mod N members may take one more: shares
	// differ by at most one range, and a pair keeps its match as long as
	// neither side is taken by a better pair, so a join or a leave moves
	// little beyond the ranges that must move.
	type pair struct {
		score uint64
		m, v  int
	}
	pairs := make([]pair, 0, len(sorted)*virtual)
	for i, m := range sorted {
		id := Hash(m)
		for v := range virtual {
			pairs = append(pairs, pair{score: mix(id ^ (uint64(v)+1)*0x9e3779b97f4a7c15), m: i, v: v})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		switch {
		case a.score != b.score:
			return cmp.Compare(b.score, a.score)
		case a.m != b.m:
			return cmp.Compare(a.m, b.m)
		}
		return cmp.Compare(a.v, b.v)
	})
	floor, bigger := virtual/len(sorted), virtual%len(sorted)
	held := make([]int, len(sorted))
	owners := make([]string, virtual)
	left := virtual
	for _, p := range pairs {
		if owners[p.v] != "" || held[p.m] > floor || (held[p.m] == floor && bigger == 0) {
			continue
		}
		if held[p.m] == floor {
			bigger--
		}
		held[p.m]++
		owners[p.v] = sorted[p.m]
		if left--; left == 0 {
			break
		}
	}
	return owners, nil
}

func checkVirtual(virtual int) error {
	if virtual <= 0 || bits.OnesCount(uint(virtual)) != 1 {
		return fmt.Errorf("%w: %d virtual shards, want a power of two", ErrInvalid, virtual)
	}
	if virtual > 1<<16 {
		return fmt.Errorf("%w: %d virtual shards, want at most 65536", ErrInvalid, virtual)
	}
	return nil
}

// VirtualOf returns the virtual range (of virtual, a power of two) that
// hash h falls in.
func VirtualOf(h uint64, virtual int) int {
	return int(h >> (64 - bits.TrailingZeros(uint(virtual)))) // h >> 64 is 0 in Go: one range holds all
}

// SelectorOf returns the selector on key of the virtual ranges vs (sorted,
// of virtual), adjacent ranges merged. With no range it selects nothing
// but the hash 0 (a selector needs a range; see Sharder.Selector).
func SelectorOf(key Key, vs []int, virtual int) Selector {
	s := Selector{Key: key}
	for _, v := range vs {
		s.Ranges = appendRange(s.Ranges, v, virtual)
	}
	if len(s.Ranges) == 0 {
		s.Ranges = []Range{{Start: 0, End: 1}}
	}
	return s
}

// appendRange appends virtual range v to rs, merging it with the last
// range when adjacent.
func appendRange(rs []Range, v, virtual int) []Range {
	width := uint64(1) << (64 - bits.TrailingZeros(uint(virtual))) // 2^64 / virtual; 0 when virtual is 1
	start := uint64(v) * width
	end := start + width // wraps to 0, the end of the space, for the last range
	if n := len(rs); n > 0 && rs[n-1].End == start && start != 0 {
		rs[n-1].End = end
		return rs
	}
	return append(rs, Range{Start: start, End: end})
}

// mix is splitmix64's finalizer: it spreads the bits of x.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
