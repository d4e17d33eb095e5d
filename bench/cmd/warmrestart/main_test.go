package main

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

// TestMain runs the test binary as a child when the parent re-executes it.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-child" {
		os.Exit(childMain(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// lockedBuffer is a buffer safe for the server's and the children's
// concurrent output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestWarmRestart_endToEnd(t *testing.T) {
	leakcheck.Check(t)
	var progress lockedBuffer
	cfg := config{Objects: 300, Rounds: 1, Chaos: 1, ChaosRate: 50, Timeout: time.Minute}
	rep, err := run(t.Context(), cfg, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	defer func() {
		if t.Failed() {
			t.Log(progress.String())
		}
	}()
	checkRound(t, rep.Rounds[0])
	checkCompaction(t, rep.Compaction)
	if len(rep.Chaos.Starts) != 1 || divergent(rep.Chaos.Starts) != 0 || rep.Chaos.Changes == 0 {
		t.Errorf("chaos: %d starts, %d divergent, %d changes; want 1, 0 and some", len(rep.Chaos.Starts), divergent(rep.Chaos.Starts), rep.Chaos.Changes)
	}
	var out bytes.Buffer
	writeReport(&out, rep)
	for _, want := range []string{"| ctrlkit warm | warm |", "| ctrlkit warm, nothing changed since its snapshot | warm |", "## Compaction round", "## Chaos"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// checkRound wants a cold start, then a warm one that received less and
// heard the churn, and three caches equal to the server's.
func checkRound(t *testing.T, rd round) {
	t.Helper()
	if rd.Cold.Warm || rd.Cold.Reason != "no snapshot yet" || rd.Cold.Snapshot.Writes != 1 {
		t.Errorf("first start: warm %v (%q), %d snapshot writes; want cold, no snapshot yet, 1 write", rd.Cold.Warm, rd.Cold.Reason, rd.Cold.Snapshot.Writes)
	}
	if !rd.Warm.Warm || rd.Warm.SnapshotObjects != 300 {
		t.Errorf("second start: warm %v (%q) from %d objects; want warm from 300", rd.Warm.Warm, rd.Warm.Reason, rd.Warm.SnapshotObjects)
	}
	if rd.Warm.Bytes >= rd.Cold.Bytes {
		t.Errorf("warm start received %d bytes, cold %d: want fewer", rd.Warm.Bytes, rd.Cold.Bytes)
	}
	checkHeardChurn(t, "warm start", rd.Warm, rd.Churn)
	if q := rd.Quiet; !q.Warm || q.SnapshotObjects != 300 || q.Heard.Updates+q.Heard.Deletes != 0 || q.newAdds() != 0 {
		t.Errorf("third start, nothing changed: warm %v (%q) from %d objects, heard %+v beyond the snapshot's %d adds; want warm from 300, nothing more",
			q.Warm, q.Reason, q.SnapshotObjects, q.Heard, q.SnapshotObjects)
	}
	if n := divergent([]result{rd.Cold, rd.Warm, rd.Quiet, rd.ClientGo}); n != 0 {
		t.Errorf("%d divergent keys: %v %v %v %v", n, rd.Cold.Divergent, rd.Warm.Divergent, rd.Quiet.Divergent, rd.ClientGo.Divergent)
	}
}

// checkCompaction wants a cold start naming the lost history, whose
// handlers heard the churn alone, and a cache equal to the server's.
func checkCompaction(t *testing.T, c compaction) {
	t.Helper()
	r := c.Start
	if r.Warm || !strings.Contains(r.Reason, "no longer has resource version") {
		t.Errorf("start after compaction: warm %v (%q); want cold naming the lost history", r.Warm, r.Reason)
	}
	checkHeardChurn(t, "start after compaction", r, c.Churn)
	if len(r.Divergent) != 0 {
		t.Errorf("after compaction: divergent %v", r.Divergent)
	}
}

// checkHeardChurn wants r's handler to have heard, beyond the snapshot,
// something and no more than the churn: handlers may coalesce a change
// with a notification not yet delivered (an update into the object's
// initial add, a delete with the initial add into nothing, as when the
// server's events arrive while the snapshot's objects are still being
// delivered), so each count is at most the churn's, and "something" may be
// an initial add fewer than the snapshot held. That the handler was told
// exactly what the server holds is checked by r.Divergent (see check).
func checkHeardChurn(t *testing.T, what string, r result, c churn) {
	t.Helper()
	h, added := r.Heard, r.newAdds()
	heardSome := h.Updates+h.Deletes+h.Adds > 0 || h.InitialAdds != int64(r.SnapshotObjects)
	if h.Updates > int64(c.Updated) || h.Deletes > int64(c.Deleted) || added > int64(c.Created) || added < -int64(c.Deleted) || !heardSome {
		t.Errorf("%s heard %+v (%d adds beyond the %d objects of the snapshot); churn was %+v", what, h, added, r.SnapshotObjects, c)
	}
}
