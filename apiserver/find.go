package apiserver

import (
	"bytes"
	"cmp"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/ctrlkit/ctrlkit/internal/safefile"
)

// ctrlkitVersion is the version of ctrlkit's root module that this program
// was built with, or "" when it has none: a checkout, a development build, or
// a replace directive pointing at a folder.
func ctrlkitVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return moduleVersion(bi, rootModule)
}

// moduleVersion is the version of module path in bi, the main module or a
// dependency, or "" when it is not a published version.
func moduleVersion(bi *debug.BuildInfo, path string) string {
	m := &bi.Main
	if m.Path != path {
		i := slices.IndexFunc(bi.Deps, func(d *debug.Module) bool { return d.Path == path })
		if i < 0 {
			return ""
		}
		m = bi.Deps[i]
	}
	if m.Replace != nil {
		m = m.Replace
		if m.Path != path {
			return "" // a folder, or another module
		}
	}
	if m.Version == "" || m.Version == "(devel)" {
		return ""
	}
	return m.Version
}

// pseudoRev matches the revision at the end of a pseudo-version
// (v0.0.0-20261122205542-5d40eb6a1b2c, v0.4.1-0.20261122205542-5d40eb6a1b2c).
var pseudoRev = regexp.MustCompile(`[-.]\d{14}-([0-9a-f]{12})(\+incompatible)?$`)

// testenvQuery is what to ask "go mod download" for to get testenv at the
// same commit as ctrlkit's version v: the tag for a release (ctrlkit tags
// vX.Y.Z and testenv/vX.Y.Z together), the commit for a pseudo-version.
func testenvQuery(v string) string {
	if m := pseudoRev.FindStringSubmatch(v); m != nil {
		return m[1]
	}
	return v
}

// downloadTestenv fetches the testenv module at ctrlkit's version v into the
// module cache (or finds it there) and returns its folder.
func downloadTestenv(v string) (string, error) {
	q := testenvModule + "@" + testenvQuery(v)
	// The go command runs in a fresh folder of ours holding a go.mod of its
	// own: the caller's go.mod stays untouched, and a go.mod another user
	// left in a folder above (/tmp/go.mod, with its replace directives and
	// toolchain line) is never read.
	tmp, err := os.MkdirTemp("", "ctrlkit-testenv-download-")
	if err != nil {
		return "", fmt.Errorf("testenv sources: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte("module ctrlkit.invalid/download\n"), 0o600); err != nil {
		return "", fmt.Errorf("testenv sources: %w", err)
	}
	cmd := exec.Command(goTool(), "mod", "download", "-json", q)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil && runErr == nil {
		runErr = err
	}
	switch {
	case info.Error != "":
		return "", fmt.Errorf("testenv sources: go mod download %s: %s", q, info.Error)
	case runErr != nil:
		return "", fmt.Errorf("testenv sources: go mod download %s: %v %s", q, runErr, strings.TrimSpace(stderr.String()))
	case !isTestenv(info.Dir):
		return "", fmt.Errorf("testenv sources: go mod download %s gave %q, not the testenv module", q, info.Dir)
	}
	if err := trustedSources(info.Dir); err != nil {
		return "", err
	}
	return info.Dir, nil
}

// findInstalled looks for a binary built from KubernetesVersion: on $PATH,
// in the folders "go install" writes to, then in the cache, newest first.
// It also returns what it looked at and why each was not taken.
func findInstalled(cache string) (bin string, tried []string) {
	for _, c := range installCandidates(cache) {
		if err := safefile.Trusted(c); err != nil {
			tried = append(tried, c+": not run: "+err.Error())
			continue
		}
		if err := builtForUs(c); err != nil {
			tried = append(tried, c+": "+err.Error())
			continue
		}
		return c, nil
	}
	if len(tried) == 0 {
		tried = append(tried, fmt.Sprintf("%s on $PATH, in $GOBIN or $GOPATH/bin, and in %s: none", binaryName, cache))
	}
	return "", tried
}

func installCandidates(cache string) []string {
	var cs []string
	if p, err := exec.LookPath(binaryName); err == nil {
		cs = append(cs, p)
	}
	for _, d := range goBinDirs() {
		if p := filepath.Join(d, binaryName); fileExists(p) {
			cs = append(cs, p)
		}
	}
	cached, _ := filepath.Glob(filepath.Join(cache, "*", binaryName))
	cs = append(cs, newestFirst(cached)...)
	seen := map[string]bool{}
	return slices.DeleteFunc(cs, func(p string) bool {
		abs, _ := filepath.Abs(p)
		dup := seen[abs]
		seen[abs] = true
		return dup
	})
}

// goBinDirs are where "go install" puts commands: $GOBIN, else bin in each
// $GOPATH entry, as the go command reports them.
func goBinDirs() []string {
	out, err := exec.Command(goTool(), "env", "-json", "GOBIN", "GOPATH").Output()
	if err != nil {
		return nil
	}
	var env struct{ GOBIN, GOPATH string }
	if json.Unmarshal(out, &env) != nil {
		return nil
	}
	if env.GOBIN != "" {
		return []string{env.GOBIN}
	}
	var dirs []string
	for _, p := range filepath.SplitList(env.GOPATH) {
		dirs = append(dirs, filepath.Join(p, "bin"))
	}
	return dirs
}

func newestFirst(paths []string) []string {
	mod := map[string]time.Time{}
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			mod[p] = fi.ModTime()
		}
	}
	slices.SortFunc(paths, func(a, b string) int { return cmp.Compare(mod[b].UnixNano(), mod[a].UnixNano()) })
	return paths
}

// builtForUs reads the build information Go records in every binary and
// accepts a ctrlkit-apiserver built from KubernetesVersion.
func builtForUs(bin string) error {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("no Go build information: %w", err)
	}
	if bi.Path != testenvModule+"/cmd/"+binaryName {
		return fmt.Errorf("is %s, not %s", cmp.Or(bi.Path, "another program"), binaryName)
	}
	if v := depVersion(bi, "k8s.io/kubernetes"); v != KubernetesVersion {
		return fmt.Errorf("built from Kubernetes %s, want %s", v, KubernetesVersion)
	}
	return nil
}

func depVersion(bi *debug.BuildInfo, path string) string {
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "none"
}
