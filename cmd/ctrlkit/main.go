// Command ctrlkit is ctrlkit's command line: it builds and runs the embedded
// Kubernetes API server for local work, runs the sample controllers, and runs
// the demo. "ctrlkit help" lists every command and flag; "ctrlkit <command>
// --help" shows one.
//
//	ctrlkit demo [flags]             the Foo controller on the embedded API server, end to end
//	ctrlkit run foo [flags]          run the Foo controller against any cluster
//	ctrlkit run podlogger [flags]    print every Pod change of a cluster (the seed documents' example)
//	ctrlkit apiserver build [flags]  build the API server binary if this machine has none; print its path
//	ctrlkit apiserver run [flags]    run the API server until interrupted; print a kubeconfig for kubectl
//	ctrlkit image [flags]            build a controller program's container image without Docker
//
// Help exits 0, a wrong command or flag exits 2, a failure exits 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/examples/foo"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/examples/podlogger"
	"github.com/ctrlkit/ctrlkit/lease"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/ociimage"
	"github.com/ctrlkit/ctrlkit/shard"
)

// commands are ctrlkit's commands, in the order the usage lists them. Each
// parses its flags with parseFlags before doing anything else, so "--help"
// prints its usage and the top-level usage can show every command's flags.
// (Set in init: the commands' help reads this list, a cycle for a plain var.)
var commands []command

func init() {
	commands = []command{
		{"demo", "the Foo controller on the embedded API server, end to end", runDemo},
		{"run foo", "run the Foo controller against any cluster", runFoo},
		{"run podlogger", "print every Pod change of a cluster (the seed documents' example)", runPodLogger},
		{"apiserver build", "build the API server binary if this machine has none; print its path", runAPIServerBuild},
		{"apiserver run", "run the embedded API server until interrupted; print a kubeconfig for kubectl", runAPIServer},
		{"image", "build a controller program's container image without Docker: a tarball, or pushed", runImage},
	}
}

// envRunAsCLI, set in the environment, makes a test binary of this package
// behave as the ctrlkit command (the demo's replicas exec themselves).
const envRunAsCLI = "CTRLKIT_RUN_AS_CLI"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, errUsage): // the usage, and what was wrong, are printed already
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "ctrlkit:", err)
		os.Exit(1)
	}
}

// run runs the command named by args. Asking for help in any form prints
// usage to stdout and returns nil; a wrong command or flag prints the usage
// to stderr and returns errUsage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelpFlag(args[0]) {
		printUsage(ctx, stdout, "")
		return nil
	}
	if args[0] == "help" {
		return runHelp(ctx, args[1:], stdout, stderr)
	}
	c, rest, ok := lookup(args)
	switch {
	case ok:
		err := c.run(ctx, rest, stdout, stderr)
		if errors.Is(err, errHelpShown) {
			return nil
		}
		return err
	case isGroup(args[0]) && (len(args) == 1 || isHelpFlag(args[1])): // "ctrlkit apiserver"
		printUsage(ctx, stdout, args[0])
		return nil
	default:
		fmt.Fprintf(stderr, "ctrlkit: unknown command %q\n\n", strings.Join(args, " "))
		printUsage(ctx, stderr, "")
		return errUsage
	}
}

// runHelp is "ctrlkit help [command]".
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(ctx, stdout, "")
		return nil
	}
	if c, rest, ok := lookup(args); ok && len(rest) == 0 {
		_ = c.run(ctx, []string{"-h"}, stdout, io.Discard)
		return nil
	}
	if len(args) == 1 && isGroup(args[0]) {
		printUsage(ctx, stdout, args[0])
		return nil
	}
	fmt.Fprintf(stderr, "ctrlkit help: unknown command %q\n\n", strings.Join(args, " "))
	printUsage(ctx, stderr, "")
	return errUsage
}

// envDebugToken is the environment variable "run foo" reads the debug
// token from when --debug-token is not given: unlike a flag, it is not
// shown to other users by ps.
const envDebugToken = "CTRLKIT_DEBUG_TOKEN"

