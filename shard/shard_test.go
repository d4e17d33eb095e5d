package shard_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/shard"
)

func TestHash_isTheServersHash(t *testing.T) {
	for i := range 100 {
		v := fmt.Sprintf("%08x-1d2e-4f50-8a6b-%012x", i, i*7919)
		want, err := strconv.ParseUint(sharding.HashField(v), 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		if got := shard.Hash(v); got != want {
			t.Fatalf("Hash(%q) = %x, apimachinery's %x", v, got, want)
		}
	}
}

func TestSpreadHashJoin_isSpreadHashOfTheJoinedParts(t *testing.T) {
	for _, parts := range [][]string{{"east/ns/name"}, {"east", "ns", "name"}, {"", "x"}, {"x", ""}, {}, {"a", "b", "c", "d"}} {
		joined := strings.Join(parts, "/")
		if got, want := shard.SpreadHashJoin('/', parts...), shard.SpreadHash(joined); got != want {
			t.Errorf("SpreadHashJoin('/', %q) = %x, SpreadHash(%q) = %x", parts, got, joined, want)
		}
	}
	cluster, ns, name := "east", "shop", "cart"
	if n := testing.AllocsPerRun(100, func() { shard.SpreadHashJoin('/', cluster, ns, name) }); n != 0 {
		t.Errorf("SpreadHashJoin allocates %v times per call, want 0", n)
	}
}

func TestSelector_stringAndMatchesAgreeWithApimachinery(t *testing.T) {
	s := shard.Selector{Key: shard.UID, Ranges: []shard.Range{{Start: 0, End: 1 << 62}, {Start: 3 << 62}}}
	if got, want := s.String(), "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000') || "+
		"shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')"; got != want {
		t.Errorf("String() = %s\nwant       %s", got, want)
	}
	ref := sharding.NewSelector(
		sharding.ShardRangeRequirement{Key: string(shard.UID), Start: "0x0000000000000000", End: "0x4000000000000000"},
		sharding.ShardRangeRequirement{Key: string(shard.UID), Start: "0xc000000000000000", End: "0x10000000000000000"})
	in := 0
	for i := range 1000 {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint(i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
		want, err := ref.Matches(pod)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Matches(pod); got != want {
			t.Fatalf("object %d: Matches = %v, apimachinery %v", i, got, want)
		}
		if want {
			in++
		}
	}
	if in < 400 || in > 600 {
		t.Errorf("half the space matched %d of 1000 objects", in)
	}
}

func TestSelector_validateRejectsWhatTheServerWould(t *testing.T) {
	for _, s := range []shard.Selector{
		{Key: "object.metadata.name", Ranges: []shard.Range{{}}},
		{Key: shard.UID},
		{Key: shard.Namespace, Ranges: []shard.Range{{Start: 5, End: 5}}},
	} {
		if err := s.Validate(); !errors.Is(err, shard.ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", s, err)
		}
	}
	if err := (shard.Selector{Key: shard.Namespace, Ranges: []shard.Range{{}}}).Validate(); err != nil {
		t.Errorf("everything by namespace: %v", err)
	}
}

func ExampleSelector() {
	lower := shard.Selector{Key: shard.UID, Ranges: []shard.Range{{Start: 0, End: 1 << 63}}}
	fmt.Println(lower)
	// Output: shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')
}

func TestSelector_matchesWithoutAllocating(t *testing.T) {
	s := shard.Selector{Key: shard.UID, Ranges: []shard.Range{{Start: 0, End: 1 << 63}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "4f3c2b1a-0000-4000-8000-000000000001"}}
	if n := testing.AllocsPerRun(100, func() { s.Matches(pod) }); n != 0 {
		t.Errorf("Matches allocates %v times per call", n)
	}
}

func TestByController_asAListwatchShardAllocatesNothing(t *testing.T) {
	sel := &shard.Selector{Key: shard.UID, Ranges: []shard.Range{{Start: 0, End: 1 << 63}}}
	var sink interface{ ServerSelector() string }
	allocs := testing.AllocsPerRun(100, func() { sink = shard.ByController{Selector: sel} })
	if allocs != 0 || sink.ServerSelector() != "" {
		t.Fatalf("ByController as an interface: %.0f allocations, server selector %q; want none and empty", allocs, sink.ServerSelector())
	}
}
