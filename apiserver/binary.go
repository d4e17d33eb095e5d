package apiserver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// KubernetesVersion is the version of kube-apiserver that ctrlkit-apiserver is
// built from: testenv's requirement on k8s.io/kubernetes. A binary found
// without its sources (on PATH, in the cache) is used only if it was built
// from this version. A test in this package keeps it equal to testenv/go.mod.
const KubernetesVersion = "v1.36.3"

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
	rootModule    = "github.com/ctrlkit/ctrlkit"
	testenvModule = rootModule + "/testenv"
	binaryName    = "ctrlkit-apiserver"
	mainPackage   = "./cmd/ctrlkit-apiserver"
)

// Binary returns the path of a ctrlkit-apiserver binary, building it first
// when it can and this machine has none. It tries, in order:
//
//  1. $CTRLKIT_APISERVER, used as is.
//  2. The testenv sources: $CTRLKIT_TESTENV_DIR, or testenv/ of the
//     checkout of ctrlkit this package was compiled from (the path the
//     compiler recorded; never a folder searched for from the working
//     directory). Sources another user could have changed are refused
//     (trustedSources). The binary is cached per machine
//     ($CTRLKIT_CACHE_DIR, default the user cache folder) under a key hashed
//     from testenv's go.mod, go.sum, its Go files, the build flags and the Go
//     version, and built into the cache on a miss.
//  3. When ctrlkit is a dependency of the module under test: the Go module
//     proxy leaves testenv (a nested module) out of ctrlkit's module, so
//     Binary asks "go mod download" for testenv at the same version as
//     ctrlkit, then caches or builds as in 2. This needs a released (or
//     pseudo-) version of ctrlkit, not a replace directive.
//  4. A binary built from KubernetesVersion, found by reading its build
//     information: ctrlkit-apiserver on $PATH, in $GOBIN or $GOPATH/bin (where
//     "go install" puts it), then any binary in the cache, newest first.
//
// Builds hold an exclusive file lock, so test packages running in parallel
// build once and wait for each other. A build takes several minutes on a cold
// Go cache; progress lines go to progress (nil: discard). When nothing is
// found, the error says what was tried and the commands that fix it.
func Binary(progress io.Writer) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("apiserver: $%s: %w", EnvBinary, err)
		}
		return p, nil
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	src, err := sourceDir()
	if err != nil {
		return "", err
	}
	if src != "" {
		return cachedOrBuilt(src, cache, progress)
	}
	var tried []string
	version := ctrlkitVersion()
	if version != "" {
		src, err := downloadTestenv(version)
		if err == nil {
			return cachedOrBuilt(src, cache, progress)
		}
		tried = append(tried, err.Error())
	} else {
		tried = append(tried, "testenv sources: none (ctrlkit's module version is unknown: replaced by a folder, or a development build)")
	}
	bin, rejected := findInstalled(cache)
	if bin != "" {
		return bin, nil
	}
	return "", notFound(version, append(tried, rejected...))
}

// BuildFrom builds ctrlkit-apiserver from the testenv module in src into the
// per-machine cache (or finds it there) and returns its path. It is what
// Binary does with sources; "ctrlkit apiserver build" uses it directly.
func BuildFrom(src string, progress io.Writer) (string, error) {
	if !isTestenv(src) {
		return "", fmt.Errorf("apiserver: %s is not ctrlkit's testenv module", src)
	}
	if err := trustedSources(src); err != nil {
		return "", fmt.Errorf("apiserver: %w", err)
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	if progress == nil {
		progress = io.Discard
	}
	return cachedOrBuilt(src, cache, progress)
}

// cachedOrBuilt returns the cached binary for the sources in src, building it on a miss.
func cachedOrBuilt(src, cache string, progress io.Writer) (string, error) {
	key, err := sourceKey(src)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, key, binaryName)
	if fileExists(bin) {
		return bin, nil
	}
	return bin, buildLocked(src, bin, filepath.Join(cache, "build.lock"), progress)
}

