package workqueue

import (
	"context"
	"errors"
	"testing"
)

// newTestQueue returns a queue with default options that is shut down when
// the test ends.
func newTestQueue[K comparable](t *testing.T, opts Options[K]) *Queue[K] {
	t.Helper()
	q, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(q.ShutDown)
	return q
}

// step is one operation in a table test; it fails t if the queue does not
// answer as expected. Only non-blocking uses of Get appear in tables.
type step func(t *testing.T, q *Queue[string])

func add(k string) step {
	return func(_ *testing.T, q *Queue[string]) { q.Add(k) }
}

func done(k string) step {
	return func(_ *testing.T, q *Queue[string]) { q.Done(k) }
}

func shutDown() step {
	return func(_ *testing.T, q *Queue[string]) { q.ShutDown() }
}

// get expects Get to hand out want.
func get(want string) step {
	return func(t *testing.T, q *Queue[string]) {
		t.Helper()
		if got, shutdown := q.Get(); got != want || shutdown {
			t.Fatalf("Get() = %q, %v; want %q, false", got, shutdown, want)
		}
	}
}

// getShutdown expects Get to report shutdown.
func getShutdown() step {
	return func(t *testing.T, q *Queue[string]) {
		t.Helper()
		if got, shutdown := q.Get(); got != "" || !shutdown {
			t.Fatalf("Get() = %q, %v; want \"\", true", got, shutdown)
		}
	}
}

func wantLen(n int) step {
	return func(t *testing.T, q *Queue[string]) {
		t.Helper()
		if got := q.Len(); got != n {
			t.Fatalf("Len() = %d, want %d", got, n)
		}
	}
}

func TestQueue_Guarantees(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"keys are handed out in the order they were added", []step{
			add("a"), add("b"), add("c"), get("a"), get("b"), get("c"), wantLen(0),
		}},
		{"duplicates collapse while queued", []step{
			add("a"), add("b"), add("a"), add("a"), wantLen(2), get("a"), get("b"), wantLen(0),
		}},
		{"a key being processed is not handed out again before Done", []step{
			add("a"), get("a"), add("a"), add("b"), wantLen(1), get("b"), wantLen(0),
		}},
		{"a key added while being processed is queued again at Done", []step{
			add("a"), get("a"), add("a"), add("a"), wantLen(0), done("a"), wantLen(1), get("a"), done("a"), wantLen(0),
		}},
		{"a key done without being re-added is not queued again", []step{
			add("a"), get("a"), done("a"), wantLen(0), add("a"), wantLen(1),
		}},
		{"done for a key not being processed changes nothing", []step{
			add("a"), done("a"), done("b"), wantLen(1), get("a"),
		}},
		{"items still queued are handed out after shutdown", []step{
			add("a"), add("b"), shutDown(), get("a"), get("b"), getShutdown(),
		}},
		{"shutdown is reported only when the queue is empty", []step{
			add("a"), shutDown(), wantLen(1), get("a"), getShutdown(), getShutdown(),
		}},
		{"add after shutdown is ignored", []step{
			shutDown(), add("a"), wantLen(0), getShutdown(),
		}},
		{"a key re-added before shutdown is handed out after Done", []step{
			add("a"), get("a"), add("a"), shutDown(), done("a"), get("a"), done("a"), getShutdown(),
		}},
		{"shutting down twice is harmless", []step{
			add("a"), shutDown(), shutDown(), get("a"), getShutdown(),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newTestQueue(t, Options[string]{})
			for _, s := range tc.steps {
				s(t, q)
				if err := q.core.checkInvariants(q.flowKey); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestQueue_ShuttingDown(t *testing.T) {
	q := newTestQueue(t, Options[string]{})
	if q.ShuttingDown() {
		t.Fatal("ShuttingDown() = true before ShutDown")
	}
	q.ShutDown()
	if !q.ShuttingDown() {
		t.Fatal("ShuttingDown() = false after ShutDown")
	}
}

func TestQueue_DrainWaitsForQueuedAndInFlightKeys(t *testing.T) {
	q := newTestQueue(t, Options[string]{})
	q.Add("a")
	q.Add("b")
	get("a")(t, q)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := q.ShutDownWithDrain(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("ShutDownWithDrain with a queued and an in-flight key = %v, want context.Canceled", err)
	}
	done("a")(t, q)
	if err := q.ShutDownWithDrain(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("ShutDownWithDrain with a queued key = %v, want context.Canceled", err)
	}
	get("b")(t, q)
	done("b")(t, q)
	if err := q.ShutDownWithDrain(ctx); err != nil {
		t.Fatalf("ShutDownWithDrain on an empty queue = %v, want nil even with a cancelled context", err)
	}
}
