package foo_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// generated maps each controller-gen generator to the folder its committed
// output lives in, and the files there that it writes.
var generated = []struct {
	generator, dir string
	owns           func(name string) bool
}{
	{"object", "api/v1alpha1", func(name string) bool { return strings.HasPrefix(name, "zz_generated.") }},
	{"crd", "config/crd", func(string) bool { return true }},
	{"rbac", "config/rbac", func(name string) bool { return name == "role.yaml" }},
}

// TestGenerated_isCurrent runs controller-gen with the arguments of the
// go:generate line in generate.go, into a temporary folder, and fails when
// a committed file differs from what it writes, is missing, or is one it no
// longer writes.
func TestGenerated_isCurrent(t *testing.T) {
	tmp := t.TempDir()
	args := append([]string{"tool"}, generateArgs(t)...)
	for _, g := range generated {
		args = append(args, fmt.Sprintf("output:%s:dir=%s", g.generator, filepath.Join(tmp, g.generator)))
	}
	out, err := exec.CommandContext(t.Context(), "go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, g := range generated {
		want := readFiles(t, filepath.Join(tmp, g.generator), func(string) bool { return true })
		got := readFiles(t, g.dir, g.owns)
		if len(want) == 0 {
			t.Errorf("controller-gen %s wrote nothing; the markers are gone?", g.generator)
		}
		for name, data := range want {
			path := filepath.Join(g.dir, name)
			switch committed, ok := got[name]; {
			case !ok:
				t.Errorf("%s is missing: run go generate ./examples/foo/...", path)
			case !bytes.Equal(committed, data):
				t.Errorf("%s is stale (%s): run go generate ./examples/foo/...", path, firstDifference(committed, data))
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("%s is not generated any more: delete it, and run go generate ./examples/foo/...", filepath.Join(g.dir, name))
			}
		}
	}
}

// generateArgs returns the arguments after "go" of generate.go's
// go:generate line, without its output rules.
func generateArgs(t *testing.T) []string {
	src, err := os.ReadFile("generate.go")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(src)) {
		fields, ok := strings.CutPrefix(strings.TrimSpace(line), "//go:generate go tool ")
		if !ok {
			continue
		}
		return slices.DeleteFunc(strings.Fields(fields), func(a string) bool { return strings.HasPrefix(a, "output:") })
	}
	t.Fatal(`generate.go has no "//go:generate go tool controller-gen" line`)
	return nil
}

// readFiles reads the files of dir whose names keep says to.
func readFiles(t *testing.T, dir string, keep func(string) bool) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() || !keep(e.Name()) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = data
	}
	return files
}

// firstDifference names the first line where committed and generated differ.
func firstDifference(committed, generated []byte) string {
	c, g := strings.Split(string(committed), "\n"), strings.Split(string(generated), "\n")
	for i := range max(len(c), len(g)) {
		var cl, gl string
		if i < len(c) {
			cl = c[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if cl != gl || i >= len(c) || i >= len(g) {
			return fmt.Sprintf("line %d: committed %q, generated %q", i+1, cl, gl)
		}
	}
	return "same lines, different bytes"
}
