package main

// The checks that keep docs/custom-resource.md true. Its operator,
// examples/website, is a module of its own (example.com/website, as a
// reader's would be): every hand-written file is shown exactly as it is,
// and in a copy of the module beside a copy of ctrlkit as the module proxy
// serves it, go generate writes the committed generated files again, byte
// for byte, and the operator's test passes.

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctrlkit/ctrlkit/internal/guidetest"
)

const websiteDir = "../website"

// isGenerated reports whether path (in examples/website) is written by go generate.
func isGenerated(path string) bool {
	return strings.HasPrefix(filepath.Base(path), "zz_generated.") || strings.HasPrefix(path, "config/")
}

// websiteFiles returns the files of examples/website, relative to it, that
// keep says to.
func websiteFiles(t *testing.T, keep func(string) bool) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(websiteDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(websiteDir, p)
		if keep(rel) {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestCustomResourceGuide_showsEveryHandWrittenFileOfItsOperatorExactly(t *testing.T) {
	var files []string
	for _, f := range websiteFiles(t, func(p string) bool { return strings.HasSuffix(p, ".go") && !isGenerated(p) }) {
		files = append(files, "examples/website/"+f)
	}
	if len(files) < 4 {
		t.Fatalf("examples/website has %d hand-written Go files; expected the types, the reconciler, main and the test", len(files))
	}
	guidetest.ShowsEachExactlyOnce(t, "../..", "docs/custom-resource.md", files)
}

func TestCustomResourceGuide_generatesTheCommittedFilesAndPassesWithCtrlkitAsTheModuleProxyServesIt(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	guidetest.CopyModule(t, root, filepath.Join(tmp, "ctrlkit"))
	site := filepath.Join(tmp, "website")
	generated := map[string][]byte{}
	for _, f := range websiteFiles(t, func(string) bool { return true }) {
		b := guidetest.ReadFile(t, filepath.Join(websiteDir, f))
		if isGenerated(f) {
			generated[f] = b // go generate must write it again
			continue
		}
		if f == "go.mod" {
			b = bytes.Replace(b, []byte("=> ../.."), []byte("=> ../ctrlkit"), 1)
		}
		guidetest.WriteFile(t, filepath.Join(site, f), b)
	}
	if len(generated) < 3 {
		t.Fatalf("examples/website has %d generated files; expected deep-copy, the CRD and the role", len(generated))
	}
	env := append(guidetest.WithoutCtrlkitEnv(os.Environ()), "GOFLAGS=-buildvcs=false", "GOWORK=off")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "go", args...)
		cmd.Dir, cmd.Env = site, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in the guide's module: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	run("generate", "./...")
	for f, want := range generated {
		got, err := os.ReadFile(filepath.Join(site, f))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("go generate wrote %s differently from the committed file (%v): run go generate ./... in examples/website", f, err)
		}
	}
	if out := run("test", "-count=1", "-v", "./..."); !strings.Contains(out, "--- PASS: TestWebsite_") {
		t.Errorf("the guide's test did not run:\n%s", out)
	}
}
