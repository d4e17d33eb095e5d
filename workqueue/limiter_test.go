package workqueue

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// whens calls l.When(key, now) once per entry of at (offsets from t0).
func whens(l RateLimiter[string], key string, at ...time.Duration) []time.Duration {
	var got []time.Duration
	for _, d := range at {
		got = append(got, l.When(key, t0.Add(d)))
	}
	return got
}

func equal(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRateLimiter_When(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		limiter RateLimiter[string]
		at      []time.Duration
		want    []time.Duration
	}{
		{"exponential doubles from base", NewItemExponential[string](5*ms, time.Second),
			[]time.Duration{0, 0, 0, 0}, []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms}},
		{"exponential stops at max", NewItemExponential[string](300*ms, time.Second),
			[]time.Duration{0, 0, 0, 0}, []time.Duration{300 * ms, 600 * ms, time.Second, time.Second}},
		{"exponential with base above max waits max", NewItemExponential[string](time.Minute, time.Second),
			[]time.Duration{0}, []time.Duration{time.Second}},
		{"exponential with zero base never waits", NewItemExponential[string](0, time.Second),
			[]time.Duration{0, 0}, []time.Duration{0, 0}},
		{"fast then slow", NewFastSlow[string](ms, time.Minute, 2),
			[]time.Duration{0, 0, 0, 0}, []time.Duration{ms, ms, time.Minute, time.Minute}},
		{"bucket lets the burst through then spaces retries", NewBucket[string](rate.Limit(10), 2),
			[]time.Duration{0, 0, 0, 0}, []time.Duration{0, 0, 100 * ms, 200 * ms}},
		{"bucket refills with time", NewBucket[string](rate.Limit(10), 1),
			[]time.Duration{0, 0, time.Second}, []time.Duration{0, 100 * ms, 0}},
		{"max of takes the longest", NewMaxOf[string](NewFastSlow[string](50*ms, time.Minute, 1), NewItemExponential[string](10*ms, time.Hour)),
			[]time.Duration{0, 0, 0}, []time.Duration{50 * ms, time.Minute, time.Minute}},
		{"with max wait caps", NewWithMaxWait[string](NewItemExponential[string](time.Second, time.Hour), 3*time.Second),
			[]time.Duration{0, 0, 0}, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}},
		{"default: exponential from 5ms while the bucket has tokens", DefaultControllerRateLimiter[string](),
			[]time.Duration{0, 0, 0}, []time.Duration{5 * ms, 10 * ms, 20 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := whens(tc.limiter, "k", tc.at...); !equal(got, tc.want) {
				t.Fatalf("When = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRateLimiter_DefaultBucketLimitsAllKeysTogether(t *testing.T) {
	l := DefaultControllerRateLimiter[int]()
	for k := range 100 { // the burst: each key's first failure waits 5ms
		if d := l.When(k, t0); d != 5*time.Millisecond {
			t.Fatalf("When(%d) = %v within the burst, want 5ms", k, d)
		}
	}
	if d := l.When(100, t0); d != 100*time.Millisecond {
		t.Fatalf("When(100) = %v after the burst of 100, want 100ms (10 qps)", d)
	}
}

func TestItemExponential_IsOverflowSafe(t *testing.T) {
	for _, n := range []int{62, 63, 64, 1000, math.MaxInt - 1, math.MaxInt} {
		l := NewItemExponential[string](5*time.Millisecond, 1000*time.Second)
		l.failures["k"] = n
		if d := l.When("k", t0); d != 1000*time.Second {
			t.Errorf("When after %d failures = %v, want the max 1000s", n, d)
		}
		if got := l.NumRequeues("k"); got < n {
			t.Errorf("NumRequeues after %d failures = %d, the count wrapped", n, got)
		}
	}
	if d := backoff(time.Duration(math.MaxInt64/2+1), math.MaxInt64, 1); d != math.MaxInt64 {
		t.Errorf("backoff with base*2 past MaxInt64 = %v, want the max", d)
	}
}

func TestRateLimiter_ForgetAndNumRequeues(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limiter RateLimiter[string]
		want    int // NumRequeues after 3 failures
	}{
		{"exponential", NewItemExponential[string](time.Millisecond, time.Second), 3},
		{"fast slow", NewFastSlow[string](time.Millisecond, time.Second, 1), 3},
		{"bucket keeps no count", NewBucket[string](rate.Limit(10), 100), 0},
		{"max of", NewMaxOf[string](NewBucket[string](1, 1), NewFastSlow[string](0, 0, 1)), 3},
		{"with max wait", NewWithMaxWait[string](NewItemExponential[string](1, 2), time.Second), 3},
		{"default", DefaultControllerRateLimiter[string](), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whens(tc.limiter, "k", 0, 0, 0)
			whens(tc.limiter, "other", 0)
			if got := tc.limiter.NumRequeues("k"); got != tc.want {
				t.Fatalf("NumRequeues after 3 failures = %d, want %d", got, tc.want)
			}
			tc.limiter.Forget("k")
			if got := tc.limiter.NumRequeues("k"); got != 0 {
				t.Fatalf("NumRequeues after Forget = %d, want 0", got)
			}
			if got := tc.limiter.NumRequeues("other"); got != min(tc.want, 1) {
				t.Fatalf("Forget(k) changed another key's count to %d", got)
			}
		})
	}
}

// The limiters are safe for concurrent use, as client-go's are: one shared
// by goroutines counts every failure (run under -race, which reports any
// unguarded access).
func TestRateLimiter_SafeForConcurrentUse(t *testing.T) {
	const goroutines, failures = 4, 500
	for _, tc := range []struct {
		name    string
		limiter RateLimiter[string]
	}{
		{"exponential", NewItemExponential[string](time.Millisecond, time.Second)},
		{"fast slow", NewFastSlow[string](time.Millisecond, time.Second, 1)},
		{"default", DefaultControllerRateLimiter[string]()},
		{"with max wait", NewWithMaxWait[string](NewFastSlow[string](0, time.Second, 1), time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					other := fmt.Sprint("other-", g)
					for range failures {
						tc.limiter.When("shared", t0)
						tc.limiter.When(other, t0)
						tc.limiter.NumRequeues("shared")
						tc.limiter.Forget(other)
					}
				})
			}
			wg.Wait()
			if got := tc.limiter.NumRequeues("shared"); got != goroutines*failures {
				t.Errorf("NumRequeues = %d after %d failures from %d goroutines", got, goroutines*failures, goroutines)
			}
			for g := range goroutines {
				if got := tc.limiter.NumRequeues(fmt.Sprint("other-", g)); got != 0 {
					t.Errorf("other-%d: NumRequeues = %d after Forget", g, got)
				}
			}
		})
	}
}

