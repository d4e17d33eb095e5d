package internal_test

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// pkg is the part of "go list -json" output the rules look at.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// listPackages lists every package of the root module with its direct
// imports and all of its dependencies (tests excluded: they are not shipped).
func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-json=ImportPath,Imports,Deps", "github.com/ctrlkit/ctrlkit/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// Heavy server code lives in testenv/ (its own module) only: ctrlkit's users
// must never download or link kube-apiserver or etcd's server.
var forbiddenDeps = []string{
	"k8s.io/kubernetes",
	"go.etcd.io/etcd/server",
}

// ctrlkit implements these stages itself; importing client-go's versions
// would be wrapping, not building. client-go's transport and leader election
// pull some of them in indirectly, which is allowed, so only direct imports
// are checked.
var forbiddenImports = []string{
	"k8s.io/client-go/tools/cache",
	"k8s.io/client-go/util/workqueue",
	"k8s.io/client-go/informers",
}

func hasPathPrefix(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

func TestLayering_noPackageDependsOnServerCodeOrImportsClientGoStages(t *testing.T) {
	pkgs := listPackages(t)
	if len(pkgs) < 2 {
		t.Fatalf("go list found %d packages; the rules would check nothing", len(pkgs))
	}
	found := map[string]bool{}
	for _, p := range pkgs {
		found[p.ImportPath] = true
		for _, d := range p.Deps {
			for _, f := range forbiddenDeps {
				if hasPathPrefix(d, f) {
					t.Errorf("%s depends on %s (only testenv/ and bench/ may)", p.ImportPath, d)
				}
			}
		}
		for _, imp := range p.Imports {
			for _, f := range forbiddenImports {
				if hasPathPrefix(imp, f) {
					t.Errorf("%s imports %s; ctrlkit builds this stage itself", p.ImportPath, imp)
				}
			}
		}
	}
	// The package that runs the real server must be among those checked.
	if !found["github.com/ctrlkit/ctrlkit/apiserver"] {
		t.Errorf("apiserver package not listed; got %d packages", len(pkgs))
	}
}

// The root module's own graph holds what its tools need: controller-gen (a
// go.mod tool, for go generate ./examples/foo/...) brings k8s.io/apiserver and
// with it etcd's server module. A user's graph does not: graph pruning reads
// ctrlkit's go.mod but not the go.mod files of controller-gen's modules. So
// the rule is checked where it matters, in a module that requires ctrlkit.
func TestLayering_aUsersModuleGraphHasNoServerModules(t *testing.T) {
	root, err := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", module, err)
	}
	rootDir := strings.TrimSpace(string(root))
	user := t.TempDir()
	goMod := "module example.com/user\n\ngo 1.26.0\n\nrequire " + module + " v0.0.0\n\nreplace " + module + " => " + rootDir + "\n"
	if err := os.WriteFile(filepath.Join(user, "go.mod"), []byte(goMod), 0o600); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(rootDir, "go.sum")) // the user's graph is part of ours
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(user, "go.sum"), sum, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "go", "list", "-m", "all")
	cmd.Dir = user
	// The module proxy as configured: a module cache that has built ctrlkit
	// may still lack go.mod files that only a user's pruned graph reads.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all in a module that requires ctrlkit: %v\n%s", err, out)
	}
	mods := strings.Fields(string(out))
	if !slices.Contains(mods, module) || len(mods) < 3 {
		t.Fatalf("go list -m all listed %v; expected the user's module graph with ctrlkit in it", mods)
	}
	for _, m := range mods {
		for _, f := range forbiddenDeps {
			if hasPathPrefix(m, f) {
				t.Errorf("the module graph of a user of ctrlkit contains %s; users would download it", m)
			}
		}
	}
}

// module is the root module's path.
const module = "github.com/ctrlkit/ctrlkit"

