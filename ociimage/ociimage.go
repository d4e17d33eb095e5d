// Package ociimage builds a controller program's container image without a
// Docker daemon: it compiles the program with the local Go toolchain into
// a static binary and writes an OCI image around it with
// go-containerregistry, as ko does. The image has no base: one layer holds
// the binary, an /etc/passwd and /etc/group naming the non-root user
// 65532, and an empty /tmp; its config runs the binary as that user. No
// shell, no package manager, nothing to patch but the program; and no
// certificate authorities and no time zones: a controller that talks to
// the API server needs neither (the Pod's service account brings the
// cluster's CA), one that calls other TLS services or loads time zones
// must embed them (golang.org/x/crypto/x509roots/fallback, -tags
// timetzdata).
//
// The image is written as a tarball that docker load, podman load and
// crane push take, or pushed to a registry (with the credentials of
// ~/.docker/config.json, as docker and crane use them).
package ociimage

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ctrlkit/ctrlkit/internal/safefile"
)

// NonRoot is the user and group the image runs as (distroless' nonroot).
const NonRoot = 65532

// Options say what to build. The zero value builds the package in the
// current directory for linux/amd64.
type Options struct {
	// Package is the main package to build, as go build takes it
	// ("./cmd/op", an import path). Default: ".".
	Package string
	// Dir is the directory go build runs in (the module's). Default: the
	// current directory.
	Dir string
	// Platform is the image's OS and architecture. Default: linux/amd64.
	Platform v1.Platform
	// Name is the binary's name in the image (/Name) and in its
	// entrypoint. Default, for Build: the name go build gives the
	// package's binary (ProgramName), which a program built on the
	// manager also takes as its own: the names of its Lease, webhook
	// configurations and RBAC in the manifests it prints. For Image: the
	// last element of Package, else of Dir.
	Name string
	// Env is added to the go build's environment (GOFLAGS=-tags=...,
	// say). CGO_ENABLED=0, GOOS, GOARCH (and GOARM for arm/vN) are set by
	// Build, and -trimpath and -ldflags="-s -w" on its command line, which
	// override GOFLAGS' own -ldflags: stamp a version with a variable set
	// in code, not with -X.
	Env []string
}

// epoch dates the layer's files and the image, so that one binary makes
// one image, byte for byte.
var epoch = time.Unix(0, 0).UTC()

// Build compiles the program (go build -trimpath, CGO_ENABLED=0: a static
// binary that needs no C library) and returns its image: the binary at
// /Name, owned by root and executable by all, with the non-root user's
// files; its config's entrypoint is /Name, its user NonRoot:NonRoot, its
// working directory /. It fails with go build's output when the build
// fails, and before building when the build would use a go.work another
// user could have planted (see Workspace).
func Build(ctx context.Context, o Options) (v1.Image, error) {
	if _, err := Workspace(ctx, o); err != nil {
		return nil, err
	}
	if o.Name == "" {
		name, err := ProgramName(ctx, o)
		if err != nil {
			return nil, err
		}
		o.Name = name
	}
	o = o.withDefaults()
	tmp, err := os.MkdirTemp("", "ctrlkit-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, o.Name)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, o.Package)
	cmd.Dir = o.Dir
	cmd.Env = append(append(os.Environ(), o.Env...), "CGO_ENABLED=0", "GOOS="+o.Platform.OS, "GOARCH="+o.Platform.Architecture)
	if o.Platform.Architecture == "arm" && strings.HasPrefix(o.Platform.Variant, "v") { // arm/v6 needs GOARM=6, not Go's default 7
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(o.Platform.Variant, "v"))
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ociimage: go build %s: %w\n%s", o.Package, err, out)
	}
	binary, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	return Image(binary, o)
}

// Image returns the image of an already built static binary (see Build).
func Image(binary []byte, o Options) (v1.Image, error) {
	o = o.withDefaults()
	layerTar, err := layer(binary, o.Name)
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: types.OCILayer,
		History: v1.History{CreatedBy: "ctrlkit image: " + o.Package, Created: v1.Time{Time: epoch}}}); err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = o.Platform.OS, o.Platform.Architecture, o.Platform.Variant
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{"/" + o.Name}
	cf.Config.User = fmt.Sprintf("%d:%d", NonRoot, NonRoot)
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	return img, nil
}

