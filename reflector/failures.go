package reflector

import (
	"context"
	"log/slog"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// streak is a run of failures of one op with the same code and reason. Its
// first failure is logged; the others are only counted in the failures
// metric, until the op succeeds again.
type streak struct {
	code   int32
	reason metav1.StatusReason
	n      int  // failures so far; 0: no streak
	warned bool // the first failure was logged at WARN, so the recovery is logged too
}

func (s *streak) same(e *Error) bool { return s.n > 0 && s.code == e.Code && s.reason == e.Reason }

// streaks are the failure streaks of lists and of watches. They are kept
// apart so that a list that succeeds does not end a streak of refused
// watches (a role that may list but not watch). Owned by the goroutine
// running Run or ListAndWatch.
type streaks struct{ list, watch streak }

func (ss *streaks) of(op string) *streak {
	if op == OpList {
		return &ss.list
	}
	return &ss.watch
}

// failed records a failed op: LastError, OnError, the failures metric, and a
// log line when the failure starts a streak. A 410 Gone, the server's
// routine request to resynchronise, is logged at INFO, anything else at
// WARN.
func (r *Reflector[T]) failed(ctx context.Context, op, rv string, cause error) {
	e := newError(op, r.opts.Name, cause)
	r.metrics.failure(op, e.Code)
	s := r.streaks.of(op)
	if !s.same(e) {
		level := slog.LevelWarn
		if isExpired(cause) {
			level = slog.LevelInfo
		}
		*s = streak{code: e.Code, reason: e.Reason, warned: level == slog.LevelWarn}
		r.opts.Logger.Log(ctx, level, "reflector: "+op+" failed; repeats are only counted until it recovers",
			"name", r.opts.Name, "code", e.Code, "reason", e.Reason, "rv", rv, "err", shortCause(cause))
	}
	s.n++
	r.setErr(e)
}

// succeeded ends op's failure streak, if any, with one INFO line when its
// start was logged at WARN.
func (r *Reflector[T]) succeeded(ctx context.Context, op string) {
	s := r.streaks.of(op)
	if s.n > 0 && s.warned {
		r.opts.Logger.Log(ctx, slog.LevelInfo, "reflector: "+op+" recovered", "name", r.opts.Name, "failures", s.n)
	}
	*s = streak{}
}
