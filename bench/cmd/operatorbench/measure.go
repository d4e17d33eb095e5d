package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// procCPU returns the user and system CPU time process pid has used so far,
// all its threads, from /proc/PID/stat (10 ms resolution).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/PID/stat line. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from its last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat %q: no command name", stat)
	}
	f := strings.Fields(string(stat[i+1:])) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat %q: too few fields", stat)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// The series read from an operator's /metrics; both libraries expose them
// under these names.
const (
	metricRequests   = "rest_client_requests_total"
	metricReconciles = "controller_runtime_reconcile_total"
	metricActive     = "controller_runtime_active_workers"
	metricDepth      = "workqueue_depth"
)

// scrape is one read of an operator's /metrics: each wanted series summed
// over its labels.
type scrape struct {
	at                                  time.Time // when the request was sent
	requests, reconciles, active, depth float64
	cpu                                 time.Duration // the process's CPU time, read after the scrape (waitIdle only)
}

// idle says every one of live objects was reconciled and nothing is queued
// or being reconciled.
func (s scrape) idle(live int) bool {
	return s.reconciles >= float64(live) && s.active == 0 && s.depth == 0
}

// scrapeMetrics reads url (an operator's /metrics).
func scrapeMetrics(ctx context.Context, hc *http.Client, url string) (scrape, error) {
	s := scrape{at: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return s, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	sums, err := sumSeries(resp.Body, metricRequests, metricReconciles, metricActive, metricDepth)
	if err != nil {
		return s, fmt.Errorf("GET %s: %w", url, err)
	}
	s.requests, s.reconciles, s.active, s.depth = sums[metricRequests], sums[metricReconciles], sums[metricActive], sums[metricDepth]
	return s, nil
}

// sumSeries reads Prometheus' text format and returns, for each of names,
// the sum of its samples over all label sets.
func sumSeries(r io.Reader, names ...string) (map[string]float64, error) {
	out := make(map[string]float64, len(names))
	for _, n := range names {
		out[n] = 0
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := splitSample(line)
		if _, want := out[name]; !want || !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		out[name] += v
	}
	return out, sc.Err()
}

// splitSample splits a sample line, name{labels} value [timestamp], into its
// name and value.
func splitSample(line string) (name, value string, ok bool) {
	rest := ""
	if i := strings.IndexByte(line, '{'); i >= 0 {
		name = line[:i]
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", "", false
		}
		rest = line[j+1:]
	} else {
		name, rest, _ = strings.Cut(line, " ")
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", "", false
	}
	return name, f[0], true
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
