package telemetry

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestTelemetry_zeroValueLogsAndRegistersNothing(t *testing.T) {
	var tel Telemetry
	tel.Log().Info("dropped") // must not panic
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "c_total", Help: "h"})
	if err := tel.Register(c, c); err != nil {
		t.Fatalf("Register without a Registerer: %v", err)
	}
}

func TestTelemetry_OrFillsOnlyTheEmptyFields(t *testing.T) {
	var buf bytes.Buffer
	mine, theirs := slog.New(slog.NewTextHandler(&buf, nil)), slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	got := Telemetry{Logger: mine}.Or(Telemetry{Logger: theirs, Registerer: reg})
	if got.Logger != mine || got.Registerer != reg {
		t.Fatalf("Or = %+v; want the own logger and the default registerer", got)
	}
}
