package lease

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestTiming_WithDefaults(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name string
		in   Timing
		want Timing
		err  string
	}{
		{name: "all defaults are client-go's", want: Timing{15 * s, 10 * s, 2 * s}},
		{name: "a short lease derives the others from it", in: Timing{LeaseDuration: 3 * s},
			want: Timing{3 * s, 2 * s, 400 * time.Millisecond}},
		{name: "a given retry period is kept", in: Timing{LeaseDuration: 2 * s, RetryPeriod: 100 * time.Millisecond},
			want: Timing{2 * s, 2 * s * 2 / 3, 100 * time.Millisecond}},
		{name: "a renew deadline as long as the lease leaves no time to stop", in: Timing{10 * s, 10 * s, 0},
			err: "RenewDeadline 10s must be shorter than LeaseDuration 10s"},
		{name: "a retry period as long as the renew deadline never renews in time", in: Timing{LeaseDuration: s, RetryPeriod: 2 * s},
			err: "RetryPeriod 2s must be shorter than RenewDeadline"},
		{name: "a negative duration is refused", in: Timing{LeaseDuration: -s}, err: "negative duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.WithDefaults()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("WithDefaults(%+v): %v", tc.in, err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrInvalid)):
				t.Fatalf("WithDefaults(%+v) = %v, want an ErrInvalid saying %q", tc.in, err, tc.err)
			case tc.err == "" && got != tc.want:
				t.Errorf("WithDefaults(%+v) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestDefaultIdentity_differsBetweenCalls(t *testing.T) {
	a, b := DefaultIdentity(), DefaultIdentity()
	if a == b || len(a) < 8 || strings.HasPrefix(a, "_") {
		t.Errorf("DefaultIdentity() = %q then %q, want two different host_suffix names", a, b)
	}
}

func TestDefaults_fillsTheIdentityAndTheTiming(t *testing.T) {
	id, tm, err := Defaults("", Timing{})
	if err != nil || id == "" || tm != (Timing{15 * time.Second, 10 * time.Second, 2 * time.Second}) {
		t.Fatalf("Defaults(\"\", {}) = %q, %+v, %v; want a generated identity and the default timing", id, tm, err)
	}
	if id, _, err := Defaults("me", Timing{}); err != nil || id != "me" {
		t.Fatalf("Defaults(\"me\", {}) = %q, %v; want the identity given", id, err)
	}
	if _, _, err := Defaults("me", Timing{LeaseDuration: -time.Second}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Defaults with a negative duration: %v, want ErrInvalid", err)
	}
}

// lapsed reports whether f's Lapsed channel is closed.
func lapsed(f *Fence) bool {
	select {
	case <-f.Lapsed():
		return true
	default:
		return false
	}
}

func TestFence_lapsesRenewDeadlineAfterTheLastRenewalWasSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFence(10 * time.Second)
		defer f.Stop()
		time.Sleep(time.Minute)
		synctest.Wait()
		if lapsed(f) {
			t.Fatal("an unarmed fence lapsed")
		}
		start := time.Now()
		// A renewal sent 3s ago that just succeeded: 7s are left.
		f.Renewed(start.Add(-3 * time.Second))
		time.Sleep(5 * time.Second)
		f.Renewed(start.Add(4 * time.Second)) // sent 1s ago: the deadline moves to start+14s
		f.Renewed(start.Add(2 * time.Second)) // an older one answered late: changes nothing
		time.Sleep(8*time.Second + time.Second - time.Nanosecond)
		synctest.Wait()
		if lapsed(f) {
			t.Fatalf("lapsed at %s, before the deadline start+14s", time.Since(start))
		}
		if got := f.LastSent(); !got.Equal(start.Add(4 * time.Second)) {
			t.Errorf("LastSent = start%+v, want start+4s", got.Sub(start))
		}
		<-f.Lapsed()
		if d := time.Since(start); d != 14*time.Second {
			t.Errorf("lapsed at start+%s, want start+14s", d)
		}
		f.Renewed(time.Now()) // too late: a lapsed fence stays lapsed
		if !lapsed(f) {
			t.Error("a renewal un-lapsed the fence")
		}
	})
}

func TestFence_stoppedNeverLapses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFence(time.Second)
		f.Renewed(time.Now())
		f.Stop()
		time.Sleep(time.Minute)
		synctest.Wait()
		if lapsed(f) {
			t.Error("a stopped fence lapsed")
		}
	})
}
