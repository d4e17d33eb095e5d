// Package telemetry holds where a ctrlkit component reports: its logger and
// its Prometheus registerer. Every component's options embed Telemetry, so
// both are declared once and wired the same way everywhere; the manager
// fills them with its own.
package telemetry

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Telemetry is where a component reports. The zero value logs nothing and
// registers no metrics.
type Telemetry struct {
	// Logger receives the component's log lines. Default: discarded.
	Logger *slog.Logger
	// Registerer receives the component's metrics when it is created.
	// Default: none, and no cost.
	Registerer prometheus.Registerer
}

// discard is the logger of a Telemetry without one.
var discard = slog.New(slog.DiscardHandler)

// Log returns the Logger, or one that discards everything.
func (t Telemetry) Log() *slog.Logger {
	if t.Logger == nil {
		return discard
	}
	return t.Logger
}

// Or returns t with its empty fields taken from def: a component passing
// its Telemetry on to a part of it.
func (t Telemetry) Or(def Telemetry) Telemetry {
	if t.Logger == nil {
		t.Logger = def.Logger
	}
	if t.Registerer == nil {
		t.Registerer = def.Registerer
	}
	return t
}

// Register registers every collector with the Registerer, or none: after a
// failure it unregisters those it registered and returns the error (e.g. a
// second component of the same name on the same registry). Without a
// Registerer it does nothing.
func (t Telemetry) Register(cs ...prometheus.Collector) error {
	if t.Registerer == nil {
		return nil
	}
	for i, c := range cs {
		if err := t.Registerer.Register(c); err != nil {
			for _, done := range cs[:i] {
				t.Registerer.Unregister(done)
			}
			return errors.Join(errors.New("telemetry: metrics already registered (two components with one name on one registry?)"), err)
		}
	}
	return nil
}
