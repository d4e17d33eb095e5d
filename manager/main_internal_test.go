package manager

import (
	"flag"
	"io"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/debug"
	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/internal/program"
)

// Main's flags reach Options, each defaulting to what the program set:
// one program runs without leader election on a laptop and with it in its
// Deployment, its addresses set by its manifests.
func TestMainFlags_reachOptions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   Options
		args   []string
		want   func(Options) bool
		wantLE election.Options
	}{
		{name: "defaults kept", opts: Options{HTTPAddr: ":8080", LeaderElection: election.Options{Name: "op"}},
			want:   func(o Options) bool { return o.HTTPAddr == ":8080" && o.HealthAddr == "" && o.Webhook.Addr == "" },
			wantLE: election.Options{Name: "op"}},
		{name: "leader election off", opts: Options{LeaderElection: election.Options{Name: "op", Namespace: "ns"}},
			args: []string{"--leader-elect=false"}, want: func(Options) bool { return true }},
		{name: "leader election on, named after the program", args: []string{"--leader-elect", "--leader-elect-namespace", "ops"},
			want: func(Options) bool { return true }, wantLE: election.Options{Name: program.Name(), Namespace: "ops"}},
		{name: "addresses", args: []string{"--http-addr", "0", "--health-addr", ":8081", "--webhook-addr", "127.0.0.1:9443",
			"--webhook-cert-dir", "/certs", "--cache-dir", "/cache"},
			want: func(o Options) bool {
				return o.HTTPAddr == "0" && o.HealthAddr == ":8081" && o.Webhook.Addr == "127.0.0.1:9443" &&
					o.Webhook.CertDir == "/certs" && o.CacheDir == "/cache"
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("op", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			opts := tc.opts
			_, finish := addMainFlags(fs, &opts)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			finish()
			if !tc.want(opts) {
				t.Errorf("options after %v: %+v", tc.args, opts)
			}
			if opts.LeaderElection.Name != tc.wantLE.Name || opts.LeaderElection.Namespace != tc.wantLE.Namespace {
				t.Errorf("leader election after %v: %+v, want %+v", tc.args, opts.LeaderElection, tc.wantLE)
			}
		})
	}
}

// --webhook-local's configurations call 127.0.0.1: only an API server on
// this machine, reached on loopback, can call them, and only a loopback
// listen address matches their certificate.
func TestLoopbackServerAndAddr_areLoopbackOnly(t *testing.T) {
	for host, want := range map[string]bool{
		"https://127.0.0.1:6443": true, "https://[::1]:6443": true, "https://localhost:6443": true,
		"https://10.0.0.1:6443": false, "https://api.example.com": false, "": false,
	} {
		if got := loopbackServer(host); got != want {
			t.Errorf("loopbackServer(%q) = %v, want %v", host, got, want)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.2:9443": true, "0.0.0.0:0": false, "[::]:9443": false, "": false} {
		if got := debug.IsLoopbackAddr(addr); got != want {
			t.Errorf("debug.IsLoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestRunLocalWebhooks_refusesAServerOrAnAddressOffLoopback(t *testing.T) {
	for _, c := range []struct {
		host string
		args []string
		want string
	}{
		{"https://10.0.0.1:6443", nil, "needs an API server on this machine"},
		{"https://127.0.0.1:6443", []string{"--webhook-addr", "0.0.0.0:0"}, "not a loopback address"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		addr := fs.String("webhook-addr", "", "")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		opts := Options{}
		opts.Webhook.Addr = *addr
		err := runLocalWebhooks(t.Context(), &rest.Config{Host: c.host}, fs, opts, func(*Manager) error {
			t.Fatal("set-up ran: the program started")
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("host %s, args %v: %v; want an error saying %q", c.host, c.args, err, c.want)
		}
	}
}
