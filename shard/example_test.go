package shard_test

import (
	"fmt"

	"github.com/ctrlkit/ctrlkit/shard"
)

// Two replicas share 4 virtual shards of the UID hash space, two each (here
// adjacent ones, merged); each lists and watches with its own selector,
// which the API server applies.
func ExampleAssign() {
	shares, err := shard.Assign(shard.UID, []string{"replica-a", "replica-b"}, 4)
	if err != nil {
		panic(err)
	}
	for _, m := range []string{"replica-a", "replica-b"} {
		fmt.Printf("%s: %s\n", m, shares[m])
	}
	// Output:
	// replica-a: shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')
	// replica-b: shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')
}

// The virtual shard of an object is the range its hash falls in.
func ExampleVirtualOf() {
	h := shard.Hash("team-a") // the namespace key hashes the namespace
	fmt.Println(shard.VirtualOf(h, 64) == int(h>>58))
	// Output: true
}
