package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/shard"
)

const (
	// demoRing is the ring "ctrlkit demo --shards" runs its replicas in;
	// its Leases are in the namespace "default" (run foo's
	// --lease-namespace).
	demoRing = "foo"
	// demoShardLease is the replicas' --lease-duration: short, so that a
	// killed replica's shards move within seconds.
	demoShardLease = 4 * time.Second
)

// replica is one process of the demo's ring, as the demo sees it.
type replica struct {
	id string

	mu     sync.Mutex   // guards the fields below
	addr   string       // its HTTP listener, once it printed it
	last   replicaState // the last state read from its /debug/ctrlkit/state.json
	killed bool         // the demo sent it SIGKILL
}

// replicaState is what the demo shows of a replica's work.
type replicaState struct {
	seen               bool   // read at least once
	cached             int    // Foos in its cache: those of its shards
	reconciles, errors uint64 // of its foo controller
}

// sawLine reads the replica's stdout for the address "run foo" prints.
func (r *replica) sawLine(line string) {
	if addr, ok := strings.CutPrefix(line, servingPrefix); ok {
		r.mu.Lock()
		r.addr = addr
		r.mu.Unlock()
	}
}

func (r *replica) snapshot() (st replicaState, killed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.killed
}

// poll reads the replica's state from its debug page's JSON document (the
// controller's and informers' snapshots), unless it is killed or has not
// said where it listens yet. A failed read keeps the last state.
func (r *replica) poll(ctx context.Context, client *http.Client) {
	r.mu.Lock()
	addr, killed := r.addr, r.killed
	r.mu.Unlock()
	if addr == "" || killed {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+debug.Path+"/state.json", nil)
	if err != nil {
		return
	}
	resp, err := client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var doc debug.State
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&doc) != nil {
		return
	}
	st := replicaState{seen: true}
	for _, inf := range doc.Informers {
		if strings.HasSuffix(inf.Kind, " Foo") {
			st.cached = inf.Objects
		}
	}
	for _, c := range doc.Controllers {
		if c.Name == "foo" {
			st.reconciles, st.errors = c.Reconciles, c.Errors
		}
	}
	r.mu.Lock()
	r.last = st
	r.mu.Unlock()
}

// stateClient reads the replicas' state; no connection outlives a request.
var stateClient = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// ringTable reads the ring's table: how many virtual shards each replica
// holds, by identity (every incarnation counted together), and how many
// there are (0 before the table exists).
func (d *demo) ringTable(ctx context.Context) (held map[string]int, virtual int, err error) {
	t, err := shard.ReadTable(ctx, d.kube, "default", demoRing)
	if err != nil {
		return nil, 0, err
	}
	return t.Held(), t.Virtual, nil
}

// heldBy lists the shards each replica holds: "replica-1 22, replica-3 21".
func (d *demo) heldBy(held map[string]int) string {
	var parts []string
	for _, r := range d.ring {
		parts = append(parts, fmt.Sprintf("%s %d", r.id, held[r.id]))
	}
	return strings.Join(parts, ", ")
}

