// Package program names the running program, for the defaults that need a
// name of their own per operator (webhook configurations, the leader
// election Lease), so that two operators in one cluster do not share one.
package program

import (
	"os"
	"path/filepath"
	"strings"
)

// Name is the program's file name made a DNS label: lower case, each run of
// characters other than letters and digits one dash, at most 40
// characters; "ctrlkit" when nothing is left.
func Name() string { return nameOf(os.Args[0]) }

func nameOf(path string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(filepath.Base(path)) {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			dash = true
			continue
		}
		if dash && b.Len() > 0 {
			b.WriteByte('-')
		}
		b.WriteRune(r)
		dash = false
	}
	name := strings.TrimRight(b.String()[:min(b.Len(), 40)], "-")
	if name == "" {
		return "ctrlkit"
	}
	return name
}
