package informer_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metric returns the value of the series name{handler=h}.
func metric(t *testing.T, reg *prometheus.Registry, name, h string, value func(*dto.Metric) float64) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "handler" && l.GetValue() == h {
					return value(m)
				}
			}
		}
	}
	t.Fatalf("no series %s{handler=%q}", name, h)
	return 0
}

func gauge(t *testing.T, reg *prometheus.Registry, name, h string) float64 {
	return metric(t, reg, name, h, func(m *dto.Metric) float64 { return m.GetGauge().GetValue() })
}

func counter(t *testing.T, reg *prometheus.Registry, name, h string) float64 {
	return metric(t, reg, name, h, func(m *dto.Metric) float64 { return m.GetCounter().GetValue() })
}
