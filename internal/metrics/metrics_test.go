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
