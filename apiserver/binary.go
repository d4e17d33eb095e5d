package apiserver

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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

// Environment variables that steer where the binary comes from.
const (
	// EnvBinary names a ready ctrlkit-apiserver binary to use as is.
	EnvBinary = "CTRLKIT_APISERVER"
	// EnvSourceDir names the testenv module folder to build from.
	EnvSourceDir = "CTRLKIT_TESTENV_DIR"
	// EnvCacheDir overrides the per-machine cache folder for built binaries.
	EnvCacheDir = "CTRLKIT_CACHE_DIR"
)

const (
	testenvModule = "module github.com/ctrlkit/ctrlkit/testenv"
	binaryName    = "ctrlkit-apiserver"
	mainPackage   = "./cmd/ctrlkit-apiserver"
)

// Binary returns the path of a ctrlkit-apiserver binary, building it first
// when this machine has none for the current testenv sources.
//
// It uses $CTRLKIT_APISERVER when set. Otherwise it looks in a per-machine
// cache folder ($CTRLKIT_CACHE_DIR, default the user cache folder) under a key
// hashed from testenv's go.mod, go.sum and the server's sources, and on a miss
// builds into it. Builds hold an exclusive file lock, so test packages running
// in parallel build once and wait for each other. A build takes several
// minutes on a cold Go cache; progress lines go to progress (nil: discard).
func Binary(progress io.Writer) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("apiserver: $%s: %w", EnvBinary, err)
		}
		return p, nil
	}
	src, err := sourceDir()
	if err != nil {
		return "", err
	}
	key, err := sourceKey(src)
	if err != nil {
		return "", err
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, key, binaryName)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if progress == nil {
		progress = io.Discard
	}
	return bin, buildLocked(src, bin, filepath.Join(cache, "build.lock"), progress)
}

// buildLocked builds bin unless another process did while we waited for the lock.
func buildLocked(src, bin, lockPath string, progress io.Writer) error {
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return fmt.Errorf("apiserver: %w", err)
	}
	unlock, err := lockFile(lockPath)
	if err != nil {
		return fmt.Errorf("apiserver: lock %s: %w", lockPath, err)
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return nil
	}
	fmt.Fprintf(progress, "ctrlkit: building the API server (kube-apiserver + etcd) into %s\n", bin)
	fmt.Fprintln(progress, "ctrlkit: the first build on a machine takes a few minutes; later runs reuse it")
	tmp := bin + ".tmp"
	if err := goBuild(src, tmp, progress); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, bin)
}

// goBuild runs "go build" in src, reporting how many packages are done every
// 15 seconds so a person watching sees it move.
func goBuild(src, out string, progress io.Writer) error {
	cmd := exec.Command(goTool(), "build", "-v", "-o", out, mainPackage)
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
	err := cmd.Run()
	pw.Close()
	<-done
	if err != nil {
		return fmt.Errorf("apiserver: go build in %s: %w\n%s", src, err, tail.String())
	}
	fmt.Fprintf(progress, "ctrlkit: API server built in %s\n", time.Since(start).Round(time.Second))
	return nil
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

func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

// sourceDir finds the testenv module: $CTRLKIT_TESTENV_DIR, else next to this
// package's source (a checkout of ctrlkit), else above the working directory.
func sourceDir() (string, error) {
	if d := os.Getenv(EnvSourceDir); d != "" {
		if !isTestenv(d) {
			return "", fmt.Errorf("apiserver: $%s=%s is not the ctrlkit testenv module", EnvSourceDir, d)
		}
		return d, nil
	}
	var candidates []string
	if _, file, _, ok := runtime.Caller(0); ok {
		candidates = append(candidates, filepath.Join(filepath.Dir(file), "..", "testenv"))
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			candidates = append(candidates, filepath.Join(d, "testenv"))
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	for _, c := range candidates {
		if isTestenv(c) {
			return filepath.Clean(c), nil
		}
	}
	return "", fmt.Errorf("apiserver: cannot find the ctrlkit testenv module to build the API server from; "+
		"set $%s to a ctrlkit-apiserver binary or $%s to ctrlkit's testenv folder", EnvBinary, EnvSourceDir)
}

func isTestenv(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	return err == nil && strings.HasPrefix(string(b), testenvModule+"\n")
}

// sourceKey hashes what the binary is built from: the module files, every Go
// file of the module (except tests) and the Go version.
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
	sort.Strings(files)
	h := sha256.New()
	fmt.Fprintln(h, runtime.Version(), runtime.GOOS, runtime.GOARCH)
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

func cacheDir() (string, error) {
	if d := os.Getenv(EnvCacheDir); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("apiserver: no cache folder (set $%s): %w", EnvCacheDir, err)
	}
	return filepath.Join(d, "ctrlkit", "apiserver"), nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return !errors.Is(err, fs.ErrNotExist)
}