// allowed lists, for each package of the root module, the packages of the
// module it may import (ARCHITECTURE.md shows the same table). The pipeline
// stages import only the shared vocabulary (object) and the interfaces of
// the stage they feed or consume; the informer is the one stage that wires
// others; the runtime (manager) wires everything. A package missing here
// fails the test: a new package takes its place in the table on purpose.
// Every package may import telemetry (its options embed telemetry.Telemetry).
var allowed = map[string][]string{
	"":           nil,
	"object":     nil,
	"telemetry":  nil,
	"intern":     nil,
	"projection": {"object"},
	"snapshot":   {"object", "internal/safefile"},
	"workqueue":  {"internal/fifo", "internal/peak"},
	"store":      {"object"},
	"reflector":  {"object"},
	"listwatch":  {"object", "reflector", "projection", "intern", "internal/jsoncost"},
	"deltafifo":  {"object", "internal/fifo", "internal/peak"},
	"handler":    {"object", "workqueue"},
	"informer":   {"object", "reflector", "deltafifo", "store", "handler", "intern", "snapshot", "internal/fifo", "internal/peak", "internal/run"},
	"controller": {"object", "workqueue", "tracing", "internal/peak", "internal/run", "internal/logctx"},

	"lease":    nil,
	"shard":    {"lease"},
	"election": {"lease", "internal/run"},
	"ledger":   {"object", "internal/apiwrite"},
	"tracing":  {"object", "internal/apiwrite"},
	"fleet":    {"object", "listwatch", "informer", "handler", "controller", "store", "client", "telemetry", "shard", "debug", "internal/safefile"},
	"client":   {"object", "listwatch"},
	"apply":    {"object", "internal/logctx"},
	"debug":    {"object", "informer", "controller", "webhook", "shard"},
	"webhook":  {"object", "internal/program", "internal/safefile", "internal/certs", "internal/jsoncost"},
	"perturb":  {"workqueue", "tracing"},
	"manager": {"object", "reflector", "listwatch", "informer", "intern", "handler", "workqueue", "controller", "client", "apply", "debug",
		"election", "ledger", "shard", "lease", "webhook", "tracing", "fleet", "internal/run", "internal/program", "internal/certs", "internal/apiwrite"},
	"ociimage": {"internal/safefile"}, // refuses a planted go.work

	"internal/testapi":    {"internal/testapi/v1", "internal/testapi/v2"},
	"internal/testapi/v1": {"internal/testapi/v2"},
	"internal/testapi/v2": nil,

	"apiserver":          {"internal/safefile"},
	"internal":           nil,
	"internal/chaos":     nil,
	"internal/leakcheck": nil,
	"internal/poll":      nil,
	"internal/metrics":   nil,
	"internal/fifo":      nil,
	"internal/peak":      nil,
	"internal/guidetest": nil,
	"internal/run":       nil,
	"internal/logctx":    nil,
	"internal/program":   nil,
	"internal/safefile":  nil,
	"internal/certs":     nil,
	"internal/jsoncost":  nil,
	"internal/apiwrite":  {"object"},

	"examples/foo":              {"object", "store", "controller", "client", "manager", "webhook", "examples/foo/api/v1alpha1", "examples/foo/config"},
	"examples/foo/api/v1alpha1": nil,
	"examples/foo/config":       nil,
	"examples/guide":            {"object", "store", "workqueue", "controller", "manager", "perturb", "internal/guidetest"},
	"examples/mirror":           {"object", "store", "controller", "manager", "apply"},
	"examples/fleet":            {"object", "store", "controller", "fleet", "apply", "manager"},
	"examples/podlogger":        {"object", "store", "controller", "manager"},
	"examples/podcensus":        {"object", "store", "controller", "manager"},
	"cmd/ctrlkit": {"object", "controller", "debug", "election", "lease", "shard", "listwatch", "client", "manager", "apiserver", "webhook", "ociimage",
		"examples/foo", "examples/foo/api/v1alpha1", "examples/foo/config", "examples/podlogger"},
}

func TestLayering_eachPackageImportsOnlyWhatTheTableAllows(t *testing.T) {
	pkgs := listPackages(t)
	listed := map[string]bool{}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		listed[rel] = true
		may, ok := allowed[rel]
		if !ok {
			t.Errorf("package %s is not in the layering table (internal/layering_test.go and ARCHITECTURE.md): add it with what it may import", p.ImportPath)
			continue
		}
		for _, imp := range p.Imports {
			if !hasPathPrefix(imp, module) {
				continue
			}
			dep := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			if dep != "telemetry" && !slices.Contains(may, dep) { // every package may report
				t.Errorf("%s imports %s; the layering table allows only %v", rel, dep, may)
			}
		}
	}
	for rel := range allowed {
		if !listed[rel] {
			t.Errorf("the layering table names %q, which go list does not list: remove it", rel)
		}
	}
}

func TestHasPathPrefix(t *testing.T) {
	for _, tc := range []struct {
		path, prefix string
		want         bool
	}{
		{"k8s.io/client-go/tools/cache", "k8s.io/client-go/tools/cache", true},
		{"k8s.io/client-go/tools/cache/synctrack", "k8s.io/client-go/tools/cache", true},
		{"k8s.io/client-go/tools/cachefoo", "k8s.io/client-go/tools/cache", false},
		{"k8s.io/kubernetes", "k8s.io/kubernetes", true},
		{"k8s.io/kube-openapi", "k8s.io/kubernetes", false},
	} {
		if got := hasPathPrefix(tc.path, tc.prefix); got != tc.want {
			t.Errorf("hasPathPrefix(%q, %q) = %v, want %v", tc.path, tc.prefix, got, tc.want)
		}
	}
}
