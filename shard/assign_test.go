package shard_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/shard"
)

// ownerOf returns the member whose selector matches obj, failing unless
// exactly one does.
func ownerOf(t *testing.T, a map[string]shard.Selector, obj shard.Object) string {
	t.Helper()
	owner := ""
	for m, s := range a {
		if s.Matches(obj) {
			if owner != "" {
				t.Fatalf("%s is in the shares of %s and %s", obj.GetUID(), owner, m)
			}
			owner = m
		}
	}
	if owner == "" {
		t.Fatalf("%s is in no share", obj.GetUID())
	}
	return owner
}

func objects(n int) []shard.Object {
	out := make([]shard.Object, n)
	for i := range out {
		out[i] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", UID: types.UID(fmt.Sprintf("%08x-1d2e-4f50-8a6b-%012x", i, i*7919))}}
	}
	return out
}

func TestAssign_coversEverythingOnceAndMovesOnlyWhatItMust(t *testing.T) {
	objs := objects(20000)
	members := []string{"a", "b", "c"}
	before, err := shard.Assign(shard.UID, members, 64)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	prev := map[shard.Object]string{}
	for _, o := range objs {
		m := ownerOf(t, before, o)
		count[m]++
		prev[o] = m
	}
	for m, n := range count {
		if n < 20000/3*9/10 || n > 20000/3*11/10 {
			t.Errorf("%s holds %d of 20000 objects, want a third within 10%%", m, n)
		}
	}
	for _, s := range before {
		if err := s.Validate(); err != nil {
			t.Error(err)
		}
	}
	// d joins: d gets a quarter; little else moves.
	after, err := shard.Assign(shard.UID, append(members, "d"), 64)
	if err != nil {
		t.Fatal(err)
	}
	toD, between := 0, 0
	for _, o := range objs {
		if m := ownerOf(t, after, o); m != prev[o] {
			if m == "d" {
				toD++
			} else {
				between++
			}
		}
	}
	if toD < 20000/4*9/10 || toD > 20000/4*11/10 {
		t.Errorf("%d of 20000 objects moved to the new member, want a quarter within 10%%", toD)
	}
	if between > 20000/64*3 {
		t.Errorf("%d objects moved between the old members when d joined, want at most 3 ranges' worth", between)
	}
	// b leaves: b's objects move, and little else.
	gone, err := shard.Assign(shard.UID, []string{"c", "a"}, 64)
	if err != nil {
		t.Fatal(err)
	}
	others := 0
	for _, o := range objs {
		if m := ownerOf(t, gone, o); m != prev[o] && prev[o] != "b" {
			others++
		}
	}
	if others > 20000/64*3 {
		t.Errorf("%d objects of a and c moved when b left, want at most 3 ranges' worth", others)
	}
}

func TestOwners_sharesDifferByAtMostOneRange(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7, 16} {
		for _, virtual := range []int{1, 16, 64, 256} {
			var members []string
			for i := range n {
				members = append(members, fmt.Sprintf("replica-%d", i))
			}
			owners, err := shard.Owners(members, virtual)
			if err != nil {
				t.Fatal(err)
			}
			held := map[string]int{}
			for _, o := range owners {
				if o == "" {
					t.Fatalf("N=%d V=%d: a range without owner", n, virtual)
				}
				held[o]++
			}
			lo, hi := virtual, 0
			for _, m := range members {
				lo, hi = min(lo, held[m]), max(hi, held[m])
			}
			if hi-lo > 1 {
				t.Errorf("N=%d V=%d: shares from %d to %d ranges", n, virtual, lo, hi)
			}
		}
	}
}

func TestAssign_isTheSameForAnyOrderOfMembers(t *testing.T) {
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	members := []string{"r1", "r2", "r3", "r4", "r5"}
	want, err := shard.Assign(shard.Namespace, members, 16)
	if err != nil {
		t.Fatal(err)
	}
	rnd.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	got, err := shard.Assign(shard.Namespace, members, 16)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("order %v gave %v, want %v", members, got, want)
	}
}

func TestAssign_oneMemberOwnsEverythingAsOneRange(t *testing.T) {
	a, err := shard.Assign(shard.UID, []string{"only"}, 64)
	if err != nil {
		t.Fatal(err)
	}
	if s := a["only"]; len(s.Ranges) != 1 || s.Ranges[0] != (shard.Range{}) {
		t.Errorf("one member got %v, want the whole space as one range", s.Ranges)
	}
}

func TestAssign_rejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		members []string
		virtual int
	}{
		{[]string{"a"}, 0}, {[]string{"a"}, 48}, {[]string{"a"}, -4}, {[]string{"a"}, 1 << 20},
		{nil, 64}, {[]string{"a", "a"}, 64}, {[]string{"a", ""}, 64},
	} {
		if _, err := shard.Assign(shard.UID, tc.members, tc.virtual); !errors.Is(err, shard.ErrInvalid) {
			t.Errorf("Assign(%q, %d) = %v, want ErrInvalid", tc.members, tc.virtual, err)
		}
	}
}
