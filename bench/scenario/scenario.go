// Package scenario runs whole-pipeline benchmarks for ctrlkit and client-go
// side by side: the same scenario, the same input, alternately, in one
// process, several rounds. Every run verifies its own result (a run that
// lost an event fails, and the whole benchmark with it). The report gives,
// per metric, the median and spread of each side, the ratio ctrlkit /
// client-go, and an A/A row: client-go against a second run of client-go,
// the noise floor on this machine.
package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// The sides of a comparison.
const (
	Ctrlkit  = "ctrlkit"
	ClientGo = "client-go"
	AA       = "client-go (A/A)" // client-go again: the noise floor
)

// Result is one run's measurements by metric name.
type Result map[string]float64

// Metric describes one measurement of a scenario.
type Metric struct {
	Name   string
	Unit   string
	Better string // "higher" or "lower"
}

// Scenario is one benchmark with an implementation per side.
type Scenario struct {
	Name    string
	Doc     string // what is measured, on which input, by which code path
	Metrics []Metric
	// Run runs the scenario once for side (Ctrlkit, ClientGo or one of
	// Extra) and returns its measurements, or an error if the result was
	// wrong.
	Run func(ctx context.Context, side string) (Result, error)
	// Extra names more sides to compare ctrlkit with (ControllerRuntime):
	// each runs every round, and Markdown adds a row per metric for it.
	Extra []string
	// AAOf is the side the A/A row runs again: ClientGo when empty, or
	// Ctrlkit (the runs are then kept as AACtrlkit).
	AAOf string
}

// AACtrlkit names the A/A runs of a scenario whose AAOf is Ctrlkit.
const AACtrlkit = "ctrlkit (A/A)"

// ControllerRuntime is an extra side: sigs.k8s.io/controller-runtime.
const ControllerRuntime = "controller-runtime"

// Summary is the outcome of all rounds of one scenario.
type Summary struct {
	Scenario string                           `json:"scenario"`
	Doc      string                           `json:"doc"`
	Rounds   int                              `json:"rounds"`
	Runs     map[string][]Result              `json:"runs"`   // side -> one result per round
	Median   map[string]map[string]float64    `json:"median"` // side -> metric -> median
	Spread   map[string]map[string][2]float64 `json:"spread"` // side -> metric -> [min, max]
	Metrics  []Metric                         `json:"metrics"`
	Extra    []string                         `json:"extra,omitempty"`
	AAOf     string                           `json:"aa_of,omitempty"` // the side the A/A row reran (client-go if empty)
}

// aa is the side the A/A row reran, and the key of its runs.
func (s Summary) aa() (of, key string) {
	if s.AAOf == Ctrlkit {
		return Ctrlkit, AACtrlkit
	}
	return ClientGo, AA
}

// Run runs every round of s, alternating the order of the sides, and
// summarises. It stops at the first failed run.
func Run(ctx context.Context, s Scenario, rounds int, progress io.Writer) (Summary, error) {
	sum := Summary{Scenario: s.Name, Doc: s.Doc, Rounds: rounds, Metrics: s.Metrics, Extra: s.Extra, AAOf: s.AAOf, Runs: map[string][]Result{}}
	aaOf, aaKey := sum.aa()
	for round := range rounds {
		order := append([]string{Ctrlkit, ClientGo, aaKey}, s.Extra...)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, side := range order {
			impl := side
			if side == aaKey {
				impl = aaOf
			}
			res, err := s.Run(ctx, impl)
			if err != nil {
				return sum, fmt.Errorf("%s, round %d, %s: %w", s.Name, round+1, side, err)
			}
			fmt.Fprintf(progress, "  %s round %d %-16s %s\n", s.Name, round+1, side, format(res, s.Metrics))
			sum.Runs[side] = append(sum.Runs[side], res)
		}
	}
	sum.Median, sum.Spread = map[string]map[string]float64{}, map[string]map[string][2]float64{}
	for side, runs := range sum.Runs {
		sum.Median[side], sum.Spread[side] = map[string]float64{}, map[string][2]float64{}
		for _, m := range s.Metrics {
			vs := make([]float64, 0, len(runs))
			for _, r := range runs {
				vs = append(vs, r[m.Name])
			}
			slices.Sort(vs)
			sum.Median[side][m.Name] = median(vs)
			sum.Spread[side][m.Name] = [2]float64{vs[0], vs[len(vs)-1]}
		}
	}
	return sum, nil
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func format(r Result, ms []Metric) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, fmt.Sprintf("%s=%s", m.Name, num(r[m.Name])))
	}
	return strings.Join(parts, " ")
}

// Ratio is ctrlkit's median over client-go's for metric m, and the A/A
// ratio (the second run of client-go, or of ctrlkit if AAOf says so, over
// the first) as the noise floor.
func (s Summary) Ratio(m string) (ratio, aa float64) {
	of, key := s.aa()
	return s.Median[Ctrlkit][m] / s.Median[ClientGo][m], s.Median[key][m] / s.Median[of][m]
}

// Markdown writes one table row per metric.
func Markdown(w io.Writer, sums []Summary) error {
	var b strings.Builder
	b.WriteString("| scenario | metric | ctrlkit (min–max) | client-go (min–max) | ctrlkit / client-go | A/A noise |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|\n")
	for _, s := range sums {
		for _, m := range s.Metrics {
			r, aa := s.Ratio(m.Name)
			fmt.Fprintf(&b, "| %s | %s (%s, %s is better) | %s (%s–%s) | %s (%s–%s) | %s | %s |\n",
				s.Scenario, m.Name, m.Unit, m.Better,
				num(s.Median[Ctrlkit][m.Name]), num(s.Spread[Ctrlkit][m.Name][0]), num(s.Spread[Ctrlkit][m.Name][1]),
				num(s.Median[ClientGo][m.Name]), num(s.Spread[ClientGo][m.Name][0]), num(s.Spread[ClientGo][m.Name][1]),
				ratio(r), ratio(aa))
		}
		for _, side := range s.Extra {
			for _, m := range s.Metrics {
				_, aa := s.Ratio(m.Name)
				fmt.Fprintf(&b, "| %s, vs %s | %s (%s, %s is better) | %s (%s–%s) | %s (%s–%s) | %s | %s |\n",
					s.Scenario, side, m.Name, m.Unit, m.Better,
					num(s.Median[Ctrlkit][m.Name]), num(s.Spread[Ctrlkit][m.Name][0]), num(s.Spread[Ctrlkit][m.Name][1]),
					num(s.Median[side][m.Name]), num(s.Spread[side][m.Name][0]), num(s.Spread[side][m.Name][1]),
					ratio(s.Median[Ctrlkit][m.Name]/s.Median[side][m.Name]), ratio(aa))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// JSON writes the summaries, every run included.
func JSON(w io.Writer, sums []Summary) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sums)
}

// ratio formats a ratio; 0/0 (both sides zero) is "n/a", and so is a
// negative one (a net figure below zero, the subtraction's noise around
// nothing).
func ratio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
		return "n/a"
	}
	if r < 0.1 {
		return fmt.Sprintf("%.4f", r)
	}
	return fmt.Sprintf("%.2f", r)
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
