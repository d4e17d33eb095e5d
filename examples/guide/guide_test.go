package main

// The checks that keep docs/guide.md true: every file of this package that
// the guide shows is shown exactly as it is (files named guide_* are these
// checks, not part of the guide), and the guide's module works when ctrlkit
// comes from the Go module proxy, without its nested modules.

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ctrlkit/ctrlkit/internal/guidetest"
)

// guideFiles are the files of this package that the guide must show.
func guideFiles(t *testing.T) []string {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(names, func(n string) bool { return strings.HasPrefix(n, "guide_") })
}

func TestGuide_showsEveryFileOfItsControllerExactly(t *testing.T) {
	var files []string
	for _, f := range guideFiles(t) {
		files = append(files, "examples/guide/"+f)
	}
	files = append(files, "examples/fleet/main.go", "examples/fleet/main_test.go") // section 8
	guidetest.ShowsEachExactlyOnce(t, "../..", "docs/guide.md", files)
}

// TestGuide_worksInAnEmptyModuleWithCtrlkitAsTheModuleProxyServesIt copies
// the root module as the Go module proxy would serve it (no nested modules:
// no testenv/ sources to build the API server from), makes the guide's
// module beside it, and runs the guide's test there. The API server binary
// must come from what is already on this machine, found by its version.
func TestGuide_worksInAnEmptyModuleWithCtrlkitAsTheModuleProxyServesIt(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	guidetest.CopyModule(t, root, filepath.Join(tmp, "ctrlkit"))
	hello := filepath.Join(tmp, "hello")
	gomod := "module example.com/hello\n\ngo 1.26.0\n\nrequire github.com/ctrlkit/ctrlkit v0.0.0\n\n" +
		"replace github.com/ctrlkit/ctrlkit => ../ctrlkit\n"
	guidetest.WriteFile(t, filepath.Join(hello, "go.mod"), []byte(gomod))
	guidetest.WriteFile(t, filepath.Join(hello, "go.sum"), guidetest.ReadFile(t, filepath.Join(root, "go.sum")))
	for _, f := range guideFiles(t) {
		guidetest.WriteFile(t, filepath.Join(hello, f), guidetest.ReadFile(t, f))
	}

	cmd := exec.CommandContext(t.Context(), "go", "test", "-count=1", "-v", "./...")
	cmd.Dir = hello
	cmd.Env = append(guidetest.WithoutCtrlkitEnv(os.Environ()),
		// Let go fill in go.mod as "go get" would, from the module proxy
		// as configured: a user's module graph reads go.mod files of
		// modules that ctrlkit's own pruned graph never does, and a fresh
		// module cache lacks them (GOPROXY=off then fails on a new machine).
		"GOFLAGS=-mod=mod -buildvcs=false",
		"GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test in the guide's module: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestGreeter_") {
		t.Errorf("the guide's test did not run:\n%s", out)
	}
}
