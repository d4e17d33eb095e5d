// Package benchtable turns "go test -bench" output into the side-by-side
// table of README.md: every benchmark run as BenchmarkName/ctrlkit and
// BenchmarkName/client-go in the same run becomes one row with both
// measurements and their ratios.
//
// Repeated runs (-count N) of a benchmark are reduced to their median, so
// one noisy run does not move a ratio.
package benchtable

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The sub-benchmark names that pair up.
const (
	Ours   = "ctrlkit"
	Theirs = "client-go"
)

// Measure is the median of a benchmark's runs.
type Measure struct {
	NsPerOp     float64
	BytesPerOp  float64 // -1 without -benchmem
	AllocsPerOp float64 // -1 without -benchmem
	Runs        int
}

// Row pairs ctrlkit's and client-go's measure of one benchmark.
type Row struct {
	Name          string
	Ours, Theirs  Measure
	HasOurs, Both bool
}

// Speedup is how many times faster ctrlkit is (client-go ns/op over ctrlkit ns/op).
func (r Row) Speedup() float64 { return r.Theirs.NsPerOp / r.Ours.NsPerOp }

// Parse reads benchmark output and returns one row per benchmark name that
// has a ctrlkit or client-go sub-benchmark, in order of first appearance.
// Lines that are not benchmark results are ignored.
func Parse(r io.Reader) ([]Row, error) {
	runs := map[string]map[string][]result{} // name -> side -> runs
	var order []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, side, res, ok, err := parseLine(sc.Text())
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if runs[name] == nil {
			runs[name] = map[string][]result{}
			order = append(order, name)
		}
		runs[name][side] = append(runs[name][side], res)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	rows := make([]Row, 0, len(order))
	for _, name := range order {
		ours, theirs := runs[name][Ours], runs[name][Theirs]
		row := Row{Name: name, HasOurs: len(ours) > 0, Both: len(ours) > 0 && len(theirs) > 0}
		row.Ours, row.Theirs = median(ours), median(theirs)
		rows = append(rows, row)
	}
	return rows, nil
}

type result struct{ ns, bytes, allocs float64 }

// parseLine reads "BenchmarkName/side-8  1000  123 ns/op  45 B/op  2 allocs/op".
func parseLine(line string) (name, side string, res result, ok bool, err error) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
		return "", "", result{}, false, nil
	}
	full := f[0]
	if i := strings.LastIndexByte(full, '-'); i > 0 {
		if _, err := strconv.Atoi(full[i+1:]); err == nil {
			full = full[:i] // drop the GOMAXPROCS suffix
		}
	}
	i := strings.LastIndexByte(full, '/')
	if i < 0 || (full[i+1:] != Ours && full[i+1:] != Theirs) {
		return "", "", result{}, false, nil
	}
	name, side = full[:i], full[i+1:]
	res = result{ns: -1, bytes: -1, allocs: -1}
	for j := 2; j+1 < len(f); j += 2 {
		v, perr := strconv.ParseFloat(f[j], 64)
		if perr != nil {
			return "", "", result{}, false, fmt.Errorf("benchtable: %q: %w", line, perr)
		}
		switch f[j+1] {
		case "ns/op":
			res.ns = v
		case "B/op":
			res.bytes = v
		case "allocs/op":
			res.allocs = v
		}
	}
	if res.ns < 0 {
		return "", "", result{}, false, fmt.Errorf("benchtable: no ns/op in %q", line)
	}
	return name, side, res, true, nil
}

func median(rs []result) Measure {
	if len(rs) == 0 {
		return Measure{}
	}
	pick := func(get func(result) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = get(r)
		}
		slices.Sort(vs)
		if len(vs)%2 == 1 {
			return vs[len(vs)/2]
		}
		return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return Measure{
		NsPerOp:     pick(func(r result) float64 { return r.ns }),
		BytesPerOp:  pick(func(r result) float64 { return r.bytes }),
		AllocsPerOp: pick(func(r result) float64 { return r.allocs }),
		Runs:        len(rs),
	}
}

// Markdown writes rows as a table. Rows without a client-go counterpart
// show ctrlkit's numbers alone.
func Markdown(w io.Writer, rows []Row) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no ctrlkit or client-go benchmarks in the input")
		return err
	}
	var b strings.Builder
	b.WriteString("| benchmark | ctrlkit ns/op | client-go ns/op | speedup | ctrlkit B/op | client-go B/op | ctrlkit allocs/op | client-go allocs/op |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		speedup := "n/a"
		if r.Both && r.Ours.NsPerOp > 0 {
			speedup = fmt.Sprintf("%.2fx", r.Speedup())
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", strings.TrimPrefix(r.Name, "Benchmark"),
			num(r.Ours.NsPerOp, r.HasOurs), num(r.Theirs.NsPerOp, r.Both), speedup,
			num(r.Ours.BytesPerOp, r.HasOurs), num(r.Theirs.BytesPerOp, r.Both),
			num(r.Ours.AllocsPerOp, r.HasOurs), num(r.Theirs.AllocsPerOp, r.Both))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func num(v float64, present bool) string {
	if !present || v < 0 {
		return "-"
	}
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
