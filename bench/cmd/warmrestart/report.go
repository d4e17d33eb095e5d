package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// writeReport prints rep as markdown.
func writeReport(w io.Writer, rep report) {
	c := rep.Config
	fmt.Fprintf(w, "# Warm restarts: %d ConfigMaps, real process restarts\n\n", c.Objects)
	fmt.Fprintf(w, "    %s\n\n", rep.Command)
	fmt.Fprintf(w, "Each start is a fresh process (this binary re-executed) against the embedded kube-apiserver, "+
		"protobuf on the wire. Medians (min–max) over %d round(s). *received*: response body bytes read from the "+
		"server from the informer's start to HasSynced (after decompression); *on the wire*: bytes read from the child's connections in that span (TLS records, responses compressed as the server sent them); *CPU*: the child process's user+system "+
		"time in the same span; *divergent*: keys on which the cache and a fresh LIST still disagree 10 s after the sync, and then keys on which what the handler was told differs from the cache after up to 10 s more.\n\n", c.Rounds)
	writeStarts(w, rep.Rounds)
	writeWrites(w, rep)
	writeCompaction(w, rep.Compaction)
	writeChaos(w, c, rep.Chaos)
}

// pick returns f of each round.
func pick(rounds []round, f func(round) result) []result {
	out := make([]result, len(rounds))
	for i, r := range rounds {
		out[i] = f(r)
	}
	return out
}

// writeStarts prints the cold, warm and client-go table and the ratios.
func writeStarts(w io.Writer, rounds []round) {
	cold := pick(rounds, func(r round) result { return r.Cold })
	warm := pick(rounds, func(r round) result { return r.Warm })
	quiet := pick(rounds, func(r round) result { return r.Quiet })
	cg := pick(rounds, func(r round) result { return r.ClientGo })
	ch := rounds[0].Churn
	fmt.Fprintf(w, "## Cold vs warm (churn between them while nothing ran: %s)\n\n", churnText(ch))
	fmt.Fprintln(w, "| start | how it started | sync ms | received | on the wire | requests | CPU ms | heard (last round): initial / add / update / delete | divergent |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, row := range []struct {
		name string
		rs   []result
	}{{"ctrlkit cold", cold}, {"ctrlkit warm", warm}, {"ctrlkit warm, nothing changed since its snapshot", quiet}, {"client-go (cold)", cg}} {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", row.name, how(row.rs),
			spread(row.rs, func(r result) float64 { return r.SyncMS }, "%.0f"),
			spread(row.rs, func(r result) float64 { return float64(r.Bytes) }, "bytes"),
			spread(row.rs, func(r result) float64 { return float64(r.WireBytes) }, "bytes"),
			spread(row.rs, func(r result) float64 { return float64(r.Requests) }, "%.0f"),
			spread(row.rs, func(r result) float64 { return r.SyncCPUMS }, "%.0f"),
			heardText(row.rs[len(row.rs)-1].Heard), divergent(row.rs))
	}
	fmt.Fprintf(w, "\nwarm/cold (ctrlkit): received %s (on the wire %s), sync time %s, CPU %s; with nothing changed, sync time %s. "+
		"client-go/ctrlkit cold: received %s, sync time %s.\n\n",
		ratio(warm, cold, func(r result) float64 { return float64(r.Bytes) }),
		ratio(warm, cold, func(r result) float64 { return float64(r.WireBytes) }),
		ratio(warm, cold, func(r result) float64 { return r.SyncMS }),
		ratio(warm, cold, func(r result) float64 { return r.SyncCPUMS }),
		ratio(quiet, cold, func(r result) float64 { return r.SyncMS }),
		ratio(cg, cold, func(r result) float64 { return float64(r.Bytes) }),
		ratio(cg, cold, func(r result) float64 { return r.SyncMS }))
}

// writeWrites prints the snapshot write cost of the cold and warm starts of
// the rounds (each writes at shutdown).
func writeWrites(w io.Writer, rep report) {
	// Not the quiet starts': a cache that did not change since its snapshot
	// is not written again.
	rs := slices.Concat(pick(rep.Rounds, func(r round) result { return r.Cold }), pick(rep.Rounds, func(r round) result { return r.Warm }))
	fmt.Fprintf(w, "## Snapshot write at shutdown, %d objects (%d writes)\n\n", rs[0].Snapshot.Objects, len(rs))
	fmt.Fprintln(w, "| write ms (encode, write, fsync) | file | pause of the processing goroutine ms | cancel to Run's return ms | CPU ms | failed or missing |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	failures := 0
	for _, r := range rs {
		failures += r.Snapshot.Failures + 1 - min(1, r.Snapshot.Writes)
	}
	fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d |\n\n",
		spread(rs, func(r result) float64 { return r.Snapshot.WriteMS }, "%.1f"),
		spread(rs, func(r result) float64 { return float64(r.Snapshot.Bytes) }, "bytes"),
		spread(rs, func(r result) float64 { return r.Snapshot.PauseMS }, "%.2f"),
		spread(rs, func(r result) float64 { return r.Snapshot.StopMS }, "%.1f"),
		spread(rs, func(r result) float64 { return r.Snapshot.CPUMS }, "%.0f"), failures)
}

