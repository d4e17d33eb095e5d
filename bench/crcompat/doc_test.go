// Package crcompat checks that controller-runtime users can test on
// ctrlkit's embedded API server in place of envtest: envtest_test.go is a
// controller-runtime test, shown in docs/controller-runtime.md exactly as
// it is.
package crcompat

import (
	"bytes"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves goroutines behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDocs_showEnvtestTestExactly(t *testing.T) {
	readme, err := os.ReadFile("../../docs/controller-runtime.md")
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile("envtest_test.go")
	if err != nil {
		t.Fatal(err)
	}
	block := append(append([]byte("<!-- file: bench/crcompat/envtest_test.go -->\n```go\n"), file...), "```\n"...)
	if n := bytes.Count(readme, block); n != 1 {
		t.Errorf("docs/controller-runtime.md shows bench/crcompat/envtest_test.go exactly %d times, want once: copy the file into its block", n)
	}
}
