package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSum_addsTheMatchingCountersAndGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "h"}, []string{"result", "name"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "h", ConstLabels: prometheus.Labels{"name": "a"}})
	reg.MustRegister(c, g)
	c.WithLabelValues("ok", "a").Add(2)
	c.WithLabelValues("error", "a").Add(3)
	c.WithLabelValues("error", "b").Add(5)
	g.Set(7)
	for _, tc := range []struct {
		name   string
		family string
		match  map[string]string
		want   float64
	}{
		{"every series without a match", "c_total", nil, 10},
		{"one label", "c_total", map[string]string{"result": "error"}, 8},
		{"two labels", "c_total", map[string]string{"result": "error", "name": "b"}, 5},
		{"a label no series has", "c_total", map[string]string{"result": "nope"}, 0},
		{"a gauge", "g", map[string]string{"name": "a"}, 7},
		{"a family that does not exist", "missing", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Sum(reg, tc.family, tc.match)
			if err != nil || got != tc.want {
				t.Fatalf("Sum = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestCount_countsTheMatchingSeriesZeroValuedOnesToo(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "up", Help: "h"}, []string{"cluster"})
	reg.MustRegister(g)
	g.WithLabelValues("a").Set(1)
	g.WithLabelValues("b").Set(0)
	for match, want := range map[string]int{"a": 1, "b": 1, "gone": 0} {
		if n, err := Count(reg, "up", map[string]string{"cluster": match}); err != nil || n != want {
			t.Errorf("Count(cluster=%s) = %d, %v; want %d", match, n, err, want)
		}
	}
	if n, _ := Count(reg, "up", nil); n != 2 {
		t.Errorf("Count(every series) = %d, want 2", n)
	}
}