// ProgramName returns the name go build gives the binary of o's package
// (by default "."), built in o.Dir: the last element of its import path,
// as go list reports it (a module's root package is named after the module,
// not its directory), or the element before it when that is a major
// version (example.com/op/v2 is "op").
func ProgramName(ctx context.Context, o Options) (string, error) {
	if _, err := Workspace(ctx, o); err != nil {
		return "", err
	}
	pkg := cmp.Or(o.Package, ".")
	// -json, not -f: a GOFLAGS=-json in the environment would refuse -f.
	cmd := exec.CommandContext(ctx, "go", "list", "-json=ImportPath", pkg)
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), o.Env...) // as Build's go build sees the package
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w\n%s", err, ee.Stderr)
		}
		return "", fmt.Errorf("ociimage: go list %s: %w", pkg, err)
	}
	var paths []string
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p struct{ ImportPath string }
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("ociimage: go list %s: %w", pkg, err)
		}
		paths = append(paths, p.ImportPath)
	}
	if len(paths) != 1 {
		return "", fmt.Errorf("ociimage: %s names %d packages; want one main package", pkg, len(paths))
	}
	return execName(paths[0]), nil
}

// Workspace returns the go.work file the go command uses in o.Dir with
// o.Env (the go env GOWORK it reports), or "" when it uses none. The go
// command looks for a go.work in every folder above the project, up to /:
// one planted by another user in a folder above it (/tmp, a shared CI
// workspace) would replace the program's dependencies in the image. So a
// go.work that is not the current user's or root's, that others may
// write, or that is inside a folder where others could replace it, is an
// error (safefile.Trusted's rules); GOWORK=off in the environment or in
// o.Env builds without one.
func Workspace(ctx context.Context, o Options) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "env", "-json", "GOWORK")
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), o.Env...)
	out, err := cmd.Output()
	var env struct{ GOWORK string }
	if err == nil {
		err = json.Unmarshal(out, &env)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w\n%s", err, ee.Stderr)
		}
		return "", fmt.Errorf("ociimage: go env GOWORK: %w", err)
	}
	w := env.GOWORK
	if w == "" || w == "off" {
		return "", nil
	}
	if err := safefile.Trusted(w); err != nil {
		return w, fmt.Errorf("ociimage: the build would use the workspace %s, which another user could have planted or "+
			"changed to replace the program's dependencies: %w; build with GOWORK=off, or keep go.work where only you can write", w, err)
	}
	return w, nil
}

// execName is go build's name for the binary of the package at importPath.
func execName(importPath string) string {
	dir, elem := path.Split(importPath)
	if dir != "" && majorVersion(elem) {
		elem = path.Base(path.Clean(dir))
	}
	return elem
}

// majorVersion reports an import path element that is a major version
// suffix: v2, v3, ... (not v0 or v1).
func majorVersion(s string) bool {
	if len(s) < 2 || s[0] != 'v' || s[1] == '0' || s == "v1" {
		return false
	}
	for _, c := range s[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func (o Options) withDefaults() Options {
	if o.Package == "" {
		o.Package = "."
	}
	if o.Platform.OS == "" {
		o.Platform.OS = "linux"
	}
	if o.Platform.Architecture == "" {
		o.Platform.Architecture = "amd64"
	}
	if o.Name == "" {
		o.Name = path.Base(strings.TrimSuffix(filepath.ToSlash(o.Package), "/"))
		if o.Name == "." || o.Name == "/" || o.Name == "" {
			abs, err := filepath.Abs(o.Dir)
			if err == nil {
				o.Name = filepath.Base(abs)
			}
		}
	}
	return o
}

// layer is the image's one layer: the binary and the non-root user's
// files, root-owned, dated at epoch.
func layer(binary []byte, binName string) ([]byte, error) {
	if strings.Contains(binName, "/") || binName == "" || binName == "." || binName == ".." {
		return nil, fmt.Errorf("ociimage: binary name %q: want a plain file name", binName)
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)),
			ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot)
	err := errors.Join(
		dir("etc/", 0o755),
		file("etc/passwd", 0o644, []byte(passwd)),
		file("etc/group", 0o644, []byte(group)),
		dir("tmp/", 0o1777),
		file(binName, 0o755, binary),
		tw.Close(),
	)
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	return b.Bytes(), nil
}

// WriteTarball writes img to file as a tarball tagged ref ("name:tag"),
// for docker load, podman load or crane push. It writes a new file of its
// own beside file (created exclusively, private until complete) and
// renames it into place: a file or link someone else planted at that path
// is replaced, never written through (in a shared directory with the
// sticky bit, where another user's file cannot be replaced, it fails).
func WriteTarball(img v1.Image, ref, file string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing is there
	err = tarball.Write(tag, img, tmp)
	err = errors.Join(err, tmp.Chmod(0o644), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err != nil {
		return fmt.Errorf("ociimage: write %s: %w", file, err)
	}
	return nil
}

// Push pushes img to the registry as ref, with the credentials docker and
// crane would use (~/.docker/config.json, credential helpers).
func Push(ctx context.Context, img v1.Image, ref string) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	if err := remote.Write(r, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("ociimage: push %s: %w", ref, err)
	}
	return nil
}