// buildLocked builds bin unless another process did while we waited for the lock.
func buildLocked(src, bin, lockPath string, progress io.Writer) error {
	if err := os.MkdirAll(filepath.Dir(bin), 0o700); err != nil {
		return fmt.Errorf("apiserver: %w", err)
	}
	unlock, err := lockFile(lockPath)
	if err != nil {
		return fmt.Errorf("apiserver: lock %s: %w", lockPath, err)
	}
	defer unlock()
	if fileExists(bin) {
		return nil
	}
	fmt.Fprintf(progress, "ctrlkit: building the API server (kube-apiserver + etcd) from %s into %s\n", src, bin)
	fmt.Fprintln(progress, "ctrlkit: the first build on a machine takes a few minutes; later runs reuse it")
	tmp := bin + ".tmp"
	if err := goBuild(src, tmp, progress); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, bin)
}

// notFound says what Binary tried and how to get a binary.
func notFound(version string, tried []string) error {
	at := version
	if at == "" {
		at = "VERSION"
	}
	return fmt.Errorf(`apiserver: no ctrlkit-apiserver for Kubernetes %s on this machine, and no sources to build one from
(the Go module proxy leaves ctrlkit's nested testenv module out of the ctrlkit module). Any one of these fixes it:
  go run %[3]s/cmd/ctrlkit@%[2]s apiserver build            # build into the per-machine cache (minutes, once)
  go install %[4]s/cmd/ctrlkit-apiserver@%[2]s    # onto your PATH
  export %[5]s=/path/to/ctrlkit-apiserver
tried:
  %[6]s`, KubernetesVersion, at, rootModule, testenvModule, EnvBinary, strings.Join(tried, "\n  "))
}

// sourceDir returns the testenv module to build from, or "" when there is
// none. Only sources the user chose are built: $CTRLKIT_TESTENV_DIR, or
// testenv/ of the checkout this package was compiled from, a path the
// compiler recorded (and none in a -trimpath build). Nothing is searched
// for: a folder found by walking up from the working directory could be
// anyone's (/tmp/testenv), and building it runs their code. Either source
// must pass trustedSources.
func sourceDir() (string, error) {
	if d := os.Getenv(EnvSourceDir); d != "" {
		if !isTestenv(d) {
			return "", fmt.Errorf("apiserver: $%s=%s is not the ctrlkit testenv module", EnvSourceDir, d)
		}
		if err := trustedSources(d); err != nil {
			return "", fmt.Errorf("apiserver: $%s: %w", EnvSourceDir, err)
		}
		return filepath.Clean(d), nil
	}
	d := checkoutTestenv()
	if d == "" || !isTestenv(d) {
		return "", nil
	}
	if err := trustedSources(d); err != nil {
		return "", fmt.Errorf("apiserver: the checkout ctrlkit was compiled from: %w", err)
	}
	return d, nil
}

// checkoutTestenv is testenv/ beside this package's source as the compiler
// recorded it, or "" when the path is not absolute (a -trimpath build, where
// it would be read relative to the working directory).
func checkoutTestenv() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	return filepath.Join(filepath.Dir(filepath.Dir(file)), "testenv")
}

func isTestenv(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	return err == nil && strings.HasPrefix(string(b), "module "+testenvModule+"\n")
}

// cacheDir is the per-machine folder of built binaries, created if need be
// and refused when another user could put a binary into it.
func cacheDir() (string, error) {
	d := os.Getenv(EnvCacheDir)
	if d == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("apiserver: no cache folder (set $%s): %w", EnvCacheDir, err)
		}
		d = filepath.Join(base, "ctrlkit", "apiserver")
	}
	if err := privateCacheDir(d); err != nil {
		return "", err
	}
	return d, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return !errors.Is(err, fs.ErrNotExist)
}
