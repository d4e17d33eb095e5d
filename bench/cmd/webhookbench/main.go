// Command webhookbench measures admission webhook latency (p50, p99) and
// requests per second of ctrlkit's webhook server and controller-runtime's
// on the same validator and defaulter, in one process, and prints a
// markdown table of medians, ratios and the A/A noise floor. It exits
// non-zero if the servers answer differently or any answer is wrong.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/ctrlkit/ctrlkit/bench/webhookbench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "webhookbench:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg webhookbench.Config
	protos := flag.String("proto", webhookbench.HTTP1, `comma-separated protocols: "http/1.1" (the API server's for a webhook behind a Service), "h2" (its for a loopback URL)`)
	senders := flag.String("senders", "1,16", "comma-separated numbers of concurrent senders")
	flag.DurationVar(&cfg.Duration, "duration", 0, "length of each measurement (default 1s)")
	flag.DurationVar(&cfg.Warmup, "warmup", 0, "requests sent before each measurement, not counted (default 250ms)")
	flag.IntVar(&cfg.Rounds, "rounds", 0, "measurements per side, the order reversed every other round (default 3)")
	flag.Parse()
	cfg.Protocols = strings.Split(*protos, ",")
	for _, s := range strings.Split(*senders, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("-senders: %w", err)
		}
		cfg.Senders = append(cfg.Senders, n)
	}
	cfg.Progress = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rows, err := webhookbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	return webhookbench.Markdown(os.Stdout, rows)
}