// runFoo runs the Foo controller against the cluster of a kubeconfig until
// ctx ends (Ctrl-C).
func runFoo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run foo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	ns := fs.String("namespace", "", "watch one namespace only (default: all)")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:8080", "serve /metrics (and the probes, unless --health-addr) here; 0 turns it off")
	healthAddr := fs.String("health-addr", "", "serve /healthz and /readyz on their own address (default: with /metrics)")
	pprof := fs.Bool("pprof", false, "serve net/http/pprof under /debug/pprof/ beside /metrics")
	debugToken := fs.String("debug-token", "",
		"bearer token that clients other than loopback ones must send to read /debug/ctrlkit and pprof; required when --metrics-addr is not loopback. "+
			"Prefer $"+envDebugToken+": a flag is visible to every local user in ps")
	leaderElect := fs.Bool("leader-elect", false, "reconcile only while holding the Lease foo-controller (informers stay warm on every replica)")
	ring := fs.String("shard-ring", "", "share the Foos among every replica running with this ring name: each reconciles and caches only its shards (Leases in --lease-namespace); exclusive with --leader-elect")
	shardKey := fs.String("shard-key", "namespace", "with --shard-ring: hash Foos by namespace (a namespace stays on one replica) or uid (an even spread)")
	virtual := fs.Int("virtual-shards", shard.DefaultVirtualShards, "with --shard-ring: number of hash ranges handed out; a power of two, the same on every replica")
	leaseNS := fs.String("lease-namespace", "default", "namespace of the leader-election Lease or of the ring's Leases")
	leaseDuration := fs.Duration("lease-duration", 15*time.Second, "how long a silent replica keeps the lead or its shards; it stops its own work after 2/3 of it")
	identity := fs.String("identity", "", "this replica's name in the Lease or the ring (default: host name and a random suffix)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	opts := manager.Options{HTTPAddr: *metricsAddr, HealthAddr: *healthAddr,
		EnablePprof: *pprof, RequireServedKinds: true, DebugToken: *debugToken}
	opts.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	if *debugToken != "" {
		opts.Logger.Warn("--debug-token is visible to every local user (ps, /proc/PID/cmdline); set $" + envDebugToken + " instead")
	}
	err := replication(&opts, replicationFlags{leaderElect: *leaderElect, ring: *ring, key: *shardKey,
		virtual: *virtual, namespace: *leaseNS, identity: *identity, leaseDuration: *leaseDuration})
	if err != nil {
		return usageError(fs, err)
	}
	cfg, err := loadKubeconfig(*kubeconfig)
	if err != nil {
		return err
	}
	if opts.DebugToken == "" {
		opts.DebugToken = os.Getenv(envDebugToken)
	}
	opts.Logger.Info("foo controller starting", "server", cfg.Host, "namespace", *ns, "ring", *ring)
	opts.AddToScheme = append(opts.AddToScheme, v1alpha1.AddToScheme)
	perms, err := foo.Permissions(*ns)
	if err != nil {
		return err
	}
	opts.Permissions = append(opts.Permissions, perms...)
	m, err := manager.New(cfg, opts)
	if errors.Is(err, shard.ErrInvalid) {
		return usageError(fs, fmt.Errorf("--virtual-shards %d: %w", *virtual, err))
	}
	if err != nil {
		return err
	}
	if _, err := foo.Setup(m, *ns, manager.ControllerOptions{Options: controller.Options[object.ObjectName]{Workers: 2}}); err != nil {
		return err
	}
	err = runAndSayWhere(ctx, m, stdout)
	if errors.Is(err, manager.ErrKindNotServed) {
		return fmt.Errorf("%w\nthe Foo CRD is not installed; install it with: kubectl apply -f examples/foo/config/crd", err)
	}
	return err
}

// replicationFlags are the flags of "run foo" that decide how replicas
// share the work.
type replicationFlags struct {
	leaderElect         bool
	ring, key           string
	virtual             int
	namespace, identity string
	leaseDuration       time.Duration
}

