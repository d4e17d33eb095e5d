// Package metrics reads Prometheus metrics back, for ctrlkit's tests and
// the demo's progress line.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sum gathers g and adds up the counter and gauge values of every series of
// the family name whose labels include all of match (nil matches all). A
// family that does not exist sums to 0.
func Sum(g prometheus.Gatherer, name string, match map[string]string) (float64, error) {
	var sum float64
	err := each(g, name, match, func(m *dto.Metric) { sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() })
	return sum, err
}

// Count gathers g and counts the series of the family name whose labels
// include all of match: 0 tells a series that is gone from one whose
// value is 0.
func Count(g prometheus.Gatherer, name string, match map[string]string) (int, error) {
	n := 0
	err := each(g, name, match, func(*dto.Metric) { n++ })
	return n, err
}

// each gathers g and calls fn with every series of the family name whose
// labels include all of match.
func each(g prometheus.Gatherer, name string, match map[string]string, fn func(*dto.Metric)) error {
	mfs, err := g.Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if matches(labels, match) {
				fn(m)
			}
		}
	}
	return nil
}

func matches(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}
