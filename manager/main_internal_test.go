package manager

import (
	"flag"
	"io"
	"testing"

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
