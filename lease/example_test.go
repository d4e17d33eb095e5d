package lease_test

import (
	"fmt"
	"time"

	"github.com/ctrlkit/ctrlkit/lease"
)

// Giving only a lease duration derives the other timings from it.
func ExampleTiming_WithDefaults() {
	t, err := lease.Timing{LeaseDuration: 6 * time.Second}.WithDefaults()
	if err != nil {
		panic(err)
	}
	fmt.Println(t.LeaseDuration, t.RenewDeadline, t.RetryPeriod)
	_, err = lease.Timing{LeaseDuration: 5 * time.Second, RenewDeadline: 5 * time.Second}.WithDefaults()
	fmt.Println(err)
	// Output:
	// 6s 4s 800ms
	// lease: invalid timing: RenewDeadline 5s must be shorter than LeaseDuration 5s (fencing needs the gap)
}

// A replica records each renewal that succeeded with the time it was sent,
// and stops its work when the fence lapses.
func ExampleFence() {
	f := lease.NewFence(20 * time.Millisecond)
	defer f.Stop()
	f.Renewed(time.Now()) // say the renewals stop succeeding after this one
	<-f.Lapsed()
	fmt.Println("stop the work: no renewal succeeded for", 20*time.Millisecond)
	// Output: stop the work: no renewal succeeded for 20ms
}
