package apiserver

import (
	"archive/zip"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
)

func TestKubernetesVersion_isWhatTestenvBuildsWithoutReplaceDirectives(t *testing.T) {
	gomod := filepath.Join("..", "testenv", "go.mod")
	v, err := requiredVersion(gomod, "k8s.io/kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	if v != KubernetesVersion {
		t.Errorf("testenv requires k8s.io/kubernetes %s; KubernetesVersion is %s", v, KubernetesVersion)
	}
	b, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "replace") {
			t.Errorf("testenv/go.mod has %q: go install ...@VERSION refuses a module with replace directives", strings.TrimSpace(line))
		}
		if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(f[0], "k8s.io/") && f[1] == "v0.0.0" {
			t.Errorf("testenv/go.mod requires %s v0.0.0: require its published version instead", f[0])
		}
	}
}

func TestModuleVersion_isThePublishedVersionOfCtrlkit(t *testing.T) {
	mod := func(path, version string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: path, Version: version, Replace: replace}
	}
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"a dependency", debug.BuildInfo{Main: *mod("example.com/hello", "(devel)", nil),
			Deps: []*debug.Module{mod(rootModule, "v0.4.0", nil)}}, "v0.4.0"},
		{"the main module, as go run ctrlkit@version builds it", debug.BuildInfo{Main: *mod(rootModule, "v0.4.0", nil)}, "v0.4.0"},
		{"a checkout", debug.BuildInfo{Main: *mod(rootModule, "(devel)", nil)}, ""},
		{"replaced by a folder", debug.BuildInfo{Main: *mod("example.com/hello", "", nil),
			Deps: []*debug.Module{mod(rootModule, "v0.4.0", mod("../ctrlkit", "", nil))}}, ""},
		{"replaced by another version", debug.BuildInfo{Main: *mod("example.com/hello", "", nil),
			Deps: []*debug.Module{mod(rootModule, "v0.4.0", mod(rootModule, "v0.3.9", nil))}}, "v0.3.9"},
		{"not a dependency", debug.BuildInfo{Main: *mod("example.com/hello", "", nil)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := moduleVersion(&tc.bi, rootModule); got != tc.want {
				t.Errorf("moduleVersion = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTestenvQuery_asksForTheTagOrTheCommit(t *testing.T) {
	for v, want := range map[string]string{
		"v0.4.0":                               "v0.4.0",
		"v0.4.1-0.20261122205542-5d40eb6a1b2c": "5d40eb6a1b2c",
		"v0.0.0-20261122205542-5d40eb6a1b2c":   "5d40eb6a1b2c",
	} {
		if got := testenvQuery(v); got != want {
			t.Errorf("testenvQuery(%q) = %q, want %q", v, got, want)
		}
	}
}

func TestFindInstalled_takesOnlyABinaryBuiltFromKubernetesVersion(t *testing.T) {
	real, err := Binary(os.Stderr) // from the sources of this checkout
	if err != nil {
		t.Fatal(err)
	}
	if err := builtForUs(real); err != nil {
		t.Fatalf("the binary built from testenv is not accepted: %v", err)
	}
	pathDir, cache := t.TempDir(), t.TempDir()
	t.Setenv("PATH", pathDir)
	t.Setenv("GOBIN", t.TempDir())
	if err := os.WriteFile(filepath.Join(pathDir, binaryName), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	bin, tried := findInstalled(cache)
	if bin != "" || !strings.Contains(strings.Join(tried, "\n"), "no Go build information") {
		t.Fatalf("findInstalled = %q, tried %q; want nothing, and the script on PATH named as not a Go binary", bin, tried)
	}
	err = notFound("v0.4.0", tried)
	for _, want := range []string{"Kubernetes " + KubernetesVersion, rootModule + "/cmd/ctrlkit@v0.4.0 apiserver build",
		"go install " + testenvModule + "/cmd/ctrlkit-apiserver@v0.4.0", EnvBinary} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("not-found error lacks %q:\n%v", want, err)
		}
	}

	// The real binary, copied where another user could have put it (a
	// folder others may write, not sticky): refused before it is read.
	planted := t.TempDir()
	if err := os.Chmod(planted, 0o777); err != nil {
		t.Fatal(err)
	}
	symlink(t, real, filepath.Join(planted, binaryName))
	t.Setenv("PATH", planted)
	bin, tried = findInstalled(t.TempDir())
	if bin != "" || !strings.Contains(strings.Join(tried, "\n"), "not run: ") || !strings.Contains(strings.Join(tried, "\n"), "another user could rename or replace it") {
		t.Fatalf("findInstalled = %q, tried %q; want nothing: the binary on PATH is in a folder others may write", bin, tried)
	}
	t.Setenv("PATH", pathDir)

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	symlink(t, self, filepath.Join(cache, "older", binaryName)) // a Go program, but not ctrlkit-apiserver
	symlink(t, real, filepath.Join(cache, "newer", binaryName))
	bin, tried = findInstalled(cache)
	if want := filepath.Join(cache, "newer", binaryName); bin != want {
		t.Fatalf("findInstalled = %q (tried %q), want %s", bin, tried, want)
	}
}

func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// TestDownloadTestenv_fromTheModuleProxyHitsTheCheckoutsCacheKey serves the
// testenv module from a folder shaped like the Go module proxy and checks
// that Binary's download finds it and keys it as it keys this checkout.
func TestDownloadTestenv_fromTheModuleProxyHitsTheCheckoutsCacheKey(t *testing.T) {
	const version = "v0.9.9"
	src, err := filepath.Abs(filepath.Join("..", "testenv"))
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	writeModuleProxy(t, proxy, testenvModule, version, src)
	modcache := t.TempDir()
	t.Cleanup(func() { // the module cache is read-only; let go remove it
		cmd := exec.Command(goTool(), "clean", "-modcache")
		cmd.Env = append(os.Environ(), "GOMODCACHE="+modcache)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go clean -modcache: %v\n%s", err, out)
		}
	})
	t.Setenv("GOMODCACHE", modcache)
	t.Setenv("GOPROXY", "file://"+filepath.ToSlash(proxy))
	t.Setenv("GOSUMDB", "off")

	dir, err := downloadTestenv(version)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sourceKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := sourceKey(src)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("key of the downloaded testenv = %s, of the checkout = %s: a proxy user would build again", got, want)
	}
	if _, err := downloadTestenv("v0.0.1"); err == nil || !strings.Contains(err.Error(), "go mod download") {
		t.Errorf("download of a missing version = %v, want an error naming go mod download", err)
	}
}

