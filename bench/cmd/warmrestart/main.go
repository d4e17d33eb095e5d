// Command warmrestart measures ctrlkit's warm restarts (informer.Options.
// Snapshot) with real process restarts against the embedded API server, and
// prints a markdown report.
//
// The parent starts the server, creates -objects ConfigMaps and re-executes
// itself as a child (-child ctrlkit|client-go) for each start measured. A
// child syncs one informer of the ConfigMaps, counting the response body
// bytes received until it synced, checks its cache against a fresh LIST,
// stops (a ctrlkit child then writes its snapshot) and writes its numbers as
// JSON. Per round: a cold ctrlkit start (no snapshot), churn while nothing
// runs, a warm ctrlkit start from the cold one's snapshot, and a cold
// client-go start for reference. Then a compaction round (churn, etcd
// compacted, the server restarted: the snapshot's history is gone) and
// -chaos ctrlkit restarts back to back while the parent keeps writing.
//
// Usage:
//
//	cd bench && go run ./cmd/warmrestart -objects 100000 -rounds 3 -chaos 5
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-child" {
		os.Exit(childMain(os.Args[1:], os.Stderr))
	}
	os.Exit(parentMain(os.Args[1:], os.Stdout, os.Stderr))
}

// parentMain parses the parent's flags, runs the benchmark and prints the
// report to stdout. It returns the exit code.
func parentMain(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := run(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "warmrestart:", err)
		return 1
	}
	rep.Command = "cd bench && go run ./cmd/warmrestart " + strings.Join(args, " ")
	writeReport(stdout, rep)
	return 0
}

// config is the parent's command line.
type config struct {
	Objects, Rounds, Chaos int
	// ChaosRate is the writer's changes per second during the chaos starts.
	ChaosRate int
	// Timeout bounds each child.
	Timeout time.Duration
	// Profiles, when set, is a folder where each child writes the CPU
	// profile of its sync (child-N-SIDE.pprof).
	Profiles string
}

// parseConfig parses and checks the parent's flags.
func parseConfig(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("warmrestart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.Objects, "objects", 100000, "ConfigMaps in the API server")
	fs.IntVar(&c.Rounds, "rounds", 3, "rounds of cold, warm and client-go starts")
	fs.IntVar(&c.Chaos, "chaos", 5, "ctrlkit restarts back to back while the parent writes")
	fs.IntVar(&c.ChaosRate, "chaos-rate", 50, "changes per second written during the chaos restarts")
	fs.DurationVar(&c.Timeout, "child-timeout", 10*time.Minute, "bound on each child process")
	fs.StringVar(&c.Profiles, "cpuprofiles", "", "folder for a CPU profile of each child's sync")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.Objects < 10:
		err = fmt.Errorf("-objects %d: want at least 10", c.Objects)
	case c.Rounds < 1:
		err = fmt.Errorf("-rounds %d: want at least 1", c.Rounds)
	case c.Chaos < 0:
		err = fmt.Errorf("-chaos %d: want 0 or more", c.Chaos)
	case c.ChaosRate < 1:
		err = fmt.Errorf("-chaos-rate %d: want at least 1", c.ChaosRate)
	case c.Timeout <= 0:
		err = fmt.Errorf("-child-timeout %v: want a positive duration", c.Timeout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "warmrestart:", err)
	}
	return c, err
}
