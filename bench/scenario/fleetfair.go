package scenario

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/ctrlkit/ctrlkit/workqueue"
)

// ClusterFairConfig sizes S9 (a noisy cluster).
type ClusterFairConfig struct {
	// Stream is how long both clusters add keys. Default: 2s.
	Stream time.Duration
	// Every is the quiet cluster's pace: one key per Every. Default: 5ms.
	Every time.Duration
	// Noise is how many keys the noisy cluster adds per quiet key.
	// Default: 100.
	Noise int
	// Workers process the keys, each Work long (a sleep: a reconcile
	// waiting on the API). Defaults: 4 and 1ms.
	Workers int
	Work    time.Duration
}

func (c ClusterFairConfig) withDefaults() ClusterFairConfig {
	if c.Stream == 0 {
		c.Stream = 2 * time.Second
	}
	if c.Every == 0 {
		c.Every = 5 * time.Millisecond
	}
	if c.Noise == 0 {
		c.Noise = 100
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.Work == 0 {
		c.Work = time.Millisecond
	}
	return c
}

// NoisyCluster is S9: the fleet's queue, keys "cluster/namespace/name",
// its flows the clusters.
func NoisyCluster(cfg ClusterFairConfig) Scenario {
	cfg = cfg.withDefaults()
	return Scenario{
		Name: "S9 noisy cluster",
		Doc: fmt.Sprintf("A quiet cluster adds a key every %v for %v; run again with a noisy cluster adding %d keys beside "+
			"each (%dx its events, %d keys, more than the workers can take: a backlog builds). %d workers, each key %v of "+
			"work (a sleep: a reconcile waiting on the API). Measured: the quiet cluster's add-to-get latency alone and "+
			"beside the noisy one, and the ratio (how much the noisy cluster raises it); then both again with the garbage "+
			"collector held off (_gc_off: the wait the queue makes, without the few keys a collection of the noisy "+
			"cluster's garbage delays, on any queue, on a machine with few processors). ctrlkit workqueue.New with the "+
			"flows by cluster and a cluster's keys in flight capped at three quarters of the workers (as package fleet "+
			"makes it; its workers step with DoneAndGet), client-go workqueue.NewTyped, controller-runtime "+
			"priorityqueue.New (the queue multicluster-runtime runs its clusters' keys through); "+
			"the floor: a queue per cluster (client-go's), the quiet one with its own worker of the %d, the isolation no "+
			"shared queue can beat: what the noisy cluster raises there is the machine's (its processors busy with the "+
			"noisy cluster's adds, work and garbage), not a queue's.",
			cfg.Every, cfg.Stream, cfg.Noise, cfg.Noise, int(cfg.Stream/cfg.Every)*cfg.Noise, cfg.Workers, cfg.Work, cfg.Workers),
		Metrics: []Metric{
			{Name: "quiet_alone_p99_us", Unit: "µs", Better: "lower"},
			{Name: "quiet_p50_us", Unit: "µs", Better: "lower"},
			{Name: "quiet_p99_us", Unit: "µs", Better: "lower"},
			{Name: "p99_raised_x", Unit: "x", Better: "lower"},
			{Name: "quiet_p99_us_gc_off", Unit: "µs", Better: "lower"},
			{Name: "p99_raised_x_gc_off", Unit: "x", Better: "lower"},
		},
		Extra: []string{ControllerRuntime, Floor},
		Run: func(ctx context.Context, side string) (Result, error) {
			alone, noisy, err := runClusterPair(ctx, cfg, side)
			if err != nil {
				return nil, err
			}
			r := Result{"quiet_alone_p99_us": alone.p99, "quiet_p50_us": noisy.p50, "quiet_p99_us": noisy.p99,
				"p99_raised_x": noisy.p99 / alone.p99}
			old := debug.SetGCPercent(-1)
			defer debug.SetGCPercent(old)
			if alone, noisy, err = runClusterPair(ctx, cfg, side); err != nil {
				return nil, err
			}
			r["quiet_p99_us_gc_off"], r["p99_raised_x_gc_off"] = noisy.p99, noisy.p99/alone.p99
			return r, nil
		},
	}
}

// runClusterPair runs the quiet cluster alone, then beside the noisy one.
func runClusterPair(ctx context.Context, cfg ClusterFairConfig, side string) (alone, noisy fairResult, err error) {
	if alone, err = runClusters(ctx, cfg, side, 0); err != nil {
		return alone, noisy, err
	}
	noisy, err = runClusters(ctx, cfg, side, cfg.Noise)
	return alone, noisy, err
}

// newClusterQueue is side's queue, ctrlkit's with the flows by cluster and
// the in-flight cap package fleet sets for workers.
func newClusterQueue(side string, workers int) (prioQueue, error) {
	if side != Ctrlkit {
		return newPrioQueue(side)
	}
	q, err := workqueue.New(workqueue.Options[string]{Fairness: workqueue.Fairness[string]{FlowKey: func(k string) string {
		cluster, _, _ := strings.Cut(k, "/")
		return cluster
	}, MaxInFlight: workers - workers/4}})
	return ctrlkitQueue{q}, err
}

// clusterQueues is S9's floor: a client-go queue per cluster, keys routed
// by their cluster. Its workers serve one queue each (see runClusters), so
// it is only added to and shut down through this value.
type clusterQueues struct{ quiet, noisy prioQueue }

func newClusterQueues() clusterQueues {
	quiet, _ := newPrioQueue(ClientGo)
	noisy, _ := newPrioQueue(ClientGo)
	return clusterQueues{quiet: quiet, noisy: noisy}
}

func (q clusterQueues) add(k string, p int) {
	if strings.HasPrefix(k, "quiet/") {
		q.quiet.add(k, p)
	} else {
		q.noisy.add(k, p)
	}
}

func (q clusterQueues) Get() (string, bool) {
	panic("S9 floor: a worker gets from one cluster's queue")
}
func (q clusterQueues) Done(string) { panic("S9 floor: a worker is done with one cluster's queue") }
func (q clusterQueues) ShutDown()   { q.quiet.ShutDown(); q.noisy.ShutDown() }

// runClusters runs the quiet cluster's stream, with noise keys of the
// noisy cluster added beside each of its keys, through side's queue, and
// returns the quiet keys' add-to-get latency percentiles in µs. Every key
// must be handed out exactly once.
func runClusters(ctx context.Context, cfg ClusterFairConfig, side string, noise int) (fairResult, error) {
	var q prioQueue
	var err error
	if side == Floor {
		q = newClusterQueues()
	} else if q, err = newClusterQueue(side, cfg.Workers); err != nil {
		return fairResult{}, err
	}
	n := int(cfg.Stream / cfg.Every)
	quiet := make([]string, n)
	for i := range quiet {
		quiet[i] = fmt.Sprintf("quiet/ns-%d/obj-%d", i%10, i)
	}
	tr := newTracked(quiet, n*(1+noise))
	// Every side starts with the garbage of the runs before it collected:
	// a collection during the run delays a few quiet keys on any queue,
	// and at p99 of 400 keys a few set the figure.
	runtime.GC()
	work := func() { time.Sleep(cfg.Work) } // the reconcile's wait on the API, not synchronisation
	if f, ok := q.(clusterQueues); ok {
		// The quiet cluster's own worker: as many as ctrlkit's queue
		// leaves it beside the noisy cluster's cap.
		quiet := max(cfg.Workers/4, 1)
		tr.serve(f.quiet, quiet, work)
		tr.serve(f.noisy, max(cfg.Workers-quiet, 1), work)
	} else {
		tr.serve(q, cfg.Workers, work)
	}
	start := time.Now()
	for i, k := range quiet {
		time.Sleep(time.Until(start.Add(time.Duration(i) * cfg.Every))) // pacing the load
		for j := range noise {
			q.add(fmt.Sprintf("noisy/ns-%d/obj-%d-%d", j%10, i, j), 0)
		}
		tr.added(i)
		q.add(k, 0)
	}
	if err := tr.wait(ctx, q, 5*time.Minute); err != nil {
		return fairResult{}, err
	}
	p50, p99 := tr.percentiles()
	return fairResult{p50: p50, p99: p99}, nil
}
