package workqueue

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestQueue_statsShowDepthOldestProcessingAndRedirtied(t *testing.T) {
	clock := newFakeClock()
	q, err := New[string](Options[string]{Name: "q", Registerer: prometheus.NewRegistry(), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer q.ShutDown()
	t0 := clock.Now()
	q.Add("a")
	clock.step(time.Second)
	q.Add("b")
	q.Add("c")
	if k, _ := q.Get(); k != "a" {
		t.Fatalf("Get = %s, want a", k)
	}
	clock.step(time.Second)
	q.Add("a") // while processing: queued again at Done

	st := q.Stats()
	if st.Depth != 2 || len(st.Bands) != 1 || st.Bands[0].Name != "0" || st.Bands[0].Depth != 2 || st.Redirtied != 1 {
		t.Errorf("stats = %+v, want depth 2 in one band and one key re-added", st)
	}
	if st.Oldest == nil || st.Oldest.Key != "b" || !st.Oldest.Since.Equal(t0.Add(time.Second)) {
		t.Errorf("oldest = %+v, want b since t0+1s", st.Oldest)
	}
	if len(st.Processing) != 1 || st.Processing[0].Key != "a" || !st.Processing[0].Since.Equal(t0.Add(time.Second)) {
		t.Errorf("processing = %+v, want a since t0+1s", st.Processing)
	}

	for _, tc := range []struct {
		key  string
		want KeyState
	}{
		{"a", KeyState{Processing: true, Redirtied: true, Since: t0.Add(time.Second)}},
		{"b", KeyState{Queued: true, Position: 0, Since: t0.Add(time.Second)}},
		{"c", KeyState{Queued: true, Position: 1, Since: t0.Add(time.Second)}},
		{"nobody", KeyState{}},
	} {
		if got := q.State(tc.key); got != tc.want {
			t.Errorf("State(%s) = %+v, want %+v", tc.key, got, tc.want)
		}
	}
	q.Done("a")
	if got := q.State("a"); !got.Queued || got.Position != 2 {
		t.Errorf("State(a) after Done = %+v, want queued last", got)
	}
	q.AddWithPriority("urgent", 10)
	st = q.Stats()
	if len(st.Bands) != 2 || st.Bands[0].Priority != 10 || st.Bands[0].Depth != 1 || st.Bands[1].Depth != 3 {
		t.Errorf("bands = %+v, want priority 10 with one key, then 0 with three", st.Bands)
	}
	if got := q.State("urgent"); !got.Queued || got.Position != 0 {
		t.Errorf("State(urgent) = %+v, want first in line", got)
	}
	if got := q.State("b"); !got.Queued || got.Position != 1 {
		t.Errorf("State(b) = %+v, want behind the urgent key", got)
	}
	q.mu.Lock()
	err = q.core.checkInvariants(q.flowKey)
	q.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
}

func TestQueue_statsWithoutMetricsHaveNoTimes(t *testing.T) {
	q, err := New[string](Options[string]{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.ShutDown()
	q.Add("a")
	st := q.Stats()
	if st.Depth != 1 || st.Oldest == nil || !st.Oldest.Since.IsZero() {
		t.Errorf("stats = %+v, want a with no time", st)
	}
	q.Add("b")
	q.Add("c")
	for range 2 {
		q.Get() // a, b
	}
	q.Add("b") // re-added while processing
	st = q.Stats()
	got := map[string]bool{}
	for _, p := range st.Processing {
		got[p.Key] = p.Since.IsZero()
	}
	if st.Depth != 1 || st.Redirtied != 1 || len(st.Processing) != 2 || !got["a"] || !got["b"] {
		t.Errorf("stats = %+v, want c queued, a and b processing (b re-added), no times", st)
	}
	q.ShutDown()
	if !q.Stats().ShuttingDown {
		t.Error("stats after ShutDown do not say so")
	}
}

// TestQueue_StatePositionIsTheOrderOfGet fills queues at random (several
// flows, two priorities, keys moving up, keys handed out and re-added,
// quanta 1 to 4) and checks that the Position State reports for every
// queued key is the order in which Get then hands them out.
func TestQueue_StatePositionIsTheOrderOfGet(t *testing.T) {
	for seed := range uint64(50) {
		synctest.Test(t, func(t *testing.T) { // no time passes: no band ages
			rnd := rand.New(rand.NewPCG(seed, 7))
			q := newTestQueue(t, Options[string]{Fairness: Fairness[string]{Quantum: 1 + rnd.IntN(4)}})
			key := func() string { return fmt.Sprintf("ns%d/k%d", rnd.IntN(4), rnd.IntN(30)) }
			for range 200 {
				switch r := rnd.IntN(10); {
				case r < 6:
					q.Add(key())
				case r < 7:
					q.AddWithOpts(key(), AddOpts{Priority: 1})
				case q.Len() > 0:
					k, _ := q.Get()
					if rnd.IntN(2) == 0 {
						q.Add(k) // re-added while processing: queued again at Done
					}
					q.Done(k)
				}
			}
			want := map[int]string{}
			for _, k := range q.queuedKeys() {
				st := q.State(k)
				if prev, dup := want[st.Position]; dup || !st.Queued {
					t.Fatalf("seed %d: State(%s) = %+v; position also held by %q", seed, k, st, prev)
				}
				want[st.Position] = k
			}
			for i := range len(want) {
				k, _ := q.Get()
				if k != want[i] {
					t.Fatalf("seed %d: Get #%d = %s, State said %s", seed, i, k, want[i])
				}
				q.Done(k)
			}
		})
	}
}

// queuedKeys returns the keys waiting for a worker.
func (q *Queue[K]) queuedKeys() []K {
	q.mu.Lock()
	defer q.mu.Unlock()
	var keys []K
	for k, e := range q.core.keys {
		if e.seq != 0 && e.seq != processingSeq {
			keys = append(keys, k)
		}
	}
	return keys
}