// replication sets opts.LeaderElection or opts.Sharding from f. Its errors
// are usage errors; what only manager.New checks (the number of virtual
// shards) is left to it.
func replication(opts *manager.Options, f replicationFlags) error {
	if f.leaseDuration <= 0 {
		return fmt.Errorf("--lease-duration %s: want a positive duration", f.leaseDuration)
	}
	timing, err := lease.Timing{LeaseDuration: f.leaseDuration}.WithDefaults()
	if err != nil {
		return fmt.Errorf("--lease-duration %s: %w", f.leaseDuration, err)
	}
	keys := map[string]shard.Key{"namespace": shard.Namespace, "uid": shard.UID}
	key, ok := keys[f.key]
	switch {
	case !ok:
		return fmt.Errorf("--shard-key %q: want namespace or uid", f.key)
	case f.ring != "" && f.leaderElect:
		return errors.New("--shard-ring and --leader-elect are exclusive: a ring already gives each Foo one replica")
	case f.leaderElect:
		opts.LeaderElection = election.Options{Name: "foo-controller", Namespace: f.namespace, Identity: f.identity,
			Timing: timing}
	case f.ring != "":
		opts.Sharding = manager.Sharding{Name: f.ring, Namespace: f.namespace, Identity: f.identity, Key: key,
			VirtualShards: f.virtual, Timing: timing}
	}
	return nil
}

// servingPrefix starts the line "run foo" prints once its HTTP listener is
// bound, so that a port chosen by the system (--metrics-addr 127.0.0.1:0)
// can be found; the demo's replicas are read this way.
const servingPrefix = "serving /metrics, /healthz, /readyz and /debug/ctrlkit on http://"

// runAndSayWhere runs m until ctx ends and prints where its HTTP listener
// is, once it is bound (nothing when it is off).
func runAndSayWhere(ctx context.Context, m *manager.Manager, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: Addr returns when ctx ends
	defer cancel()
	wg.Go(func() {
		if addr := m.Addr(ctx); addr != "" && ctx.Err() == nil {
			fmt.Fprintf(stdout, "%s%s\n", servingPrefix, addr)
		}
	})
	return m.Run(ctx)
}

// runPodLogger prints every Pod change of a cluster until ctx ends.
func runPodLogger(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run podlogger", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	ns := fs.String("namespace", "", "one namespace only (default: all)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	cfg, err := loadKubeconfig(*kubeconfig)
	if err != nil {
		return err
	}
	return podlogger.Run(ctx, cfg, *ns, stdout, manager.Options{HTTPAddr: "0",
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
}

// loadKubeconfig finds the cluster as kubectl does: path (--kubeconfig),
// else $KUBECONFIG, else ~/.kube/config, else the in-cluster service account.
// When none names a cluster, the error says what was tried and what to do.
func loadKubeconfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	switch {
	case err == nil:
		return cfg, nil
	case path == "" && clientcmd.IsEmptyConfig(err):
		return nil, noCluster(rules)
	default:
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
}

// noCluster explains an empty configuration (client-go's own message
// suggests KUBERNETES_MASTER, which nothing reads any more).
func noCluster(rules *clientcmd.ClientConfigLoadingRules) error {
	var b strings.Builder
	b.WriteString("no cluster to talk to; tried:\n  --kubeconfig: not given\n")
	if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		fmt.Fprintf(&b, "  $KUBECONFIG: %s\n", describeFiles(rules.Precedence))
	} else {
		fmt.Fprintf(&b, "  $KUBECONFIG: not set\n  ~/.kube/config: %s\n", describeFiles(rules.Precedence))
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		b.WriteString("  in-cluster config: not running in a Pod ($KUBERNETES_SERVICE_HOST is not set)\n")
	} else {
		b.WriteString("  in-cluster config: not usable (no service account token or CA mounted)\n")
	}
	b.WriteString("point at a cluster with --kubeconfig PATH or KUBECONFIG=PATH, or start one on this machine with\n" +
		"  ctrlkit apiserver run --data-dir /tmp/k\nand pass --kubeconfig /tmp/k/kubeconfig")
	return errors.New(b.String())
}

// describeFiles says, for each kubeconfig path, whether it exists and why it gave no cluster.
func describeFiles(paths []string) string {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			out = append(out, p+" (no such file)")
		} else {
			out = append(out, p+" (names no cluster or current context)")
		}
	}
	return strings.Join(out, ", ")
}

