package ociimage_test

import (
	"archive/tar"
	"debug/elf"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/ctrlkit/ctrlkit/ociimage"
)

// The image of a controller program, built without a Docker daemon: its
// config runs the binary as the non-root user, its one layer holds a
// static binary and the user's files, the tarball loads back, and the
// binary inside it runs.
func TestBuild_writesAnImageWhoseStaticBinaryRunsAsNonRoot(t *testing.T) {
	img, err := ociimage.Build(t.Context(), ociimage.Options{Package: "./examples/mirror", Dir: "..",
		Platform: platform()})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "mirror.tar")
	if err := ociimage.WriteTarball(img, "example.com/mirror:v1", file); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("example.com/mirror:v1")
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := tarball.ImageFromPath(file, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := loaded.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != "/mirror" || cf.OS != "linux" ||
		cf.Architecture != runtime.GOARCH {
		t.Errorf("config: user %q, entrypoint %q, platform %s/%s; want 65532:65532, /mirror, linux/%s",
			cf.Config.User, cf.Config.Entrypoint, cf.OS, cf.Architecture, runtime.GOARCH)
	}
	layers, err := loaded.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v; want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	bin := filepath.Join(t.TempDir(), "mirror")
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
		if h.Name == "mirror" {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(bin, data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if h.Name == "etc/passwd" {
			data, _ := io.ReadAll(tr)
			if !strings.Contains(string(data), "nonroot:x:65532:65532:") {
				t.Errorf("/etc/passwd lacks the non-root user:\n%s", data)
			}
		}
	}
	for nm, mode := range map[string]int64{"mirror": 0o755, "etc/passwd": 0o644, "etc/group": 0o644, "tmp/": 0o1777} {
		if h, ok := files[nm]; !ok || h.Mode != mode || h.Uid != 0 {
			t.Errorf("layer entry %s: %+v, want mode %o owned by root", nm, h, mode)
		}
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary asks for a dynamic loader: not static")
		}
	}
	f.Close()
	// It runs: with no cluster to reach it says so and exits 1.
	cmd := exec.CommandContext(t.Context(), bin)
	cmd.Env = []string{"KUBECONFIG=" + filepath.Join(t.TempDir(), "none")}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.HasPrefix(string(out), "mirror:") {
		t.Errorf("running the image's binary: %v, output %q; want exit status 1 and mirror's message", err, out)
	}
}

// platform is this machine's, so that the image's binary runs here.
func platform() (p v1.Platform) {
	p.OS, p.Architecture = "linux", runtime.GOARCH
	return p
}

