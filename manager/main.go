package manager

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/internal/program"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// Main is a controller program's main function. It adds --kubeconfig,
// --http-addr, --metrics-addr, --health-addr, --webhook-addr, --webhook-cert-dir,
// --webhook-cert-secret, --webhook-cert-hosts,
// --cache-dir, --leader-elect, --leader-elect-namespace, --manifests (with
// --manifests-image, --manifests-name, --manifests-namespace,
// --manifests-replicas, --manifests-memory-limit and
// --manifests-cert-manager), --webhook-manifests and --webhook-local
// (webhooks served on loopback for an API server on this machine) to the
// command line's flags, each defaulting to what
// opts sets, and parses them into opts (define your own flags before, and
// do not call flag.Parse): so one program runs without leader election on
// a laptop (--leader-elect=false) and with it in its Deployment. It
// connects to the cluster as
// kubectl does (--kubeconfig, else $KUBECONFIG, ~/.kube/config, or the
// in-cluster service account), makes a manager with opts, calls setup to
// add the controllers, and runs it until SIGINT, SIGTERM or SIGHUP, then returns
// after a clean shutdown. Any failure is printed on stderr and exits the
// process with status 1.
//
// In a container with a memory limit (ManifestOptions.MemoryLimit, or its
// cgroup's), Main sets Go's soft memory limit to nine tenths of it, so the
// collector runs more often as the heap nears the limit rather than the
// kernel ending the process; GOMEMLIMIT, when set, wins (GOMEMLIMIT=off:
// no soft limit).
//
// With LeaderElection.Name set and no Namespace, the Lease lives in the
// namespace the Pod runs in (read from its service account), else in
// "default".
//
// --manifests prints every manifest the program needs to run in a cluster
// (see Manager.Manifests) and exits without connecting to one:
// --manifests-image names its container image, --manifests-name and
// --manifests-namespace where it runs (the prefix keeps the program's own
// --name or --namespace free), --manifests-replicas how many run,
// --manifests-memory-limit the container's memory limit.
//
// --webhook-manifests=NAMESPACE/SERVICE prints the webhook configurations
// of the webhooks setup registers, pointing at that Service (port 443),
// for every namespace but kube-system (and but NAMESPACE for the webhooks
// of Kubernetes' own kinds, as Manager.Manifests), as YAML on stdout, and
// exits without connecting to a cluster: the
// manifests come from the code that serves them, so a path or a kind
// cannot drift. Resources are named by the plural of the kind, lower case.
func Main(opts Options, setup func(*Manager) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if err := runMain(ctx, flag.CommandLine, os.Args[1:], opts, setup); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", filepath.Base(os.Args[0]), err)
		stop()
		os.Exit(1)
	}
}

// mainFlags are Main's flags: the parsed command line's settings.
type mainFlags struct {
	kubeconfig, manifests string
	leaderElect           bool
	all                   bool // --manifests
	webhookLocal          bool
	deploy                ManifestOptions
}

