// Command scenarios runs the pipeline-level benchmarks of package scenario,
// ctrlkit and client-go alternately in one process, and prints a table of
// medians, spreads and ratios (and writes every run as JSON). It exits
// non-zero if any run produced a wrong result.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/bench/scenario"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scenarios:", err)
		os.Exit(1)
	}
}

func run() error {
	rounds := flag.Int("rounds", 3, "rounds per scenario; each round runs ctrlkit, client-go and client-go again (A/A)")
	only := flag.String("only", "S1,S1w,S2,S3,S4,S5,S6,S7,S8,S9", "comma-separated scenarios to run (S1w: S1 on protobuf bytes)")
	out := flag.String("json", "scenarios.json", "where to write every run as JSON")
	s1Objects := flag.Int("s1-objects", 100000, "S1: ConfigMaps in the initial list")
	s1Events := flag.Int("s1-events", 500000, "S1: watch events after the list")
	s1Workers := flag.Int("s1-workers", 2, "S1: workers on each side (a count other than 2 adds a suffix to the scenario's name)")
	s2Pods := flag.Int("s2-pods", 50000, "S2: cached Pods")
	s4Objects := flag.Int("s4-objects", 100000, "S4: cached ConfigMaps relisted")
	keys := flag.Int("keys", 10000, "S3: distinct keys")
	adds := flag.Int("adds", 2000000, "S3: adds")
	objects := flag.Int("objects", 20000, "S5: objects in the API server")
	backlog := flag.Int("backlog", 100000, "S6, S7: keys added at once (namespace A's, the initial list's)")
	s8Pods := flag.Int("s8-pods", 100000, "S8: Pods created on the embedded API server, listed and cached")
	s8Updates := flag.Int("s8-updates", 20000, "S8: changes to those Pods recorded as watch frames")
	s8Writers := flag.Int("s8-writers", 16, "S8: concurrent clients creating and changing Pods")
	s8Budget := flag.Duration("s8-create-budget", 3*time.Minute, "S8: stop creating Pods after this long and cache those created (0: no limit); on 2 busy cores 3m creates about 15,000-20,000")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var scenarios []scenario.Scenario
	picked := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		picked[strings.TrimSpace(s)] = true
	}
	if picked["S1"] {
		scenarios = append(scenarios, scenario.Pipeline(scenario.PipelineConfig{Objects: *s1Objects, Events: *s1Events, Namespaces: 100, PageSize: 500, Workers: *s1Workers}))
	}
	if picked["S1w"] {
		scenarios = append(scenarios, scenario.Pipeline(scenario.PipelineConfig{Objects: *s1Objects, Events: *s1Events, Namespaces: 100, PageSize: 500, Wire: true, Workers: *s1Workers}))
	}
	if picked["S2"] {
		scenarios = append(scenarios, scenario.Memory(scenario.MemoryConfig{Objects: *s2Pods, Namespaces: 100}))
	}
	if picked["S3"] {
		scenarios = append(scenarios, scenario.Queue(scenario.QueueConfig{Keys: *keys, Adds: *adds, Producers: 2, Workers: 2}),
			scenario.Queue(scenario.QueueConfig{Keys: *keys, Adds: *adds, Producers: 2, Workers: 2, Busy: true}))
	}
	if picked["S4"] {
		scenarios = append(scenarios, scenario.Relist(scenario.RelistConfig{Objects: *s4Objects, Namespaces: 100}),
			scenario.Relist(scenario.RelistConfig{Objects: *s4Objects, Namespaces: 100, Atomic: true}))
	}
	if picked["S6"] {
		scenarios = append(scenarios, scenario.NoisyNeighbour(scenario.FairConfig{Backlog: *backlog}))
	}
	if picked["S9"] {
		scenarios = append(scenarios, scenario.NoisyCluster(scenario.ClusterFairConfig{}))
	}
	if picked["S7"] {
		scenarios = append(scenarios, scenario.Startup(scenario.FairConfig{Backlog: *backlog}))
	}
	if picked["S5"] {
		s, cleanup, err := serverScenario(ctx, *objects)
		if err != nil {
			return err
		}
		defer cleanup()
		scenarios = append(scenarios, s)
	}
	if picked["S8"] {
		s, err := leanScenario(ctx, scenario.LeanConfig{Pods: *s8Pods, Updates: *s8Updates, Writers: *s8Writers,
			Namespaces: 100, PageSize: 500, CreateBudget: *s8Budget, Progress: os.Stderr})
		if err != nil {
			return err
		}
		scenarios = append(scenarios, s)
	}
	var sums []scenario.Summary
	for _, s := range scenarios {
		fmt.Fprintf(os.Stderr, "== %s: %s\n", s.Name, s.Doc)
		sum, err := scenario.Run(ctx, s, *rounds, os.Stderr)
		if err != nil {
			return err
		}
		sums = append(sums, sum)
	}
	if err := scenario.Markdown(os.Stdout, sums); err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	defer f.Close()
	return scenario.JSON(f, sums)
}

// serverScenario starts the embedded API server and fills it.
func serverScenario(ctx context.Context, n int) (scenario.Scenario, func(), error) {
	fmt.Fprintf(os.Stderr, "== S5: starting the embedded API server and creating %d ConfigMaps\n", n)
	srv, err := apiserver.Start(ctx, apiserver.Options{Progress: os.Stderr})
	if err != nil {
		return scenario.Scenario{}, nil, err
	}
	kube, err := kubernetes.NewForConfig(srv.Config())
	if err == nil {
		_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{})
	}
	if err == nil {
		err = scenario.Populate(ctx, kube, "bench", n)
	}
	if err != nil {
		srv.Stop()
		return scenario.Scenario{}, nil, err
	}
	return scenario.Server(scenario.ServerConfig{Kube: kube, Namespace: "bench", Objects: n}), func() { srv.Stop() }, nil
}

// leanScenario starts the embedded API server, records S8's list and watch
// from it, and stops it: S8 measures offline, on the recorded bytes.
func leanScenario(ctx context.Context, cfg scenario.LeanConfig) (scenario.Scenario, error) {
	fmt.Fprintf(os.Stderr, "== S8: starting the embedded API server and recording %d Pods and %d changes\n", cfg.Pods, cfg.Updates)
	srv, err := apiserver.Start(ctx, apiserver.Options{Progress: os.Stderr})
	if err != nil {
		return scenario.Scenario{}, err
	}
	rec, err := scenario.RecordLean(ctx, srv.Config(), cfg)
	if serr := srv.Stop(); err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return scenario.Scenario{}, err
	}
	return scenario.Lean(rec), nil
}
