package main

// The checks that keep docs/guide.md true: every file of this package that
// the guide shows is shown exactly as it is (files named guide_* are these
// checks, not part of the guide), and the guide's module works when ctrlkit
// comes from the Go module proxy, without its nested modules.

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const guidePath = "../../docs/guide.md"

// shownFile matches a code block of the guide that shows a whole file:
// <!-- file: NAME --> on the line before the block.
var shownFile = regexp.MustCompile("(?s)<!-- file: ([^ ]+) -->\n```[a-z]*\n(.*?)```\n")

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
	md, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]int{}
	for _, m := range shownFile.FindAllSubmatch(md, -1) {
		name := string(m[1])
		shown[name]++
		src, err := os.ReadFile(filepath.Base(name))
		if err != nil || filepath.Dir(name) != "examples/guide" {
			t.Errorf("the guide shows %s, which is not a file of examples/guide", name)
			continue
		}
		if !bytes.Equal(m[2], src) {
			t.Errorf("the guide's %s differs from the file; copy the file into the guide", name)
		}
	}
	for _, f := range guideFiles(t) {
		if n := shown["examples/guide/"+f]; n != 1 {
			t.Errorf("the guide shows %s %d times, want once", f, n)
		}
	}
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
	ctrlkit := filepath.Join(tmp, "ctrlkit")
	copyModule(t, root, ctrlkit)
	for _, nested := range []string{"testenv", "bench"} {
		if _, err := os.Stat(filepath.Join(ctrlkit, nested)); err == nil {
			t.Fatalf("the copy holds the nested module %s", nested)
		}
	}
	hello := filepath.Join(tmp, "hello")
	gomod := "module example.com/hello\n\ngo 1.26.0\n\nrequire github.com/ctrlkit/ctrlkit v0.0.0\n\n" +
		"replace github.com/ctrlkit/ctrlkit => ../ctrlkit\n"
	writeFile(t, filepath.Join(hello, "go.mod"), []byte(gomod))
	writeFile(t, filepath.Join(hello, "go.sum"), readFile(t, filepath.Join(root, "go.sum")))
	for _, f := range guideFiles(t) {
		writeFile(t, filepath.Join(hello, f), readFile(t, f))
	}

	cmd := exec.CommandContext(t.Context(), "go", "test", "-count=1", "-v", "./...")
	cmd.Dir = hello
	cmd.Env = append(withoutCtrlkitEnv(os.Environ()),
		"GOFLAGS=-mod=mod -buildvcs=false", // let go fill in go.mod as "go get" would
		"GOPROXY=off",                      // everything comes from this machine's module cache
		"GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test in the guide's module: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestGreeter_") {
		t.Errorf("the guide's test did not run:\n%s", out)
	}
}

// withoutCtrlkitEnv drops the variables that would hand the API server binary
// or its sources to the test directly.
func withoutCtrlkitEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, "CTRLKIT_APISERVER=") || strings.HasPrefix(kv, "CTRLKIT_TESTENV_DIR=") ||
			strings.HasPrefix(kv, "GOFLAGS=")
	})
}

// copyModule copies the module in src to dst as the module proxy's zip holds
// it: without version-control folders and without nested modules (folders
// with a go.mod of their own).
func copyModule(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if slices.Contains([]string{".git", ".hg", ".svn", ".bzr"}, d.Name()) {
				return filepath.SkipDir
			}
			if rel != "." && fileExists(filepath.Join(p, "go.mod")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return writeFileErr(filepath.Join(dst, rel), b)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := writeFileErr(p, b); err != nil {
		t.Fatal(err)
	}
}

func writeFileErr(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}
