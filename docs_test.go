package ctrlkit

// Checks that keep the overview documents true as the tree changes: they
// link only to files of this repository, and they list every package.

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// markdownFiles are README.md, ARCHITECTURE.md and every .md under docs/ and examples/.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "ARCHITECTURE.md"}
	for _, dir := range []string{"docs", "examples"} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
				files = append(files, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

var (
	webLink      = regexp.MustCompile(`https?://`)
	markdownLink = regexp.MustCompile(`\]\(([^)#\s]+)[^)]*\)`)
	parentPath   = regexp.MustCompile("`(\\.\\./[^`\\s]*)`")
	fencedCode   = regexp.MustCompile("(?s)\n```.*?\n```")
)

func TestDocs_linkOnlyToFilesOfThisRepository(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range markdownFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if loc := webLink.FindIndex(b); loc != nil {
			t.Errorf("%s links to the web: %q", f, lineAt(b, loc[0]))
		}
		var targets []string
		for _, m := range markdownLink.FindAllSubmatch(fencedCode.ReplaceAll(b, nil), -1) { // Go code has ](
			targets = append(targets, string(m[1]))
		}
		for _, m := range parentPath.FindAllSubmatch(b, -1) {
			targets = append(targets, string(m[1]))
		}
		for _, target := range targets {
			p, err := filepath.Abs(filepath.Join(filepath.Dir(f), filepath.FromSlash(target)))
			if err != nil {
				t.Fatal(err)
			}
			if rel, err := filepath.Rel(root, p); err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s points outside the repository: %s", f, target)
			} else if _, err := os.Stat(p); err != nil {
				t.Errorf("%s links to %s, which does not exist", f, target)
			}
		}
	}
}

func lineAt(b []byte, i int) string {
	start := strings.LastIndexByte(string(b[:i]), '\n') + 1
	end := strings.IndexByte(string(b[i:]), '\n')
	if end < 0 {
		return string(b[start:])
	}
	return string(b[start : i+end])
}

// topLevelPackages are the folders at the root of the repository that hold
// Go packages of the root module or a module of their own.
func topLevelPackages(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && holdsGo(t, e.Name()) {
			dirs = append(dirs, e.Name())
		}
	}
	return dirs
}

func holdsGo(t *testing.T, dir string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") {
			found = true
			return filepath.SkipAll
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func TestDocs_theOverviewAndTheREADMEListEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, layout, _ := strings.Cut(string(readme), "## Layout")
	layout, _, _ = strings.Cut(layout, "\n## ")
	for _, dir := range topLevelPackages(t) {
		// doc.go names each as a list item: "//   - name: ..." or "//   - name/sub: ...".
		if !regexp.MustCompile(`(?m)^//\s+- ` + regexp.QuoteMeta(dir) + `[/:]`).Match(doc) {
			t.Errorf("doc.go (the go doc overview) does not list %s", dir)
		}
		if !regexp.MustCompile(`(^|\s)` + regexp.QuoteMeta(dir) + `/`).MatchString(layout) {
			t.Errorf("README.md's Layout does not list %s/", dir)
		}
	}
	if got := topLevelPackages(t); !slices.Contains(got, "informer") {
		t.Fatalf("found packages %v; the walk is broken", got)
	}
}
