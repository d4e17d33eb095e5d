package shard

import (
	"fmt"
	"math/bits"
	"slices"
)

// DefaultVirtualShards is the number of virtual shards a resource is cut
// into when none is given: enough that 2 to 16 replicas get near-equal
// shares, few enough that a selector stays short.
const DefaultVirtualShards = 64

// Assign cuts the hash space into virtual equal ranges and gives each to one
// of members by rendezvous hashing: each range goes to the member whose hash
// with the range's number is highest. So every member computes the same
// assignment from the same member list, in any order, and when a member
// joins or leaves only the ranges it gains or held move (about 1/N of
// them). It returns each member's selector on key, adjacent ranges merged.
// virtual must be a power of two; members must be non-empty and distinct.
func Assign(key Key, members []string, virtual int) (map[string]Selector, error) {
	if virtual <= 0 || bits.OnesCount(uint(virtual)) != 1 {
		return nil, fmt.Errorf("%w: %d virtual shards, want a power of two", ErrInvalid, virtual)
	}
	if virtual > 1<<16 {
		return nil, fmt.Errorf("%w: %d virtual shards, want at most 65536", ErrInvalid, virtual)
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
	out := make(map[string]Selector, len(sorted))
	width := uint64(1) << (64 - bits.TrailingZeros(uint(virtual))) // 2^64 / virtual; 0 when virtual is 1
	ids := make([]uint64, len(sorted))
	for i, m := range sorted {
		ids[i] = Hash(m)
	}
	for v := range virtual {
		owner, best := "", uint64(0)
		for i, m := range sorted {
			if h := mix(ids[i] ^ (uint64(v)+1)*0x9e3779b97f4a7c15); owner == "" || h > best {
				owner, best = m, h
			}
		}
		start := uint64(v) * width
		end := start + width // wraps to 0, the end of the space, for the last range
		s := out[owner]
		s.Key = key
		if n := len(s.Ranges); n > 0 && s.Ranges[n-1].End == start {
			s.Ranges[n-1].End = end
		} else {
			s.Ranges = append(s.Ranges, Range{Start: start, End: end})
		}
		out[owner] = s
	}
	return out, nil
}

// mix is splitmix64's finalizer: every input bit affects every output bit,
// which FNV-1a alone does not give for names that differ in one byte.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
