// Package guidetest holds the checks that keep a guide true to the example
// it shows: every file shown is the file, byte for byte, and the example's
// module works with ctrlkit as the Go module proxy serves it.
package guidetest

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// shownFile matches a code block of a guide that shows a whole file:
// <!-- file: PATH --> on the line before the block, PATH from the
// repository's root.
var shownFile = regexp.MustCompile("(?s)<!-- file: ([^ ]+) -->\n```[a-z]*\n(.*?)```\n")

// ShowsEachExactlyOnce checks that the guide at guidePath shows each of
// files (paths from the repository's root, read from root) once, exactly as
// it is, and shows no other file.
func ShowsEachExactlyOnce(t *testing.T, root, guidePath string, files []string) {
	t.Helper()
	md := ReadFile(t, filepath.Join(root, guidePath))
	shown := map[string]int{}
	for _, m := range shownFile.FindAllSubmatch(md, -1) {
		name := string(m[1])
		shown[name]++
		if !slices.Contains(files, name) {
			t.Errorf("%s shows %s, which is not a file of its example", guidePath, name)
			continue
		}
		if !bytes.Equal(m[2], ReadFile(t, filepath.Join(root, name))) {
			t.Errorf("%s's %s differs from the file; copy the file into the guide", guidePath, name)
		}
	}
	for _, f := range files {
		if n := shown[f]; n != 1 {
			t.Errorf("%s shows %s %d times, want once", guidePath, f, n)
		}
	}
}

// CopyModule copies the module in src to dst as the module proxy's zip
// holds it: without version-control folders and without nested modules
// (folders with a go.mod of their own).
func CopyModule(t *testing.T, src, dst string) {
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
			if _, err := os.Stat(filepath.Join(p, "go.mod")); rel != "." && err == nil {
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
		return writeFile(filepath.Join(dst, rel), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, nested := range []string{"testenv", "bench"} {
		if _, err := os.Stat(filepath.Join(dst, nested)); err == nil {
			t.Fatalf("the copy holds the nested module %s", nested)
		}
	}
}

// WithoutCtrlkitEnv drops the variables that would hand the API server
// binary or its sources to a test directly, and GOFLAGS.
func WithoutCtrlkitEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, "CTRLKIT_APISERVER=") || strings.HasPrefix(kv, "CTRLKIT_TESTENV_DIR=") ||
			strings.HasPrefix(kv, "GOFLAGS=")
	})
}

// ReadFile returns the file at p, failing t if it cannot.
func ReadFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WriteFile writes b to p, making its folders, failing t if it cannot.
func WriteFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := writeFile(p, b); err != nil {
		t.Fatal(err)
	}
}

func writeFile(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}