// addMainFlags adds Main's flags to fs, each defaulting to opts' value and
// writing into opts when parsed; finish applies what cannot be written
// directly (--leader-elect) once fs is parsed.
func addMainFlags(fs *flag.FlagSet, opts *Options) (flags *mainFlags, finish func()) {
	f := &mainFlags{leaderElect: opts.LeaderElection.Name != ""}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.StringVar(&opts.HTTPAddr, "http-addr", opts.HTTPAddr,
		`where /metrics, /healthz, /readyz and /debug/ctrlkit are served ("0": nowhere; default 127.0.0.1:8080)`)
	fs.StringVar(&opts.MetricsAddr, "metrics-addr", opts.MetricsAddr,
		"serve /metrics over HTTPS here to tokens allowed get on /metrics (TokenReview, SubjectAccessReview), e.g. :8443 in a cluster (default: off)")
	fs.StringVar(&opts.HealthAddr, "health-addr", opts.HealthAddr,
		"serve /healthz and /readyz on this address of their own (default: on --http-addr)")
	fs.StringVar(&opts.Webhook.Addr, "webhook-addr", opts.Webhook.Addr,
		`where the webhooks are served over HTTPS, once one is registered (default ":9443", every interface)`)
	fs.StringVar(&opts.Webhook.CertDir, "webhook-cert-dir", opts.Webhook.CertDir,
		"directory of the webhook server's tls.crt and tls.key (needed once a webhook is registered, unless --webhook-cert-secret)")
	fs.Func("webhook-cert-secret", "keep the webhook certificates in this Secret, NAMESPACE/NAME, made and renewed by the manager, "+
		"which writes their authority into the webhook configurations (instead of --webhook-cert-dir)", func(v string) error {
		n, err := object.ParseObjectName(v)
		if err != nil || n.Namespace == "" {
			return fmt.Errorf("want NAMESPACE/NAME, got %q", v)
		}
		opts.WebhookCerts.Secret = n
		return nil
	})
	fs.Func("webhook-cert-hosts", "with --webhook-cert-secret: the serving certificate's names, comma-separated (the Service's DNS names)",
		func(v string) error {
			opts.WebhookCerts.Hosts = strings.Split(v, ",")
			return nil
		})
	fs.BoolVar(&f.webhookLocal, "webhook-local", false, "for an API server on this machine (ctrlkit apiserver run): serve the webhooks on "+
		"127.0.0.1 with a certificate made for this run, and install their configurations pointing there until the program exits "+
		"(failurePolicy Ignore, kube-system left out; instead of --webhook-cert-dir or --webhook-cert-secret)")
	fs.StringVar(&opts.CacheDir, "cache-dir", opts.CacheDir,
		"directory where the informers keep snapshots of their caches, to start warm after a restart, e.g. an emptyDir volume's mount point "+
			"(when other users can write it, the snapshots go into a private folder ctrlkit-<uid> made inside; default: none)")
	fs.BoolVar(&f.leaderElect, "leader-elect", f.leaderElect,
		"run the controllers only on the replica holding a Lease (named by the program's Options, else after the program)")
	fs.StringVar(&opts.LeaderElection.Namespace, "leader-elect-namespace", opts.LeaderElection.Namespace,
		"namespace of the leader-election Lease (default: the Pod's, else \"default\")")
	fs.StringVar(&f.manifests, "webhook-manifests", "", "print the webhook configurations for the Service NAMESPACE/NAME and exit")
	fs.BoolVar(&f.all, "manifests", false, "print every manifest the program needs to run in a cluster (see --manifests-image) and exit")
	fs.StringVar(&f.deploy.Image, "manifests-image", "", "with --manifests: the program's container image")
	fs.StringVar(&f.deploy.Name, "manifests-name", "", "with --manifests: the name of its ServiceAccount, roles, Deployment and Service (default: the program's name)")
	fs.StringVar(&f.deploy.Namespace, "manifests-namespace", "", "with --manifests: their namespace (default: NAME-system)")
	fs.Func("manifests-replicas", "with --manifests: the Deployment's replicas (default 1; more get a PodDisruptionBudget)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 {
			return fmt.Errorf("want a number of replicas, 1 or more")
		}
		f.deploy.Replicas = int32(n)
		return nil
	})
	fs.StringVar(&f.deploy.MemoryLimit, "manifests-memory-limit", "",
		"with --manifests: the container's memory limit, e.g. 256Mi (default: none); the program sets Go's soft limit to nine tenths of it")
	fs.BoolVar(&f.deploy.CertManager, "manifests-cert-manager", false, "with --manifests: cert-manager issues the webhook certificate (default: the manager keeps it in a Secret)")
	return f, func() {
		switch {
		case !f.leaderElect:
			opts.LeaderElection = election.Options{}
		case opts.LeaderElection.Name == "":
			opts.LeaderElection.Name = program.Name()
		}
	}
}

func runMain(ctx context.Context, fs *flag.FlagSet, args []string, opts Options, setup func(*Manager) error) error {
	flags, finish := addMainFlags(fs, &opts)
	if err := fs.Parse(args); err != nil {
		return err
	}
	finish()
	if flags.manifests != "" || flags.all {
		return printManifests(flags, opts, setup)
	}
	cfg, err := LoadConfig(flags.kubeconfig)
	if err != nil {
		return err
	}
	if opts.LeaderElection.Name != "" && opts.LeaderElection.Namespace == "" {
		opts.LeaderElection.Namespace = podNamespace()
	}
	soft := setGoMemoryLimit()
	if flags.webhookLocal {
		return runLocalWebhooks(ctx, cfg, fs, opts, setup)
	}
	m, err := New(cfg, opts)
	if err != nil {
		return err
	}
	if soft > 0 {
		m.Logger().Info("Go's soft memory limit set to nine tenths of the container's", "bytes", soft)
	}
	if err := setup(m); err != nil {
		return err
	}
	return m.Run(ctx)
}

