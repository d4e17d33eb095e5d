package workqueue

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkCore_AddGetDone measures the queue's bookkeeping alone (no lock,
// no goroutine): with depth keys waiting spread over flows flows, each op
// hands the next key out, ends it, and adds a fresh key of a random flow,
// so the depth stays put. With stamps, it keeps the times its metrics
// report, as a queue with a Registerer does (a manager's).
func BenchmarkCore_AddGetDone(b *testing.B) {
	for _, tc := range []struct{ flows, depth int }{{1, 100}, {100, 100}, {100, 10_000}, {10_000, 10_000}, {100, 60_000}} {
		for _, stamps := range []bool{false, true} {
			b.Run(fmt.Sprintf("flows=%d/depth=%d/stamps=%t", tc.flows, tc.depth, stamps), func(b *testing.B) {
				const n = 1 << 16
				keys, flows := make([]string, n), make([]string, n)
				for i := range keys {
					f := (i * 7919) % tc.flows // spread, not in order
					flows[i] = fmt.Sprintf("ns-%d", f)
					keys[i] = fmt.Sprintf("%s/k-%d", flows[i], i)
				}
				var c core[string]
				c.init(stamps, DefaultAgingStep, DefaultQuantum, 0)
				var at time.Time // zero: the caller read no clock
				if stamps {
					at = time.Unix(1, 0)
				}
				for i := range tc.depth {
					c.add(keys[i], 0, flows[i], at)
				}
				i := tc.depth
				for b.Loop() {
					k, _, _ := c.get(at)
					c.done(k, "", at)
					c.add(keys[i%n], 0, flows[i%n], at)
					i++
				}
			})
		}
	}
}