// runAPIServerBuild builds the API server binary into the per-machine cache
// if there is none, and prints its path.
func runAPIServerBuild(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("apiserver build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	src := fs.String("testenv", "", "build from this testenv module folder (default: the checkout this ctrlkit comes from, or testenv at ctrlkit's version from the Go module proxy)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	build := apiserver.Binary
	if *src != "" {
		build = func(progress io.Writer) (string, error) { return apiserver.BuildFrom(*src, progress) }
	}
	bin, err := build(stderr)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, bin)
	return nil
}

// runAPIServer starts the embedded API server, tells how to reach it, and
// stops it cleanly when ctx ends (Ctrl-C). If the server dies first, it says
// so and returns an error quoting the server's log.
func runAPIServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("apiserver run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "", "keep etcd data, certificates and the kubeconfig here, created 0700 if missing; an existing folder must be yours and not writable by others (default: a temporary folder, removed on exit)")
	noWatchCache := fs.Bool("disable-watch-cache", false, "serve every list and watch from etcd")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "ctrlkit: starting the embedded Kubernetes API server (kube-apiserver + etcd on 127.0.0.1)")
	srv, err := apiserver.Start(ctx, apiserver.Options{
		DataDir: *dataDir, DisableWatchCache: *noWatchCache, Progress: stderr,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "API server ready at %s (pid %d)\n", srv.URL(), srv.PID())
	fmt.Fprintf(stdout, "kubeconfig: %s\n", srv.Kubeconfig())
	fmt.Fprintf(stdout, "try:        kubectl --kubeconfig %s get namespaces\n", srv.Kubeconfig())
	fmt.Fprintln(stdout, "Ctrl-C stops the server.")
	if err := srv.Wait(ctx); err != nil {
		fmt.Fprintln(stderr, "ctrlkit: the API server stopped on its own")
		_ = srv.Stop() // reaps the process; the error below already quotes its log
		return err
	}
	fmt.Fprintln(stderr, "ctrlkit: stopping the API server")
	return srv.Stop()
}

// runImage builds a program's image (package ociimage) and writes it as a
// tarball or pushes it.
func runImage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pkg := fs.String("package", ".", "the main package to build, as go build takes it, from the current directory")
	platform := fs.String("platform", "linux/amd64", "the image's OS/ARCH")
	binName := fs.String("name", "", "the binary's name in the image, /NAME (default: the name go build gives it, which a "+
		"manager.Main program takes as its own: the module's last element for a module's root package)")
	tag := fs.String("tag", "", "with --out: the image's name:tag in the tarball (default: NAME:latest)")
	out := fs.String("out", "", "write the image to this tarball (docker load, podman load, crane push take it)")
	push := fs.String("push", "", "push the image to this reference (registry/repository:tag), with ~/.docker/config.json's credentials")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if (*out == "") == (*push == "") {
		fmt.Fprintf(stderr, "ctrlkit image: want exactly one of --out and --push\n\n")
		commandUsage(stderr, fs)
		return errUsage
	}
	p, err := v1.ParsePlatform(*platform)
	if err != nil {
		return err
	}
	o := ociimage.Options{Package: *pkg, Platform: *p, Name: *binName}
	w, err := ociimage.Workspace(ctx, o)
	if err != nil {
		return err
	}
	if w != "" { // its replace and use directives shape the binary
		fmt.Fprintf(stderr, "ctrlkit image: building in the workspace %s\n", w)
	}
	if o.Name == "" {
		if o.Name, err = ociimage.ProgramName(ctx, o); err != nil {
			return err
		}
	}
	img, err := ociimage.Build(ctx, o)
	if err != nil {
		return err
	}
	if *push != "" {
		if err := ociimage.Push(ctx, img, *push); err != nil {
			return err
		}
		fmt.Fprintln(stdout, *push)
		return nil
	}
	ref := *tag
	if ref == "" {
		ref = o.Name + ":latest"
	}
	if err := ociimage.WriteTarball(img, ref, *out); err != nil {
		return err
	}
	fmt.Fprintln(stdout, *out)
	return nil
}
