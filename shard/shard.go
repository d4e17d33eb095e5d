// Package shard describes a replica's share of a resource the way the API
// server's sharded list and watch (Kubernetes v1.36, feature gate
// ShardedListAndWatch) understands it: ranges of the 64-bit FNV-1a hash of
// an object's UID or namespace. A Selector renders as the server's
// ListOptions.ShardSelector and matches objects on the client with the same
// hash, for servers that do not filter.
//
// The package is laid out by role (see docs/design/003-sharding.md):
//   - the vocabulary: Selector, Range, Key and Hash (shard.go); virtual
//     shards and their assignment to members, Owners and Assign
//     (assign.go); the ring's table of holders, ReadTable (table.go);
//   - Membership (members.go): this replica's Lease in its ring and which
//     members are alive;
//   - the handoff protocol: a pure state machine (machine.go) and the
//     Sharder that drives it, doing the Lease IO, the relists and the
//     draining of reconciles (sharder.go).
package shard

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Key is the field whose hash places an object in a shard.
type Key string

const (
	// UID shards by object: every object lands anywhere, evenly.
	UID Key = "object.metadata.uid"
	// Namespace shards by namespace: a namespace's objects stay together,
	// so a primary and the objects it owns in its namespace share a shard.
	Namespace Key = "object.metadata.namespace"
)

// ErrInvalid reports a Selector the server would reject.
var ErrInvalid = errors.New("shard: invalid selector")

// Range is the half-open range [Start, End) of hash values. End 0 stands for
// 2^64, the end of the space, so Range{} is everything.
type Range struct {
	Start, End uint64
}

// contains reports whether h is in r.
func (r Range) contains(h uint64) bool {
	return h >= r.Start && (r.End == 0 || h < r.End)
}

// Selector is a set of ranges of one key's hash.
type Selector struct {
	Key    Key
	Ranges []Range
}

// Validate checks the key and that every range is non-empty.
func (s Selector) Validate() error {
	if s.Key != UID && s.Key != Namespace {
		return fmt.Errorf("%w: key %q, want %q or %q", ErrInvalid, s.Key, UID, Namespace)
	}
	if len(s.Ranges) == 0 {
		return fmt.Errorf("%w: no range", ErrInvalid)
	}
	for _, r := range s.Ranges {
		if r.End != 0 && r.End <= r.Start {
			return fmt.Errorf("%w: range [%#x, %#x) is empty", ErrInvalid, r.Start, r.End)
		}
	}
	return nil
}

// String renders s in the server's syntax, e.g.
// shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000').
func (s Selector) String() string {
	parts := make([]string, len(s.Ranges))
	for i, r := range s.Ranges {
		end := fmt.Sprintf("0x%016x", r.End)
		if r.End == 0 {
			end = "0x10000000000000000"
		}
		parts[i] = fmt.Sprintf("shardRange(%s, '0x%016x', '%s')", s.Key, r.Start, end)
	}
	return strings.Join(parts, " || ")
}

// SpreadHash is Hash with its bits spread (splitmix64's finalizer), for
// names only the client places, never filtered by the server: FNV-1a
// alone leaves the high bits, which pick the virtual shard, nearly equal
// for names that differ in their last characters ("east-1", "east-2"; 24
// such names fell in one of 16 shards).
func SpreadHash(value string) uint64 { return mix(Hash(value)) }

// SpreadHashJoin is SpreadHash of parts joined by sep, computed without
// joining them: SpreadHashJoin('/', "a", "b") is SpreadHash("a/b"), and
// nothing is allocated (a key hashed on every event need not be built).
func SpreadHashJoin(sep byte, parts ...string) uint64 {
	h := uint64(fnvOffset)
	for i, p := range parts {
		if i > 0 {
			h = (h ^ uint64(sep)) * fnvPrime
		}
		h = fnv(h, p)
	}
	return mix(h)
}

// Hash is the 64-bit FNV-1a hash of value, as the server computes it. It
// allocates nothing: Matches runs on every watch event.
func Hash(value string) uint64 { return fnv(fnvOffset, value) }

// FNV-1a 64's offset basis and prime.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnv continues the FNV-1a hash h over s.
func fnv(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// Object is what Matches reads of an object; every API object has it.
type Object interface {
	GetUID() types.UID
	GetNamespace() string
}

// Matches reports whether obj is in s: its key's hash is in one of the
// ranges.
func (s Selector) Matches(obj Object) bool {
	v := string(obj.GetUID())
	if s.Key == Namespace {
		v = obj.GetNamespace()
	}
	return s.MatchesValue(v)
}

// MatchesValue reports whether the hash of value (a UID or a namespace, as
// the selector's Key says) falls in one of the selector's ranges.
func (s Selector) MatchesValue(value string) bool {
	return s.MatchesHash(Hash(value))
}

// MatchesHash reports whether h falls in one of the selector's ranges.
func (s Selector) MatchesHash(h uint64) bool {
	for _, r := range s.Ranges {
		if r.contains(h) {
			return true
		}
	}
	return false
}
