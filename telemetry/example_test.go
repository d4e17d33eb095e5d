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
