package jsoncost_test

import (
	"testing"

	"github.com/ctrlkit/ctrlkit/internal/jsoncost"
)

// What an estimate costs beside decoding: a listwatch estimates every
// custom resource it receives (they come as JSON).
func BenchmarkEstimate_realisticPod(b *testing.B) {
	doc := []byte(realisticPod)
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		jsoncost.Estimate(doc)
	}
}