// runLocalWebhooks runs the manager as runMain does, for --webhook-local:
// its webhooks served on loopback with a certificate authority made for
// this run (in a private temporary directory, removed at the end), and
// their configurations (named NAME-local-validating and
// NAME-local-mutating) installed pointing at that address once it is
// bound, then uninstalled when the manager has stopped. For an API server
// on this machine only: one elsewhere cannot reach 127.0.0.1 here. A
// custom resource's conversion webhook is the CRD's own: Install points it
// here, and Uninstall leaves it (the server could not serve the CRD's
// other versions without one).
func runLocalWebhooks(ctx context.Context, cfg *rest.Config, fs *flag.FlagSet, opts Options, setup func(*Manager) error) error {
	if opts.WebhookCerts.Secret != (object.ObjectName{}) || opts.Webhook.CertDir != "" {
		return errors.New("--webhook-local makes its own certificate: give no --webhook-cert-dir or --webhook-cert-secret")
	}
	if !loopbackServer(cfg.Host) {
		return fmt.Errorf("--webhook-local installs webhooks that call 127.0.0.1 on the API server's machine: it needs an API "+
			"server on this machine reached on loopback (as the embedded one), not %s", cfg.Host)
	}
	addrSet := false
	fs.Visit(func(f *flag.Flag) { addrSet = addrSet || f.Name == "webhook-addr" })
	switch {
	case !addrSet:
		opts.Webhook.Addr = "127.0.0.1:0"
	case !debug.IsLoopbackAddr(opts.Webhook.Addr):
		return fmt.Errorf("--webhook-local serves on loopback with a certificate for 127.0.0.1: --webhook-addr %s is not "+
			"a loopback address", opts.Webhook.Addr)
	}
	dir, err := os.MkdirTemp("", program.Name()+"-webhook-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ca, err := webhook.SelfSigned(dir, "127.0.0.1")
	if err != nil {
		return err
	}
	opts.Webhook.CertDir = dir
	// Configurations of their own, so that a cluster where the program is
	// also deployed keeps the deployed ones (and Uninstall removes only these).
	name := opts.Webhook.Name
	if name == "" {
		name = program.Name()
	}
	opts.Webhook.Name = name + "-local"
	m, err := New(cfg, opts)
	if err != nil {
		return err
	}
	if err := setup(m); err != nil {
		return err
	}
	stopping := ctx // ends with the signal that stops the program
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	var installErr error
	if addr := m.WebhookAddr(ctx); addr != "" {
		// A run that ends without removing them (killed, or its machine
		// gone) must not leave the cluster refusing writes: the server lets
		// requests through when the webhooks cannot be called, and
		// kube-system is left out.
		cc := webhook.ClientConfig{URL: "https://" + addr, CABundle: ca, FailurePolicy: admissionregistrationv1.Ignore,
			NamespaceSelector: notIn(metav1.NamespaceSystem), RequireReached: true}
		switch installErr = m.Webhooks().Install(ctx, cfg, cc); {
		case installErr != nil && stopping.Err() != nil:
			installErr = nil // stopped by a signal while installing: a clean stop (what was installed is removed below)
		case installErr != nil:
			installErr = fmt.Errorf("--webhook-local: %w", installErr)
			cancel()
		default:
			m.opts.Logger.Info("manager: webhooks installed for this run", "url", "https://"+addr, "paths", m.Webhooks().Paths())
		}
	}
	err = <-ran
	if len(m.Webhooks().Paths()) > 0 {
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer ucancel()
		if uerr := m.Webhooks().Uninstall(uctx, cfg); uerr != nil {
			err = errors.Join(err, fmt.Errorf("--webhook-local: removing the webhook configurations: %w", uerr))
		}
	}
	return errors.Join(installErr, err)
}

// loopbackServer reports whether host, a rest.Config's Host (a URL, or
// host:port), names this machine's loopback interface (debug.TrustedHost's
// rule for a Host header).
func loopbackServer(host string) bool {
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		host = u.Host
	}
	return debug.TrustedHost(host, nil)
}

// LoadConfig returns the configuration kubectl would use: the kubeconfig
// file named (if not ""), else $KUBECONFIG, ~/.kube/config, or the
// in-cluster service account.
func LoadConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster to talk to: %w", err)
	}
	return cfg, nil
}

// podNamespace is the namespace of the Pod this process runs in, or
// "default" outside a cluster.
func podNamespace() string {
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if ns := strings.TrimSpace(string(b)); err == nil && ns != "" {
		return ns
	}
	return "default"
}

// printManifests prints, for --manifests, every manifest of what setup
// registers (Manager.Manifests), or, for --webhook-manifests, its webhook
// configurations for the Service NAMESPACE/NAME.
func printManifests(f *mainFlags, opts Options, setup func(*Manager) error) error {
	ns, name, ok := strings.Cut(f.manifests, "/")
	if !f.all && (!ok || ns == "" || name == "") {
		return fmt.Errorf("--webhook-manifests=%q: want NAMESPACE/NAME of the webhook's Service", f.manifests)
	}
	if f.all && f.deploy.Image == "" {
		return errors.New("--manifests needs --manifests-image, the program's container image")
	}
	opts.HTTPAddr = "0"
	m, err := New(&rest.Config{Host: "https://cluster.invalid"}, opts) // makes no request
	if err != nil {
		return err
	}
	if err := setup(m); err != nil {
		return err
	}
	var out []byte
	if f.all {
		out, err = m.Manifests(f.deploy)
	} else {
		out, err = m.Webhooks().Manifests(webhookNamespaces(webhook.ClientConfig{ // as Manifests makes them
			Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: name}}, ns, nil), nil)
	}
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}