// writeModuleProxy writes module path@version from folder src into proxy,
// laid out as GOPROXY=file://proxy expects.
func writeModuleProxy(t *testing.T, proxy, path, version, src string) {
	t.Helper()
	dir := filepath.Join(proxy, filepath.FromSlash(path), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]any{"Version": version, "Time": time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{version + ".info": info, version + ".mod": gomod, "list": []byte(version + "\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(dir, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	err = filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		w, err := zw.Create(path + "@" + version + "/" + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
	if err == nil {
		err = zw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestServer_reportsItsKubernetesVersion(t *testing.T) {
	srv := env.Get(t)
	dc, err := discovery.NewDiscoveryClientForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if info.GitVersion != KubernetesVersion || info.Major != "1" || !strings.HasPrefix(KubernetesVersion, "v1."+info.Minor+".") {
		t.Errorf("/version = %s (major %q, minor %q), want %s", info.GitVersion, info.Major, info.Minor, KubernetesVersion)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Logf("no kubectl on PATH; /version checked without it")
		return
	}
	out, err := exec.CommandContext(t.Context(), kubectl, "version", "--kubeconfig", srv.Kubeconfig(), "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `"gitVersion": "`+KubernetesVersion+`"`) {
		t.Errorf("kubectl version does not show the server's %s:\n%s", KubernetesVersion, out)
	}
}

func TestServer_waitSaysWhenTheServerExits(t *testing.T) {
	// A stand-in that announces itself ready, then exits with status 3 once
	// the test creates DATA-DIR/die.
	bin := filepath.Join(t.TempDir(), "exits")
	script := `#!/bin/sh
cat > "$2/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
EOF
echo "{\"event\":\"ready\",\"server\":\"https://127.0.0.1:1\",\"kubeconfig\":\"$2/kubeconfig\"}"
while [ ! -e "$2/die" ]; do sleep 0.05; done
exit 3
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(t.TempDir(), "created", "by", "start")
	srv, err := Start(t.Context(), Options{Binary: bin, DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	if srv.PID() == 0 {
		t.Error("PID of a running server is 0")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := srv.Wait(ctx); err != nil {
		t.Errorf("Wait with an ended context = %v, want nil", err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "die"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.Wait(t.Context()); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Wait = %v, want an error with the exit status", err)
	}
	_ = srv.Stop() // reaps; the process is gone already
	if srv.PID() != 0 {
		t.Error("PID of a stopped server is not 0")
	}
}
