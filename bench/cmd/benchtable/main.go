// Command benchtable reads "go test -bench" output on standard input and
// prints the ctrlkit versus client-go table (see package benchtable).
package main

import (
	"fmt"
	"os"

	"github.com/ctrlkit/ctrlkit/bench/benchtable"
)

func main() {
	rows, err := benchtable.Parse(os.Stdin)
	if err == nil {
		err = benchtable.Markdown(os.Stdout, rows)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
