//go:build !race

// Command ctrlkit-apiserver runs a real kube-apiserver backed by an embedded,
// in-process etcd, bound to loopback only. It is ctrlkit's test and demo
// environment: the same server code as a production cluster, one binary, no
// containers.
//
// It authenticates one bearer token (an admin in system:masters) and
// authorizes with RBAC, so impersonation gives tests any other identity.
// Certificates, the service-account key and the token are generated into the
// data directory on first start and reused on restart, so a client's
// configuration stays valid across a restart with the same --data-dir.
// The data directory must belong to the current user and be writable by
// nobody else; every file written into it is mode 0600 (see datadir.Prepare).
// etcd listens on loopback with TLS and accepts only a client certificate
// from a CA made at each start, whose key is never stored: the API server is
// its only client.
//
// When the server is ready it prints one JSON line to stdout (see readyLine)
// and writes a kubeconfig. SIGTERM or SIGINT shut it down cleanly. A small
// admin endpoint on loopback (authenticated with the same token) compacts
// etcd, so tests can make old resource versions answer 410 Gone.
//
// The files of this command carry "//go:build !race": the server is a tool
// that tests exec, never code under test, and the constraint keeps
// "go test -race ./..." from compiling all of kube-apiserver a second time
// with the race detector.
//
// Usage:
//
//	ctrlkit-apiserver [--data-dir DIR] [--port N] [--kubeconfig PATH] [--controllers garbagecollector,namespace] [-- kube-apiserver flags...]
//
// With --controllers it also runs kube-controller-manager's garbage
// collector and namespace controller in its process (controllers.go), so
// owner references cascade as in a cluster.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/ctrlkit/ctrlkit/testenv/internal/datadir"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as kube-apiserver registers it
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as kube-apiserver registers them
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as kube-apiserver registers it
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

// readyLine is printed to stdout, as one JSON object, once /readyz answers ok.
type readyLine struct {
	Event      string `json:"event"`      // always "ready"
	Server     string `json:"server"`     // https URL of the API server
	Kubeconfig string `json:"kubeconfig"` // path of the admin kubeconfig
	Admin      string `json:"admin"`      // http URL of the admin endpoint (POST /compact)
	Etcd       string `json:"etcd"`       // https URL of etcd's client endpoint (client certificate required)
	DataDir    string `json:"dataDir"`
	PID        int    `json:"pid"`
}

type options struct {
	dataDir        string
	port           int
	kubeconfig     string
	watchCache     bool
	stopOnStdinEOF bool
	controllers    []string
	extra          []string
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ctrlkit-apiserver:", err)
		os.Exit(1)
	}
}

