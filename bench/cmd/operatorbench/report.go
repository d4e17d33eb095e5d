package main

import (
	"fmt"
	"io"
	"slices"
)

// metric is one row of the table: a figure of a run.
type metric struct {
	name   string
	format string // of one value
	// resolution is the figure's granularity: a round where both values
	// are below it gives no ratio.
	resolution float64
	value      func(c config, r result) float64
}

// metrics are the table's rows, in order.
var metrics = []metric{
	{"convergence after the workload, ms", "%.0f", ms(pollEvery), func(_ config, r result) float64 { return r.ConvergeMS }},
	{"restart: start to synced and idle, ms", "%.0f", ms(idlePoll), func(_ config, r result) float64 { return r.RestartMS }},
	{"restart: API requests", "%.0f", 0, func(_ config, r result) float64 { return r.RestartRequests }},
	{"restart: operator CPU, ms", "%.0f", ms(clockTick), func(_ config, r result) float64 { return r.RestartCPUMS }},
	{"operator CPU per 1,000 events, ms", "%.1f", 0, func(c config, r result) float64 { return r.CPUMS * 1000 / float64(c.events()) }},
	{"operator peak RSS, MiB", "%.1f", 0, func(_ config, r result) float64 { return float64(r.PeakRSSKB) / 1024 }},
	{"API requests by the operator over the workload", "%.0f", 0, func(_ config, r result) float64 { return r.Requests }},
	{"API server CPU over the workload, ms", "%.0f", 0, func(_ config, r result) float64 { return r.ServerCPUMS }},
}

// writeReport prints rep as markdown.
func writeReport(w io.Writer, rep report) {
	c := rep.Config
	fmt.Fprintf(w, "# The mirror operator: ctrlkit vs controller-runtime, %d ConfigMaps, %d updates at %d/s\n\n", c.Objects, c.Updates, c.Rate)
	fmt.Fprintf(w, "    %s\n\n", rep.Command)
	fmt.Fprintf(w, "Each side is its own OS process against the embedded kube-apiserver: ctrlkit's examples/mirror (%s) and "+
		"controller-runtime's twin, docs/compare/mirror-controller-runtime.go.txt (%s), both with their documented defaults "+
		"(one worker, no client-side rate limit, caches filtered by label). ", rep.Versions[sideCtrlkit], rep.Versions[sideControllerRuntime])
	fmt.Fprintf(w, "Per run, in fresh namespaces: %d ConfigMaps created in %d namespaces (%d writers), then %d updates and %d deletes "+
		"(a fifth of the objects) at %d/s: %d events. No garbage collector runs on the embedded server: the parent "+
		"stands in for it from watches (a deleted ConfigMap's Secret, a Secret written for a deleted ConfigMap). *Convergence*: from the last write to the first LIST (every %v, the first at once) finding every live ConfigMap's "+
		"Secret with its data and no other Secret; 0 when the first found it. *Over the workload*: from the first write to convergence. *Restart*: "+
		"SIGTERM, then a new process over the converged objects, until its /metrics show every object reconciled and the "+
		"queue idle (scraped every %v). Requests: the operator's rest_client_requests_total; CPU: user+system from /proc (10 ms ticks); "+
		"RSS: the workload process's rusage maxrss.\n\n",
		c.Objects, c.Namespaces, writers, c.Updates, c.deletes(), c.Rate, c.events(), pollEvery, idlePoll)
	fmt.Fprintf(w, "Medians (min–max) over %d round(s); ratios are medians of each round's ratio, a value below the figure's "+
		"resolution (the poll's period, a CPU tick) counting as that, a round where both are below it left out; the A/A column is %s "+
		"run twice in a round, second ÷ first, for noise. Order per round: ctrlkit, controller-runtime, A/A in odd "+
		"rounds, reversed in even ones.\n\n", len(rep.Rounds), c.AA)
	writeTable(w, rep)
	writeNotes(w, rep)
}

// writeTable prints one row per metric.
func writeTable(w io.Writer, rep report) {
	aa := rep.Config.AA
	fmt.Fprintf(w, "| metric | ctrlkit | controller-runtime | ctrlkit ÷ controller-runtime | A/A (%s ÷ %s) |\n", aa, aa)
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, m := range metrics {
		f := func(r result) float64 { return m.value(rep.Config, r) }
		ck := pick(rep.Rounds, func(r round) result { return r.Ctrlkit })
		cr := pick(rep.Rounds, func(r round) result { return r.ControllerRuntime })
		second := pick(rep.Rounds, func(r round) result { return r.AA })
		first := pick(rep.Rounds, func(r round) result { return r.side(aa) })
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", m.name, spread(ck, f, m.format), spread(cr, f, m.format),
			ratio(ck, cr, f, m.resolution), ratio(second, first, f, m.resolution))
	}
	fmt.Fprintln(w)
}

// writeNotes prints the workload's duration and the collector's orphans.
func writeNotes(w io.Writer, rep report) {
	c := rep.Config
	want := float64(c.Updates+c.deletes()) / float64(c.Rate) * 1000
	all := pick(rep.Rounds, func(r round) result { return r.Ctrlkit })
	all = append(all, pick(rep.Rounds, func(r round) result { return r.ControllerRuntime })...)
	all = append(all, pick(rep.Rounds, func(r round) result { return r.AA })...)
	workload := func(r result) float64 { return r.WorkloadMS }
	fmt.Fprintf(w, "The parent's writes took %s ms per run (creates, then the paced changes: %.0f ms at the rate). ", spread(all, workload, "%.0f"), want)
	orphans := func(r result) float64 { return float64(r.Orphans) }
	fmt.Fprintf(w, "Secrets written for a ConfigMap already deleted (from a stale cache; the collector deleted them), per run: ctrlkit %s, controller-runtime %s. ",
		spread(pick(rep.Rounds, func(r round) result { return r.Ctrlkit }), orphans, "%.0f"),
		spread(pick(rep.Rounds, func(r round) result { return r.ControllerRuntime }), orphans, "%.0f"))
	fmt.Fprintf(w, "Live ConfigMaps at the end, with the probe: %d.\n", all[0].Live)
}

// pick returns f of each round.
func pick(rounds []round, f func(round) result) []result {
	out := make([]result, len(rounds))
	for i, r := range rounds {
		out[i] = f(r)
	}
	return out
}

// spread renders the median of f over rs, with the range when there are
// several.
func spread(rs []result, f func(result) float64, format string) string {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	slices.Sort(vs)
	med := fmt.Sprintf(format, median(vs))
	if len(vs) == 1 {
		return med
	}
	return fmt.Sprintf("%s (%s–%s)", med, fmt.Sprintf(format, vs[0]), fmt.Sprintf(format, vs[len(vs)-1]))
}

// ratio is the median of a/b over paired runs. A value below resolution
// counts as resolution (0 and 80 ms are the same at a 100 ms
// granularity); pairs both below it are left out, and those where b is 0.
func ratio(a, b []result, f func(result) float64, resolution float64) string {
	vs := make([]float64, 0, len(a))
	for i := range a {
		n, d := f(a[i]), f(b[i])
		if n < resolution && d < resolution {
			continue
		}
		if n, d = max(n, resolution), max(d, resolution); d > 0 {
			vs = append(vs, n/d)
		}
	}
	switch {
	case len(vs) == 0 && resolution > 0:
		return fmt.Sprintf("both < %g", resolution)
	case len(vs) == 0:
		return "n/a"
	}
	slices.Sort(vs)
	return fmt.Sprintf("%.3g×", median(vs))
}

// median of sorted values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
