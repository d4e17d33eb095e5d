package telemetry_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/telemetry"
)

// A component registers its metrics all at once, or none of them.
func ExampleTelemetry_Register() {
	reg := prometheus.NewRegistry()
	tel := telemetry.Telemetry{Registerer: reg}
	events := prometheus.NewCounter(prometheus.CounterOpts{Name: "events_total", Help: "Events."})
	if err := tel.Register(events); err != nil {
		fmt.Println(err)
	}
	// A second component with the same metric fails and leaves nothing of
	// its own behind.
	again := prometheus.NewCounter(prometheus.CounterOpts{Name: "events_total", Help: "Events."})
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "other_total", Help: "Other."})
	err := tel.Register(other, again)
	fmt.Println(err != nil, reg.Unregister(other))
	// Output: true false
}

// A component builds its series with its name as a constant label and
// registers them together.
func ExampleSeries() {
	reg := prometheus.NewRegistry()
	s := telemetry.Telemetry{Registerer: reg}.Series(prometheus.Labels{"name": "web"})
	syncs := s.Counter("example_syncs_total", "Syncs done.")
	failures := s.CounterVec("example_failures_total", "Failures, by op.", "op")
	if err := s.Register(); err != nil {
		fmt.Println(err)
		return
	}
	syncs.Inc()
	failures.WithLabelValues("list").Add(2)
	families, _ := reg.Gather()
	for _, f := range families {
		for _, m := range f.GetMetric() {
			fmt.Print(f.GetName())
			for _, l := range m.GetLabel() {
				fmt.Printf(" %s=%s", l.GetName(), l.GetValue())
			}
			fmt.Println(":", m.GetCounter().GetValue())
		}
	}
	// Output:
	// example_failures_total name=web op=list: 2
	// example_syncs_total name=web: 1
}

// Build makes a component's metrics, or nil without a Registerer: the
// component's methods then record nothing.
func ExampleBuild() {
	type metrics struct{ syncs prometheus.Counter }
	build := func(s *telemetry.Series) *metrics {
		return &metrics{syncs: s.Counter("example_syncs_total", "Syncs done.")}
	}
	off, err := telemetry.Build(telemetry.Telemetry{}, nil, build)
	fmt.Println(off == nil, err)
	on, err := telemetry.Build(telemetry.Telemetry{Registerer: prometheus.NewRegistry()}, nil, build)
	fmt.Println(on != nil, err)
	// Output:
	// true <nil>
	// true <nil>
}