func TestRateLimiter_ForgetFreesPerKeyState(t *testing.T) {
	exp := NewItemExponential[int](time.Millisecond, time.Second)
	fs := NewFastSlow[int](time.Millisecond, time.Second, 3)
	l := NewWithMaxWait[int](NewMaxOf[int](exp, fs, NewBucket[int](rate.Inf, 1)), time.Minute)
	for k := range 1_000_000 {
		l.When(k, t0)
		l.Forget(k)
	}
	if len(exp.failures) != 0 || len(fs.failures) != 0 {
		t.Fatalf("after a million keys failed once and were forgotten, %d and %d keys remain", len(exp.failures), len(fs.failures))
	}
}

func TestQueue_AddRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTestQueue(t, Options[string]{RateLimiter: NewItemExponential[string](time.Second, time.Minute)})
		start := time.Now()
		for i, want := range []time.Duration{time.Second, 3 * time.Second, 7 * time.Second} {
			q.AddRateLimited("a")
			get("a")(t, q)
			if waited := time.Since(start); waited != want {
				t.Fatalf("retry %d handed out after %v, want %v (backoff 1s, 2s, 4s)", i+1, waited, want)
			}
			done("a")(t, q)
		}
		if n := q.NumRequeues("a"); n != 3 {
			t.Fatalf("NumRequeues = %d after 3 rate-limited adds, want 3", n)
		}
		q.Forget("a")
		if n := q.NumRequeues("a"); n != 0 {
			t.Fatalf("NumRequeues = %d after Forget, want 0", n)
		}
		q.AddRateLimited("a")
		get("a")(t, q)
		if waited := time.Since(start); waited != 8*time.Second {
			t.Fatalf("after Forget the retry came at %v, want 8s (the base delay again)", waited)
		}
	})
}
