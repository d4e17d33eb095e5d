package reflector

import "time"

// backoff is jittered exponential backoff that forgets after a quiet spell:
// each delay is the current step plus up to one step of jitter, capped at
// max; the step doubles after each failure and returns to initial once no
// failure has happened for resetAfter. It is pure: the time and the random
// number are arguments.
type backoff struct {
	initial, max, resetAfter time.Duration

	step time.Duration // 0 before the first failure
	last time.Time     // time of the last failure
}

// next returns how long to wait after a failure at now; rnd is in [0, 1).
func (b *backoff) next(now time.Time, rnd float64) time.Duration {
	if b.step == 0 || now.Sub(b.last) >= b.resetAfter {
		b.step = b.initial
	}
	d := b.step + time.Duration(rnd*float64(b.step))
	if d > b.max {
		d = b.max
	}
	b.step = min(2*b.step, b.max)
	b.last = now
	return d
}
