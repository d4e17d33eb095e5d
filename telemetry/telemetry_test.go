package telemetry

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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

func TestSeries_appliesTheConstantLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := Telemetry{Registerer: reg}.Series(prometheus.Labels{"ring": "r"})
	s.Counter("a_total", "h").Inc()
	s.CounterVec("b_total", "h", "kind").WithLabelValues("k").Inc()
	s.Gauge("c", "h").Set(1)
	s.GaugeFunc("d", "h", func() float64 { return 2 })
	s.Histogram("e_seconds", "h", []float64{1, 2}).Observe(1)
	if err := s.Register(); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
		for _, m := range f.GetMetric() {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "ring" && l.GetValue() == "r" }) {
				t.Errorf("%s: labels %v, want ring=r among them", f.GetName(), m.GetLabel())
			}
		}
	}
	if got, want := strings.Join(names, " "), "a_total b_total c d e_seconds"; got != want {
		t.Fatalf("registered %q, want %q", got, want)
	}
	if b := families[4].GetMetric()[0].GetHistogram().GetBucket(); len(b) != 2 || b[1].GetUpperBound() != 2 {
		t.Fatalf("histogram buckets %v, want 1 and 2", b)
	}
	s.Unregister()
	if families, _ := reg.Gather(); len(families) != 0 {
		t.Fatalf("after Unregister: %d families left", len(families))
	}
}

func TestSeries_registersAllOrNone(t *testing.T) {
	reg := prometheus.NewRegistry()
	tel := Telemetry{Registerer: reg}
	taken := prometheus.NewCounter(prometheus.CounterOpts{Name: "b_total", Help: "h", ConstLabels: prometheus.Labels{"name": "x"}})
	if err := tel.Register(taken); err != nil {
		t.Fatal(err)
	}
	s := tel.Series(prometheus.Labels{"name": "x"})
	a := s.Counter("a_total", "h")
	s.Counter("b_total", "h") // the same series as taken
	if err := s.Register(); err == nil {
		t.Fatal("Register of a series already registered succeeded")
	}
	if reg.Unregister(a) {
		t.Fatal("a_total stayed registered after the failed Register")
	}
	if !reg.Unregister(taken) {
		t.Fatal("the failed Register unregistered what was there before")
	}
}

func TestBuild_withoutRegistererBuildsNothing(t *testing.T) {
	called := false
	m, err := Build(Telemetry{}, nil, func(*Series) *struct{} { called = true; return &struct{}{} })
	if m != nil || err != nil || called {
		t.Fatalf("Build without a Registerer = %v, %v (build called: %v); want nil, nil, not called", m, err, called)
	}
	reg := prometheus.NewRegistry()
	if _, err := Build(Telemetry{Registerer: reg}, nil, func(s *Series) *struct{} { s.Counter("a_total", "h"); return &struct{}{} }); err != nil {
		t.Fatal(err)
	}
	m, err = Build(Telemetry{Registerer: reg}, nil, func(s *Series) *struct{} { s.Counter("a_total", "h"); return &struct{}{} })
	if m != nil || err == nil {
		t.Fatalf("Build of a metric already registered = %v, %v; want nil and an error", m, err)
	}
}

func TestRecord_callsOnlyWithMetrics(t *testing.T) {
	type metrics struct{ n int }
	var off *metrics
	Record(off, func() { t.Fatal("Record called record with nil metrics") })
	on := &metrics{}
	Record(on, func() { on.n++ })
	if on.n != 1 {
		t.Fatalf("Record with metrics: record ran %d times, want 1", on.n)
	}
}
