package workqueue

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimiter decides how long a key that failed waits before it is retried.
//
// Implementations take the time as an argument. A Queue serializes its
// calls to its limiter, so one written for a single queue need not be safe
// for concurrent use; the limiters of this package are (as client-go's
// are), so one may be shared or called from several goroutines.
type RateLimiter[K comparable] interface {
	// When records one more failure of key at now and returns how long
	// the key should wait before it is retried.
	When(key K, now time.Time) time.Duration
	// Forget drops everything the limiter remembers about key.
	Forget(key K)
	// NumRequeues returns how many failures of key are remembered.
	NumRequeues(key K) int
}

// DefaultControllerRateLimiter returns the limiter a Queue uses by default:
// the larger of a per-key exponential backoff from 5 ms to 1000 s and an
// overall token bucket of 10 retries a second with a burst of 100.
func DefaultControllerRateLimiter[K comparable]() RateLimiter[K] {
	return NewMaxOf(
		NewItemExponential[K](5*time.Millisecond, 1000*time.Second),
		NewBucket[K](rate.Limit(10), 100),
	)
}

// ItemExponential backs off each key on its own: base, 2*base, 4*base, ...
// capped at maxDelay, however many failures (no overflow).
// Safe for concurrent use.
type ItemExponential[K comparable] struct {
	mu             sync.Mutex
	base, maxDelay time.Duration
	failures       map[K]int
}

// NewItemExponential returns a per-key exponential backoff from base to
// maxDelay.
func NewItemExponential[K comparable](base, maxDelay time.Duration) *ItemExponential[K] {
	return &ItemExponential[K]{base: base, maxDelay: maxDelay, failures: map[K]int{}}
}

// When returns base * 2^(previous failures of key), capped at maxDelay.
func (e *ItemExponential[K]) When(key K, _ time.Time) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.failures[key]
	if n < math.MaxInt {
		e.failures[key] = n + 1
	}
	return backoff(e.base, e.maxDelay, n)
}

// backoff returns base << n capped at limit, without overflowing.
func backoff(base, limit time.Duration, n int) time.Duration {
	if base <= 0 {
		return 0
	}
	if base > limit || n >= 63 || base > limit>>n {
		return limit
	}
	return base << n
}

// Forget drops key's failure count.
func (e *ItemExponential[K]) Forget(key K) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.failures) > 0 { // a queue forgets a key after every success
		delete(e.failures, key)
	}
}

// NumRequeues returns key's failure count.
func (e *ItemExponential[K]) NumRequeues(key K) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failures[key]
}

// FastSlow retries each key quickly a few times, then slowly.
// Safe for concurrent use.
type FastSlow[K comparable] struct {
	mu         sync.Mutex
	fast, slow time.Duration
	maxFast    int
	failures   map[K]int
}

// NewFastSlow returns a limiter that waits fast for a key's first maxFast
// failures and slow after that.
func NewFastSlow[K comparable](fast, slow time.Duration, maxFast int) *FastSlow[K] {
	return &FastSlow[K]{fast: fast, slow: slow, maxFast: maxFast, failures: map[K]int{}}
}

// When returns fast for the first maxFast failures of key, then slow.
func (f *FastSlow[K]) When(key K, _ time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.failures[key]
	if n < math.MaxInt {
		n++
		f.failures[key] = n
	}
	if n <= f.maxFast {
		return f.fast
	}
	return f.slow
}

// Forget drops key's failure count.
func (f *FastSlow[K]) Forget(key K) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failures) > 0 {
		delete(f.failures, key)
	}
}

// NumRequeues returns key's failure count.
func (f *FastSlow[K]) NumRequeues(key K) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failures[key]
}

// Bucket limits retries of all keys together with a token bucket; it keeps
// no state per key. Safe for concurrent use.
type Bucket[K comparable] struct {
	limiter *rate.Limiter
}

// NewBucket returns a token bucket that refills at r tokens a second and
// holds at most burst tokens, starting full.
func NewBucket[K comparable](r rate.Limit, burst int) *Bucket[K] {
	return &Bucket[K]{limiter: rate.NewLimiter(r, burst)}
}

// When takes a token at now and returns how long until it is available.
func (b *Bucket[K]) When(_ K, now time.Time) time.Duration {
	return b.limiter.ReserveN(now, 1).DelayFrom(now)
}

// Forget does nothing: the bucket keeps no per-key state.
func (b *Bucket[K]) Forget(K) {}

// NumRequeues returns 0: the bucket does not count per key.
func (b *Bucket[K]) NumRequeues(K) int { return 0 }

// MaxOf combines limiters: the wait is the longest of theirs. It is safe
// for concurrent use when they are.
type MaxOf[K comparable] struct {
	limiters []RateLimiter[K]
}

// NewMaxOf returns a limiter that asks every one of limiters.
func NewMaxOf[K comparable](limiters ...RateLimiter[K]) *MaxOf[K] {
	return &MaxOf[K]{limiters: limiters}
}

// When records the failure in every limiter and returns the longest wait.
func (m *MaxOf[K]) When(key K, now time.Time) time.Duration {
	var d time.Duration
	for _, l := range m.limiters {
		d = max(d, l.When(key, now))
	}
	return d
}

// Forget makes every limiter forget key.
func (m *MaxOf[K]) Forget(key K) {
	for _, l := range m.limiters {
		l.Forget(key)
	}
}

// NumRequeues returns the largest count among the limiters.
func (m *MaxOf[K]) NumRequeues(key K) int {
	n := 0
	for _, l := range m.limiters {
		n = max(n, l.NumRequeues(key))
	}
	return n
}

// WithMaxWait caps another limiter's wait. It is safe for concurrent use
// when the limiter it wraps is.
type WithMaxWait[K comparable] struct {
	limiter RateLimiter[K]
	maxWait time.Duration
}

// NewWithMaxWait returns limiter with every wait capped at maxWait.
func NewWithMaxWait[K comparable](limiter RateLimiter[K], maxWait time.Duration) *WithMaxWait[K] {
	return &WithMaxWait[K]{limiter: limiter, maxWait: maxWait}
}

// When returns the wrapped limiter's wait, at most maxWait.
func (w *WithMaxWait[K]) When(key K, now time.Time) time.Duration {
	return min(w.limiter.When(key, now), w.maxWait)
}

// Forget makes the wrapped limiter forget key.
func (w *WithMaxWait[K]) Forget(key K) { w.limiter.Forget(key) }

// NumRequeues returns the wrapped limiter's count.
func (w *WithMaxWait[K]) NumRequeues(key K) int { return w.limiter.NumRequeues(key) }
