package benchtable

import (
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/ctrlkit/ctrlkit/bench/store
cpu: Some CPU
BenchmarkGet/ctrlkit-2     	 1000000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkGet/client-go-2   	 1000000	       300.0 ns/op	      16 B/op	       1 allocs/op
BenchmarkGet/ctrlkit-2     	 1000000	       120.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkGet/client-go-2   	 1000000	       280.0 ns/op	      16 B/op	       1 allocs/op
BenchmarkGet/ctrlkit-2     	 1000000	       900.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkGet/client-go-2   	 1000000	       290.0 ns/op	      16 B/op	       1 allocs/op
BenchmarkOnlyOurs/ctrlkit-2	     500	      2500 ns/op
BenchmarkUnrelated-2       	     500	      2500 ns/op
PASS
ok  	github.com/ctrlkit/ctrlkit/bench/store	3.2s
`

func TestParse_pairsSidesAndTakesMedians(t *testing.T) {
	rows, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("got %d rows, want 2 (Get, OnlyOurs): %+v", len(rows), rows)
	}
	get := rows[0]
	if get.Name != "BenchmarkGet" || !get.Both || get.Ours.Runs != 3 || get.Theirs.Runs != 3 {
		t.Fatalf("Get row = %+v", get)
	}
	// Medians: ours 120 (the 900 outlier is ignored), theirs 290.
	if get.Ours.NsPerOp != 120 || get.Theirs.NsPerOp != 290 || get.Theirs.BytesPerOp != 16 || get.Theirs.AllocsPerOp != 1 {
		t.Fatalf("Get medians = %+v / %+v", get.Ours, get.Theirs)
	}
	if s := get.Speedup(); s < 2.41 || s > 2.42 {
		t.Fatalf("speedup = %v, want 290/120", s)
	}
	only := rows[1]
	if only.Both || !only.HasOurs || only.Ours.BytesPerOp != -1 {
		t.Fatalf("OnlyOurs row = %+v", only)
	}
}

func TestParse_rejectsAMalformedNumber(t *testing.T) {
	_, err := Parse(strings.NewReader("BenchmarkX/ctrlkit-2 10 abc ns/op\n"))
	if err == nil {
		t.Fatal("want an error for a malformed number")
	}
}

func TestMarkdown_showsRatiosAndDashesForMissingSides(t *testing.T) {
	rows, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := Markdown(&b, rows); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| Get | 120 | 290 | 2.42x | 0.0 | 16.0 | 0.0 | 1.0 |",
		"| OnlyOurs | 2500 | - | n/a | - | - | - | - |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestMarkdown_saysSoWhenThereIsNothingToCompare(t *testing.T) {
	var b strings.Builder
	if err := Markdown(&b, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "no ctrlkit or client-go benchmarks") {
		t.Fatalf("got %q", b.String())
	}
}
