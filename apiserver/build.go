package apiserver

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// versionPackage holds the version kube-apiserver reports at /version. Its
// variables are meant to be set at link time, as Kubernetes' release builds
// do; a plain "go build" leaves "v0.0.0-master+$Format:%H$", which kubectl
// cannot parse.
const versionPackage = "k8s.io/component-base/version"

// goBuild runs "go build" in src, reporting how many packages are done every
// 15 seconds so a person watching sees it move.
func goBuild(src, out string, progress io.Writer) error {
	ldflags, err := versionLDFlags(src)
	if err != nil {
		return err
	}
	cmd := exec.Command(goTool(), "build", "-v", "-ldflags", ldflags, "-o", out, mainPackage)
	cmd.Dir = src
	// A plain build whatever the caller's flags: never -race, never a
	// workspace, and go.mod/go.sum are read only (they are the key).
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly -buildvcs=false", "GOWORK=off")
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	var tail lastLines
	done := make(chan struct{})
	go func() {
		defer close(done)
		countPackages(pr, &tail, progress)
	}()
	start := time.Now()
	err = cmd.Run()
	pw.Close()
	<-done
	if err != nil {
		return fmt.Errorf("apiserver: go build in %s: %w\n%s", src, err, tail.String())
	}
	fmt.Fprintf(progress, "ctrlkit: API server built in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// versionLDFlags stamps the Kubernetes version that testenv's go.mod requires
// into the binary, so /version and "kubectl version" report it.
func versionLDFlags(src string) (string, error) {
	v, err := requiredVersion(filepath.Join(src, "go.mod"), "k8s.io/kubernetes")
	if err != nil {
		return "", err
	}
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return "", fmt.Errorf("apiserver: testenv requires k8s.io/kubernetes %q, not a version", v)
	}
	return fmt.Sprintf("-X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=%[3]s -X %[1]s.gitMinor=%[4]s",
		versionPackage, v, parts[0], parts[1]), nil
}

// requiredVersion reads the version of module mod from a go.mod's require
// lines (single or in a block).
func requiredVersion(gomod, mod string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", fmt.Errorf("apiserver: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == mod {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("apiserver: %s does not require %s", gomod, mod)
}

func countPackages(r io.Reader, tail *lastLines, progress io.Writer) {
	sc := bufio.NewScanner(r)
	n, last := 0, time.Now()
	for sc.Scan() {
		line := sc.Text()
		tail.add(line)
		if !strings.HasPrefix(line, "#") && !strings.Contains(line, " ") {
			n++ // "go build -v" names each package it compiles
		}
		if time.Since(last) >= 15*time.Second {
			fmt.Fprintf(progress, "ctrlkit: still building the API server: %d packages compiled\n", n)
			last = time.Now()
		}
	}
}

// lastLines keeps the last 30 lines of build output for an error message.
type lastLines struct{ lines []string }

func (l *lastLines) add(s string) {
	l.lines = append(l.lines, s)
	if len(l.lines) > 30 {
		l.lines = l.lines[1:]
	}
}

func (l *lastLines) String() string { return strings.Join(l.lines, "\n") }

// goTool is the go command of the toolchain that built this program, else
// the one on PATH. A program built with -trimpath and run without GOROOT
// set has no GOROOT: the toolchain's path is then not tried at all, since
// joined to "" it is bin/go, relative, which would run whatever the working
// directory holds there (exec.LookPath refuses PATH entries relative to it).
func goTool() string {
	if root := runtime.GOROOT(); filepath.IsAbs(root) {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

// sourceKey hashes what the binary is built from: the module files, every Go
// file of the module (except tests), the link flags and the Go version.
func sourceKey(src string) (string, error) {
	var files []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && (name == "testdata" || strings.HasPrefix(name, ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && (name == "go.mod" || name == "go.sum" ||
			(strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go"))) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("apiserver: hash testenv sources: %w", err)
	}
	ldflags, err := versionLDFlags(src)
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	h := sha256.New()
	fmt.Fprintln(h, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintln(h, "ldflags", ldflags)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("apiserver: hash testenv sources: %w", err)
		}
		rel, _ := filepath.Rel(src, f)
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