func parseFlags() (options, error) {
	var o options
	fs := flag.NewFlagSet("ctrlkit-apiserver", flag.ContinueOnError)
	fs.StringVar(&o.dataDir, "data-dir", "", "folder for etcd data, certificates and the kubeconfig, created 0700 if missing; an existing one must be yours and not writable by others (default: a new temporary folder, removed on exit)")
	fs.IntVar(&o.port, "port", 0, "secure port on 127.0.0.1 (default: the port used last time with this data dir, else a free one)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "where to write the admin kubeconfig (default: DATA-DIR/kubeconfig)")
	fs.BoolVar(&o.watchCache, "watch-cache", true, "serve lists and watches from the API server's watch cache, as production servers do")
	fs.BoolVar(&o.stopOnStdinEOF, "stop-on-stdin-eof", false, "shut down when standard input closes (so a parent that dies takes the server with it)")
	controllers := fs.String("controllers", "", "kube-controller-manager controllers to run in this process once the server is ready, comma-separated: garbagecollector (owner references cascade), namespace (deleted namespaces are emptied and go)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return o, err
	}
	o.extra = fs.Args()
	var err error
	o.controllers, err = parseControllers(*controllers)
	return o, err
}

func run() error {
	o, err := parseFlags()
	if err != nil {
		return err
	}
	if o.dataDir == "" {
		dir, err := os.MkdirTemp("", "ctrlkit-apiserver-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.dataDir = dir
	}
	st, err := datadir.Load(o.dataDir, o.port)
	if err != nil {
		return err
	}
	o.dataDir = st.Dir // absolute, links resolved, checked private
	if o.kubeconfig == "" {
		o.kubeconfig = filepath.Join(o.dataDir, "kubeconfig")
	}
	etcd, err := startEtcd(o.dataDir, st.Port)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	defer etcd.close()

	admin, err := startAdmin(etcd, st.Token, st.Port)
	if err != nil {
		return fmt.Errorf("start admin endpoint: %w", err)
	}
	defer admin.close()

	server := "https://127.0.0.1:" + strconv.Itoa(st.Port)
	if err := writeKubeconfig(o.kubeconfig, server, st); err != nil {
		return err
	}

	// kube-apiserver installs its own SIGTERM/SIGINT handler and returns from
	// cli.Run once it has shut down; we then stop etcd and the admin endpoint.
	cmd := app.NewAPIServerCommand()
	cmd.SetArgs(apiserverArgs(o, st, etcd.clientURL))
	cmd.SetOut(os.Stderr)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go announceWhenReady(ctx, server, st, readyLine{
		Event: "ready", Server: server, Kubeconfig: o.kubeconfig,
		Admin: admin.url, Etcd: etcd.clientURL, DataDir: o.dataDir, PID: os.Getpid(),
	}, func() error {
		if len(o.controllers) == 0 {
			return nil
		}
		return startControllers(ctx, o.kubeconfig, o.controllers)
	})
	if o.stopOnStdinEOF {
		go stopOnEOF(os.Stdin)
	}
	if code := cli.Run(cmd); code != 0 {
		return fmt.Errorf("kube-apiserver exited with code %d", code)
	}
	return nil
}

// apiserverArgs are the kube-apiserver flags: loopback only, our certificates
// and token, RBAC, and the embedded etcd. Flags after "--" are appended, so
// they override ours.
func apiserverArgs(o options, st datadir.State, etcdURL string) []string {
	d := o.dataDir
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--etcd-cafile=" + filepath.Join(d, datadir.EtcdCAFile),
		"--etcd-certfile=" + filepath.Join(d, datadir.EtcdClientCertFile),
		"--etcd-keyfile=" + filepath.Join(d, datadir.EtcdClientKeyFile),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(st.Port),
		"--tls-cert-file=" + filepath.Join(d, datadir.CertFile),
		"--tls-private-key-file=" + filepath.Join(d, datadir.KeyFile),
		"--client-ca-file=" + filepath.Join(d, datadir.CAFile),
		"--token-auth-file=" + filepath.Join(d, datadir.TokenFile),
		"--authorization-mode=RBAC",
		"--anonymous-auth=false",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(d, datadir.SAKeyFile),
		"--service-account-signing-key-file=" + filepath.Join(d, datadir.SAKeyFile),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--cert-dir=" + filepath.Join(d, "certs"),
		// No controller-manager runs here, so nothing creates the "default"
		// ServiceAccount in new namespaces; without this, every Pod create
		// would be rejected by the ServiceAccount admission plugin.
		"--disable-admission-plugins=ServiceAccount",
		// The advertise address is loopback, which an Endpoints object may
		// not hold; nothing in-cluster needs to reach this server anyway.
		"--endpoint-reconciler-type=none",
		// Tests compact etcd themselves (POST /compact on the admin endpoint);
		// a background compaction every 5 minutes would make them flaky.
		"--etcd-compaction-interval=0",
		"--watch-cache=" + strconv.FormatBool(o.watchCache),
		// On SIGTERM, close open watches 2s after other requests drain
		// instead of waiting up to a minute for clients to hang up: a
		// restart with watchers attached takes seconds, as a rolling
		// restart of a production API server does.
		"--shutdown-send-retry-after=true",
		"--v=0",
	}
	return append(args, o.extra...)
}

// announceWhenReady polls /readyz and prints the ready line once it answers ok.
func announceWhenReady(ctx context.Context, server string, st datadir.State, line readyLine, ready func() error) {
	client, err := st.HTTPClient()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ctrlkit-apiserver: readiness client:", err)
		return
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if st.Get(ctx, client, server+"/readyz") == nil {
			if err := ready(); err != nil {
				fmt.Fprintln(os.Stderr, "ctrlkit-apiserver: controllers:", err)
				_ = syscall.Kill(os.Getpid(), syscall.SIGTERM) // no ready line: the caller sees the start fail
				return
			}
			b, _ := json.Marshal(line)
			fmt.Fprintln(os.Stdout, string(b))
			return
		}
	}
}

// stopOnEOF sends ourselves SIGTERM when r reaches end of file, so the
// regular graceful shutdown runs.
func stopOnEOF(r io.Reader) {
	_, _ = io.Copy(io.Discard, r)
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		fmt.Fprintln(os.Stderr, "ctrlkit-apiserver: signal self:", err)
	}
}
