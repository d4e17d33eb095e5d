// Command operatorbench runs the same operator written with ctrlkit and with
// controller-runtime as separate OS processes against the embedded API
// server, under one workload, and prints a markdown table side by side with
// an A/A row (issue 50).
//
// The operator is the README's mirror controller: a Secret beside every
// ConfigMap labelled mirror=true, with the same data, owned by it and
// labelled mirrored=true. ctrlkit's side is the real examples/mirror binary
// (go build ./examples/mirror in the root module: metrics on :8080);
// controller-runtime's is ./crmirror, docs/compare/mirror-controller-runtime.go.txt
// compiled. Both are built once, without -race, unless -ctrlkit-bin and
// -cr-bin name prebuilt binaries.
//
// Per round, each side (and the A/A side again) gets fresh namespaces and
// its own process: the operator starts, a probe ConfigMap's Secret shows it
// works, then the workload runs: -objects ConfigMaps created in
// -namespaces namespaces, then -updates updates at -rate per second with a
// fifth of the ConfigMaps deleted among them. The parent stands in for the
// garbage collector the embedded server does not run, from watches (see
// collector). Then: convergence (a LIST every 100 ms until every
// live ConfigMap has its Secret and no other Secret is left), the operator's
// CPU, requests and the API server's CPU over the workload, its peak RSS;
// SIGTERM, and a restart over the converged objects, timed until every
// object was reconciled and the queue is idle (its /metrics), with the
// requests and CPU of that start. Sides alternate order per round.
//
// Usage (from bench/):
//
//	go run ./cmd/operatorbench -objects 5000 -updates 10000 -rate 100 -rounds 3
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
	os.Exit(parentMain(os.Args[1:], os.Stdout, os.Stderr))
}

// parentMain parses the flags, runs the benchmark and prints the report to
// stdout; progress and the operators' logs go to stderr. It returns the
// exit code.
func parentMain(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := run(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "operatorbench:", err)
		return 1
	}
	rep.Command = "cd bench && go run ./cmd/operatorbench " + strings.Join(args, " ")
	writeReport(stdout, rep)
	return 0
}

// The sides: the two operators.
const (
	sideCtrlkit           = "ctrlkit"
	sideControllerRuntime = "controller-runtime"
)

// config is the command line.
type config struct {
	// Objects are the ConfigMaps created per run, Updates the updates
	// then made at Rate per second, a fifth of the objects deleted among
	// them, spread over Namespaces namespaces.
	Objects, Updates, Rate, Namespaces int
	Rounds                             int
	// AA is the side run twice per round for the A/A row.
	AA string
	// Timeout bounds each wait: the operator's start, convergence, the
	// restart's sync.
	Timeout time.Duration
	// Seed picks the deleted and updated objects; round r uses Seed+r, the
	// same for every side of the round.
	Seed uint64
	// CtrlkitBin and CRBin are prebuilt operators; default: built.
	CtrlkitBin, CRBin string
}

// parseConfig parses and checks the flags.
func parseConfig(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("operatorbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.Objects, "objects", 5000, "ConfigMaps labelled mirror=true created per run")
	fs.IntVar(&c.Updates, "updates", 10000, "updates after the creates; a fifth of the objects are deleted among them")
	fs.IntVar(&c.Rate, "rate", 100, "updates and deletes per second")
	fs.IntVar(&c.Namespaces, "namespaces", 50, "namespaces the objects are spread over")
	fs.IntVar(&c.Rounds, "rounds", 3, "rounds; each runs ctrlkit, controller-runtime and the A/A side")
	fs.StringVar(&c.AA, "aa", sideControllerRuntime, "the side run twice per round for the A/A row: ctrlkit or controller-runtime")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Minute, "bound on each wait (start, convergence, restart)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the workload's choices")
	fs.StringVar(&c.CtrlkitBin, "ctrlkit-bin", "", "a prebuilt examples/mirror (default: go build it)")
	fs.StringVar(&c.CRBin, "cr-bin", "", "a prebuilt ./cmd/operatorbench/crmirror (default: go build it)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	err := c.check(fs.Args())
	if err != nil {
		fmt.Fprintln(stderr, "operatorbench:", err)
	}
	return c, err
}

// check validates c; rest are the arguments after the flags.
func (c config) check(rest []string) error {
	switch {
	case len(rest) > 0:
		return fmt.Errorf("unexpected arguments %q", rest)
	case c.Objects < 5:
		return fmt.Errorf("-objects %d: want at least 5", c.Objects)
	case c.Updates < 0:
		return fmt.Errorf("-updates %d: want 0 or more", c.Updates)
	case c.Rate < 1:
		return fmt.Errorf("-rate %d: want at least 1", c.Rate)
	case c.Namespaces < 1:
		return fmt.Errorf("-namespaces %d: want at least 1", c.Namespaces)
	case c.Rounds < 1:
		return fmt.Errorf("-rounds %d: want at least 1", c.Rounds)
	case c.AA != sideCtrlkit && c.AA != sideControllerRuntime:
		return fmt.Errorf("-aa %q: want %s or %s", c.AA, sideCtrlkit, sideControllerRuntime)
	case c.Timeout <= 0:
		return fmt.Errorf("-timeout %v: want a positive duration", c.Timeout)
	}
	return nil
}

// deletes is the number of objects deleted during a run: a fifth.
func (c config) deletes() int { return c.Objects / 5 }

// events is the number of ConfigMap writes of a run's workload.
func (c config) events() int { return c.Objects + c.Updates + c.deletes() }