// waitForRing returns once every replica holds some of the ring's shards
// and no shard is unheld, saying so; or an error after timeout, or when
// every replica exited.
func (d *demo) waitForRing(ctx context.Context, timeout time.Duration, ctrlErr <-chan error) error {
	deadline := time.After(timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		held, virtual, err := d.ringTable(ctx)
		if err == nil && virtual > 0 && d.balanced(held, virtual) {
			fmt.Fprintf(d.out, "ring %q formed: %d shards, held by %s\n", demoRing, virtual, d.heldBy(held))
			return nil
		}
		select {
		case err := <-ctrlErr:
			return fmt.Errorf("demo: before the ring formed: %w", err)
		case <-deadline:
			return fmt.Errorf("demo: the ring %s did not form within %s", demoRing, timeout)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// balanced reports whether every replica holds exactly the shards that
// shard.Owners gives it among all the demo's replicas: the ring has
// formed and its first handoffs are over.
func (d *demo) balanced(held map[string]int, virtual int) bool {
	ids := make([]string, len(d.ring))
	for i, r := range d.ring {
		ids[i] = r.id
	}
	owners, err := shard.Owners(ids, virtual)
	if err != nil {
		return false
	}
	want := map[string]int{}
	for _, o := range owners {
		want[o]++
	}
	return maps.Equal(held, want)
}

// total is the number of shards held.
func total(held map[string]int) int {
	n := 0
	for _, h := range held {
		n += h
	}
	return n
}

// ringStatus is the progress line's view of the ring: each replica's
// shards (from the ring's table), cached Foos and reconciles (from the
// replica itself).
func (d *demo) ringStatus(ctx context.Context) string {
	held, virtual, err := d.ringTable(ctx)
	if err != nil {
		return "ring not formed yet"
	}
	var parts []string
	for _, r := range d.ring {
		r.poll(ctx, stateClient)
		st, killed := r.snapshot()
		switch {
		case killed && held[r.id] > 0:
			parts = append(parts, fmt.Sprintf("%s: KILLED, %d shards still in its name", r.id, held[r.id]))
		case killed:
			parts = append(parts, r.id+": KILLED")
		case !st.seen:
			parts = append(parts, fmt.Sprintf("%s: %d shards, starting", r.id, held[r.id]))
		default:
			parts = append(parts, fmt.Sprintf("%s: %d shards, %d Foos cached, %d reconciles", r.id, held[r.id], st.cached, st.reconciles))
		}
	}
	if unheld := virtual - total(held); unheld > 0 {
		parts = append(parts, fmt.Sprintf("%d shards unheld", unheld))
	}
	return strings.Join(parts, " | ")
}

// killReplicaHalfway sends SIGKILL to the replica holding the most shards
// once half the Foos have been created, then waits until the ring's table
// shows its shards held by the others and says how long that took. It
// closes d.killed when done.
func (d *demo) killReplicaHalfway(ctx context.Context) {
	defer close(d.killed)
	if !d.waitHalfCreated(ctx) {
		return
	}
	before, _, err := d.ringTable(ctx)
	if err != nil {
		fmt.Fprintf(d.out, "  could not read the ring's table to choose a replica to kill: %v\n", err)
		return
	}
	victim := d.ring[0]
	for _, r := range d.ring {
		if before[r.id] > before[victim.id] {
			victim = r
		}
	}
	victim.poll(ctx, stateClient) // its last state, for the summary
	victim.mu.Lock()
	victim.killed = true
	victim.mu.Unlock()
	_ = d.procs[victim.id].Kill()
	at := time.Now()
	fmt.Fprintf(d.out, "  killed %s (SIGKILL) holding %d shards; the others take them over once its membership lease (%s) expires\n",
		victim.id, before[victim.id], demoShardLease)
	deadline := time.After(10 * demoShardLease)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		now, virtual, err := d.ringTable(ctx)
		if err == nil && now[victim.id] == 0 && total(now) == virtual {
			d.handoff = time.Since(at)
			fmt.Fprintf(d.out, "  %s's shards moved to the others %s after the kill: now %s\n",
				victim.id, d.handoff.Round(100*time.Millisecond), d.heldBy(now))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline:
			fmt.Fprintf(d.out, "  %s's shards have not all moved %s after the kill\n", victim.id, 10*demoShardLease)
			return
		case <-tick.C:
		}
	}
}

// ringSummary prints each replica's share at the end: its shards, the Foos
// it caches and its reconciles; for the killed one, what it had done.
func (d *demo) ringSummary(ctx context.Context) {
	held, virtual, _ := d.ringTable(ctx)
	fmt.Fprintf(d.out, "  ring %q (%d shards, hashed by UID):\n", demoRing, virtual)
	for _, r := range d.ring {
		r.poll(ctx, stateClient)
		st, killed := r.snapshot()
		if killed {
			fmt.Fprintf(d.out, "    %s: killed; last seen with %d Foos cached, %d reconciles, %d errors\n", r.id, st.cached, st.reconciles, st.errors)
			continue
		}
		fmt.Fprintf(d.out, "    %s: %d shards, %d Foos cached, %d reconciles, %d errors\n", r.id, held[r.id], st.cached, st.reconciles, st.errors)
	}
	if d.handoff > 0 {
		fmt.Fprintf(d.out, "  the killed replica's shards moved %s after the kill\n", d.handoff.Round(100*time.Millisecond))
	}
}

// lineWriter passes everything written to w, and each complete line to
// line. It is for one writer at a time (exec copies a process's output on
// one goroutine).
type lineWriter struct {
	w    io.Writer
	line func(string)
	buf  []byte // the start of a line not ended yet
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.line(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
	l.buf = append([]byte(nil), l.buf...)
	return l.w.Write(p)
}