// Push writes the image to a registry (an in-process one, on loopback),
// whence it reads back byte for byte.
func TestPush_writesTheImageToARegistry(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	img, err := ociimage.Image([]byte("#!/not/a/real/binary\n"), ociimage.Options{Name: "op"})
	if err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimPrefix(reg.URL, "http://") + "/team/op:v1"
	if err := ociimage.Push(t.Context(), img, ref); err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(r, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if d, err := got.Digest(); err != nil || d != want {
		t.Errorf("the registry holds %v (%v), want %v", d, err, want)
	}
}

// The binary is named as go build names it, which is the name a program
// built on the manager takes for its Lease, webhook configurations and
// RBAC: a module's root package after the module, not its directory.
func TestProgramName_isGoBuildsName(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checkout-dir")
	if err := os.MkdirAll(filepath.Join(dir, "cmd", "tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"go.mod":           "module example.com/backup/v2\n\ngo 1.22\n",
		"main.go":          "package main\n\nfunc main() {}\n",
		"cmd/tool/main.go": "package main\n\nfunc main() {}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for pkg, want := range map[string]string{"": "backup", ".": "backup", "./cmd/tool": "tool"} {
		got, err := ociimage.ProgramName(t.Context(), ociimage.Options{Package: pkg, Dir: dir})
		if err != nil || got != want {
			t.Errorf("ProgramName(%q) = %q, %v; want %q", pkg, got, err, want)
		}
	}
	if _, err := ociimage.ProgramName(t.Context(), ociimage.Options{Package: "./missing", Dir: dir}); err == nil {
		t.Error("ProgramName of a missing package: no error")
	}
	if _, err := ociimage.ProgramName(t.Context(), ociimage.Options{Package: "./...", Dir: dir}); err == nil ||
		!strings.Contains(err.Error(), "names 2 packages") {
		t.Errorf("ProgramName of two packages = %v, want an error naming two", err)
	}
	// The environment the build is given, and a GOFLAGS=-json of the
	// user's, which go list -f would refuse.
	t.Setenv("GOFLAGS", "-json")
	got, err := ociimage.ProgramName(t.Context(), ociimage.Options{Dir: dir, Env: []string{"GOFLAGS=-mod=mod"}})
	if err != nil || got != "backup" {
		t.Errorf("ProgramName with the user's GOFLAGS=-json = %q, %v; want backup", got, err)
	}
	if got, err = ociimage.ProgramName(t.Context(), ociimage.Options{Dir: dir}); err != nil || got != "backup" {
		t.Errorf("ProgramName with GOFLAGS=-json = %q, %v; want backup", got, err)
	}
}

// A link planted where the tarball goes is replaced, not written through:
// the file it points at keeps its content, and the tarball is a file of
// its own.
func TestWriteTarball_replacesALinkAtItsPathInsteadOfWritingThroughIt(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	if err := os.Symlink(victim, out); err != nil {
		t.Fatal(err)
	}
	if err := ociimage.WriteTarball(empty.Image, "example.com/empty:v1", out); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me" {
		t.Errorf("the link's target now holds %q (%v); want it untouched", b, err)
	}
	fi, err := os.Lstat(out)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("%s: %v, %v; want a regular file", out, fi, err)
	}
	tag, _ := name.NewTag("example.com/empty:v1")
	if _, err := tarball.ImageFromPath(out, &tag); err != nil {
		t.Errorf("the tarball does not load: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".image.tar.*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// A go.work the build would find in a folder above the project is used
// only if no other user could have planted it there: in a folder others
// may write it is refused before anything is built (it could replace the
// program's dependencies in the image); one of the user's own is used and
// named; GOWORK=off builds without it.
func TestWorkspace_refusesAGoWorkAnotherUserCouldHavePlanted(t *testing.T) {
	project := func(outer string) string {
		dir := filepath.Join(outer, "proj")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string]string{
			"go.mod":  "module example.com/op\n\ngo 1.22\n",
			"main.go": "package main\n\nfunc main() {}\n",
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(outer, "go.work"), []byte("go 1.22\n\nuse ./proj\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Setenv("GOWORK", "") // the go command's own search, from the project up
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o777); err != nil { // others may write it, and it is not sticky
		t.Fatal(err)
	}
	planted := ociimage.Options{Dir: project(shared), Platform: platform()}
	if _, err := ociimage.Build(t.Context(), planted); err == nil || !strings.Contains(err.Error(), "another user could have planted") ||
		!strings.Contains(err.Error(), filepath.Join(shared, "go.work")) {
		t.Errorf("Build under a planted go.work: %v; want a refusal naming it", err)
	}
	if _, err := ociimage.ProgramName(t.Context(), planted); err == nil {
		t.Error("ProgramName under a planted go.work: no error")
	}
	planted.Env = []string{"GOWORK=off"}
	if w, err := ociimage.Workspace(t.Context(), planted); w != "" || err != nil {
		t.Errorf("Workspace with GOWORK=off = %q, %v; want none", w, err)
	}
	if name, err := ociimage.ProgramName(t.Context(), planted); name != "op" || err != nil {
		t.Errorf("ProgramName with GOWORK=off = %q, %v; want op", name, err)
	}

	own := t.TempDir()
	w, err := ociimage.Workspace(t.Context(), ociimage.Options{Dir: project(own)})
	if want := filepath.Join(own, "go.work"); w != want || err != nil {
		t.Errorf("Workspace under the user's own go.work = %q, %v; want %s", w, err, want)
	}
}
