// Package lease holds what ctrlkit's two protocols on coordination.k8s.io/v1
// Leases share: leader election (package election, over client-go's
// tools/leaderelection) and ring membership (package shard, by hand). Both
// renew a Lease every RetryPeriod, stop their work RenewDeadline after the
// last renewal that succeeded, and count another replica dead LeaseDuration
// after its last renewal; this package holds those timings (Timing), the
// default name of a replica (DefaultIdentity) and the timer that stops the
// work in time (Fence).
package lease

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/rand"
)

// ErrInvalid reports a Timing that would break fencing.
var ErrInvalid = errors.New("lease: invalid timing")

// Timing is how a replica renews its Lease and when the others give up on
// it. Zero fields take defaults (see WithDefaults); a replica is safe only
// if RetryPeriod < RenewDeadline < LeaseDuration, and the gap between the
// last two is the time it has to stop its work before another replica may
// take it over.
type Timing struct {
	// LeaseDuration is how long the other replicas wait, after the last
	// renewal they saw, before they take over. Default: 15s.
	LeaseDuration time.Duration
	// RenewDeadline is how long a replica keeps working without a
	// successful renewal, counted from when its last successful one was
	// sent: then it stops (see Fence). Default: LeaseDuration × 2/3.
	RenewDeadline time.Duration
	// RetryPeriod is the wait between attempts to acquire or renew the
	// Lease (and, for ring membership, to read the others').
	// Default: RenewDeadline / 5, at most 2s.
	RetryPeriod time.Duration
}

// WithDefaults returns t with its zero fields set to their defaults, or an
// error wrapping ErrInvalid when a field is negative or the order
// RetryPeriod < RenewDeadline < LeaseDuration does not hold.
func (t Timing) WithDefaults() (Timing, error) {
	if t.LeaseDuration < 0 || t.RenewDeadline < 0 || t.RetryPeriod < 0 {
		return t, fmt.Errorf("%w: negative duration in %+v", ErrInvalid, t)
	}
	if t.LeaseDuration == 0 {
		t.LeaseDuration = 15 * time.Second
	}
	if t.RenewDeadline == 0 {
		t.RenewDeadline = t.LeaseDuration * 2 / 3
	}
	if t.RetryPeriod == 0 {
		t.RetryPeriod = min(t.RenewDeadline/5, 2*time.Second)
	}
	if t.RenewDeadline >= t.LeaseDuration {
		return t, fmt.Errorf("%w: RenewDeadline %s must be shorter than LeaseDuration %s (fencing needs the gap)",
			ErrInvalid, t.RenewDeadline, t.LeaseDuration)
	}
	if t.RetryPeriod >= t.RenewDeadline {
		return t, fmt.Errorf("%w: RetryPeriod %s must be shorter than RenewDeadline %s", ErrInvalid, t.RetryPeriod, t.RenewDeadline)
	}
	return t, nil
}

// Defaults returns what a replica taking part in a Lease starts with: its
// identity, or DefaultIdentity() when identity is empty, and
// t.WithDefaults() (or its error).
func Defaults(identity string, t Timing) (string, Timing, error) {
	if identity == "" {
		identity = DefaultIdentity()
	}
	t, err := t.WithDefaults()
	return identity, t, err
}

// DefaultIdentity names this process in a Lease when the user gave no
// name: the host name, "_" and a random suffix, so two processes on one
// host differ.
func DefaultIdentity() string {
	host, _ := os.Hostname()
	return strings.TrimPrefix(host+"_"+rand.String(8), "_")
}