// writeCompaction prints the compaction round.
func writeCompaction(w io.Writer, c compaction) {
	r := c.Start
	fmt.Fprintf(w, "## Compaction round\n\nChurn (%s), etcd compacted at revision %d, the server restarted (its watch cache "+
		"starts after the snapshot), then ctrlkit started from the last snapshot.\n\n", churnText(c.Churn), c.Revision)
	fmt.Fprintln(w, "| how it started | sync ms | received | CPU ms | snapshot objects | heard: add / update / delete beyond the snapshot | churned: created / updated / deleted | divergent |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	fmt.Fprintf(w, "| %s | %.0f | %s | %.0f | %d | %d / %d / %d | %d / %d / %d | %d |\n\n", how([]result{r}), r.SyncMS, bytesText(float64(r.Bytes)),
		r.SyncCPUMS, r.SnapshotObjects, r.newAdds(), r.Heard.Updates, r.Heard.Deletes, c.Churn.Created, c.Churn.Updated, c.Churn.Deleted, len(r.Divergent))
	fmt.Fprintln(w, "Handlers hear the snapshot's objects as the initial list; objects new in the relist are initial-list adds too, "+
		"so *add beyond the snapshot* counts every add less the snapshot's objects. "+
		"A handler's notifications of one object coalesce while undelivered (an update into the object's initial add, an add "+
		"and a delete into nothing), so each heard count is at most the churned one; *divergent* checks what the handler was told.")
	fmt.Fprintln(w)
}

// writeChaos prints the chaos line.
func writeChaos(w io.Writer, c config, ch chaos) {
	if len(ch.Starts) == 0 {
		fmt.Fprintln(w, "## Chaos\n\nskipped (-chaos 0)")
		return
	}
	warm := 0
	for _, r := range ch.Starts {
		if r.Warm {
			warm++
		}
	}
	cold := ""
	if warm < len(ch.Starts) {
		cold = " (" + how(ch.Starts) + ")"
	}
	fmt.Fprintf(w, "## Chaos\n\n%d ctrlkit restarts back to back while the parent wrote %d changes (~%d/s, %d failed): "+
		"%d/%d started warm%s, sync ms %s, received %s, divergent keys in total: %d.\n",
		len(ch.Starts), ch.Changes, c.ChaosRate, ch.Errors, warm, len(ch.Starts), cold,
		spread(ch.Starts, func(r result) float64 { return r.SyncMS }, "%.0f"),
		spread(ch.Starts, func(r result) float64 { return float64(r.Bytes) }, "bytes"), divergent(ch.Starts))
}

// summary is one child's line of progress.
func summary(r result) string {
	start := "cold: " + r.Reason
	if r.Warm {
		start = fmt.Sprintf("warm from %d objects", r.SnapshotObjects)
	}
	return fmt.Sprintf("%s, %s: synced in %.0f ms, %s received, heard %s, %d divergent, snapshot %s in %.1f ms",
		r.Side, start, r.SyncMS, bytesText(float64(r.Bytes)), heardText(r.Heard), len(r.Divergent),
		bytesText(float64(r.Snapshot.Bytes)), r.Snapshot.WriteMS)
}

// how says how the starts began: "warm" when all were, else the distinct
// cold reasons (and how many were warm).
func how(rs []result) string {
	var reasons []string
	warm := 0
	for _, r := range rs {
		if r.Warm {
			warm++
		} else if !slices.Contains(reasons, r.Reason) {
			reasons = append(reasons, r.Reason)
		}
	}
	switch {
	case warm == len(rs):
		return "warm"
	case warm == 0:
		return "cold: " + strings.Join(reasons, "; ")
	}
	return fmt.Sprintf("%d warm; cold: %s", warm, strings.Join(reasons, "; "))
}

func churnText(c churn) string {
	return fmt.Sprintf("%d updated, %d deleted, %d created", c.Updated, c.Deleted, c.Created)
}

func heardText(h heard) string {
	return fmt.Sprintf("%d / %d / %d / %d", h.InitialAdds, h.Adds, h.Updates, h.Deletes)
}

// divergent is the total of divergent keys.
func divergent(rs []result) int {
	n := 0
	for _, r := range rs {
		n += len(r.Divergent)
	}
	return n
}

// spread renders "median (min–max)" of f over rs, or the median alone for
// one value; format "bytes" renders sizes.
func spread(rs []result, f func(result) float64, format string) string {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	slices.Sort(vs)
	render := func(v float64) string {
		if format == "bytes" {
			return bytesText(v)
		}
		return fmt.Sprintf(format, v)
	}
	med := median(vs)
	if len(vs) == 1 {
		return render(med)
	}
	return fmt.Sprintf("%s (%s–%s)", render(med), render(vs[0]), render(vs[len(vs)-1]))
}

// median of sorted values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// ratio is the median of a/b, pairing the rounds.
func ratio(a, b []result, f func(result) float64) string {
	vs := make([]float64, 0, len(a))
	for i := range a {
		if d := f(b[i]); d > 0 {
			vs = append(vs, f(a[i])/d)
		}
	}
	if len(vs) == 0 {
		return "n/a"
	}
	slices.Sort(vs)
	return fmt.Sprintf("%.3g×", median(vs))
}

func bytesText(v float64) string {
	switch {
	case v >= 1<<20:
		return fmt.Sprintf("%.2f MB", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.1f KB", v/(1<<10))
	}
	return fmt.Sprintf("%.0f B", v)
}
