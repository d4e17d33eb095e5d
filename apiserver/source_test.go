package apiserver

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// plantTestenv writes, under dir, a testenv/ that passes for ctrlkit's (its
// go.mod's module line and Kubernetes requirement) and whose server would
// leave a file named "pwned" in dir if it were ever built and run.
func plantTestenv(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "testenv")
	files := map[string]string{
		"go.mod": "module " + testenvModule + "\n\ngo 1.26\n\nrequire k8s.io/kubernetes " + KubernetesVersion + "\n",
		"cmd/ctrlkit-apiserver/main.go": "package main\n\nimport \"os\"\n\nfunc main() { os.WriteFile(" +
			`"` + filepath.Join(dir, "pwned") + `"` + ", nil, 0o644) }\n",
	}
	for name, body := range files {
		p := filepath.Join(src, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// A program built without a checkout's path (-trimpath, or ctrlkit from the
// module proxy) used to look for testenv/ in its working directory and every
// folder above it, so anyone could have their code built and run by
// planting /tmp/testenv. It must build only sources the user chose.
func TestBinary_neverBuildsATestenvPlantedAboveTheWorkingDirectory(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "findbinary")
	build := exec.Command(goTool(), "build", "-trimpath", "-o", prog, "./testdata/findbinary")
	// Built as ociimage builds programs (-trimpath, CGO_ENABLED=0), so that
	// from a cold build cache the two compile client-go and the rest once.
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	planted := t.TempDir()
	plantTestenv(t, planted)
	wd := filepath.Join(planted, "some", "project")
	if err := os.MkdirAll(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	// A go command planted where a -trimpath build run without GOROOT
	// would have joined its empty GOROOT: bin/go of the working directory.
	plantedGo := filepath.Join(wd, "bin", "go")
	if err := os.MkdirAll(filepath.Dir(plantedGo), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plantedGo, []byte("#!/bin/sh\necho ran >"+filepath.Join(planted, "pwned-go")+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "cache")
	cmd := exec.Command(prog)
	cmd.Dir = wd
	var env []string
	for _, kv := range withoutBinaryEnv() {
		if !strings.HasPrefix(kv, "GOROOT=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, EnvCacheDir+"="+cache, "PATH="+filepath.Dir(goTool()), "GOBIN="+t.TempDir())
	out, _ := cmd.CombinedOutput()
	if _, err := os.Stat(filepath.Join(planted, "pwned-go")); err == nil {
		t.Error("the go command planted in the working directory's bin/ ran")
	}
	if bytes.Contains(out, []byte(planted)) || bytes.Contains(out, []byte("building the API server")) {
		t.Errorf("a program run below a planted testenv/ went to build it:\n%s", out)
	}
	if keys, _ := filepath.Glob(filepath.Join(cache, "*")); len(keys) > 0 {
		t.Errorf("the cache holds %v: something was built", keys)
	}
	if _, err := os.Stat(filepath.Join(planted, "pwned")); err == nil {
		t.Error("the planted server ran")
	}
	if !bytes.Contains(out, []byte("no ctrlkit-apiserver")) {
		t.Errorf("want the error saying how to get a server, got:\n%s", out)
	}
}

// withoutBinaryEnv is the environment without the variables that name a
// binary or sources, so Binary has to find them itself.
func withoutBinaryEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvBinary+"=") && !strings.HasPrefix(kv, EnvSourceDir+"=") {
			env = append(env, kv)
		}
	}
	return env
}

// The checkout's testenv is found by the path the compiler recorded, not by
// where the test runs.
func TestSourceDir_isTheCheckoutWhateverTheWorkingDirectory(t *testing.T) {
	want, err := filepath.Abs(filepath.Join("..", "testenv"))
	if err != nil {
		t.Fatal(err)
	}
	planted := t.TempDir()
	plantTestenv(t, planted)
	t.Chdir(planted)
	t.Setenv(EnvSourceDir, "")
	got, err := sourceDir()
	if err != nil || got != want {
		t.Errorf("sourceDir() = %q, %v; want %q", got, err, want)
	}
}

// Sources another user could have changed are refused, naming the fix, by
// every way of choosing them; sources of one's own are built, and the user
// is told from where.
func TestBuildFrom_refusesSourcesAnotherUserCouldChange(t *testing.T) {
	t.Setenv(EnvCacheDir, filepath.Join(t.TempDir(), "cache"))
	cases := map[string]struct {
		spoil func(t *testing.T, src string)
		want  string
	}{
		"a world-writable file": {func(t *testing.T, src string) {
			if err := os.Chmod(filepath.Join(src, "cmd", "ctrlkit-apiserver", "main.go"), 0o666); err != nil {
				t.Fatal(err)
			}
		}, "chmod -R go-w"},
		"a world-writable folder": {func(t *testing.T, src string) {
			if err := os.Chmod(filepath.Join(src, "cmd"), 0o777); err != nil {
				t.Fatal(err)
			}
		}, "writable by other users"},
		"a link": {func(t *testing.T, src string) {
			symlink(t, "/etc/hostname", filepath.Join(src, "cmd", "ctrlkit-apiserver", "extra.go"))
		}, "symbolic link"},
		"a parent another user can write": {func(t *testing.T, src string) {
			if err := os.Chmod(filepath.Dir(src), 0o777); err != nil {
				t.Fatal(err)
			}
		}, "rename or replace it"},
	}
	if os.Getuid() == 0 {
		cases["a file of another user"] = struct {
			spoil func(t *testing.T, src string)
			want  string
		}{func(t *testing.T, src string) {
			asAnotherUser(t, filepath.Join(src, "go.mod"), 0o644)
		}, "not by you"}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			src := plantTestenv(t, t.TempDir())
			c.spoil(t, src)
			var progress bytes.Buffer
			_, err := BuildFrom(src, &progress)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("BuildFrom = %v, want an error containing %q", err, c.want)
			}
			if progress.Len() > 0 {
				t.Errorf("it went on to build:\n%s", progress.String())
			}
			t.Setenv(EnvSourceDir, src)
			if _, err := sourceDir(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("sourceDir with $%s = %v, want an error containing %q", EnvSourceDir, err, c.want)
			}
		})
	}
	t.Run("sources of one's own", func(t *testing.T) {
		src := plantTestenv(t, t.TempDir())
		var progress bytes.Buffer
		bin, err := BuildFrom(src, &progress)
		if err != nil {
			t.Fatalf("BuildFrom = %v", err)
		}
		if !fileExists(bin) {
			t.Errorf("BuildFrom = %s, which does not exist", bin)
		}
		if !strings.Contains(progress.String(), "from "+src) {
			t.Errorf("progress = %q, want it to name the sources %s", progress.String(), src)
		}
	})
}

// The cache holds binaries that are run: one another user can write to is
// refused.
func TestBinary_refusesACacheAnotherUserCouldWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvBinary, "")
	t.Setenv(EnvCacheDir, dir)
	if _, err := Binary(nil); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("Binary with a world-writable cache = %v, want a refusal naming chmod go-w", err)
	}
	if os.Getuid() == 0 {
		theirs := foreignDir(t)
		t.Setenv(EnvCacheDir, theirs)
		if _, err := Binary(nil); err == nil || !strings.Contains(err.Error(), "not by you") {
			t.Errorf("Binary with another user's cache = %v, want a refusal", err)
		}
	}
}
