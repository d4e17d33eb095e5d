package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/lease"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/shard"
)

// flagsOf returns the flag set command c really parses, by asking it for help.
func flagsOf(t *testing.T, c command) *flag.FlagSet {
	t.Helper()
	var h helpShown
	if err := c.run(t.Context(), []string{"-h"}, io.Discard, io.Discard); !errors.As(err, &h) {
		t.Fatalf("%s -h = %v, want its help (every command must parse its flags first)", c.name, err)
	}
	return h.fs
}

// wantEveryFlag fails t unless out names every flag of every command in cs.
func wantEveryFlag(t *testing.T, out string, cs ...command) {
	t.Helper()
	for _, c := range cs {
		flagsOf(t, c).VisitAll(func(f *flag.Flag) {
			if !strings.Contains(out, "--"+f.Name+" ") {
				t.Errorf("%s's flag --%s is missing from:\n%s", c.name, f.Name, out)
			}
		})
	}
}

func TestRun_helpInEveryFormPrintsUsageAndSucceeds(t *testing.T) {
	for _, args := range [][]string{nil, {"-h"}, {"-help"}, {"--help"}, {"help"}} {
		t.Run(strings.Join(append([]string{"ctrlkit"}, args...), " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := run(t.Context(), args, &out, &errOut); err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			if errOut.Len() > 0 {
				t.Errorf("help wrote to stderr: %q", errOut.String())
			}
			for _, c := range commands {
				if !strings.Contains(out.String(), "\n  "+c.name+" ") || !strings.Contains(out.String(), c.summary) {
					t.Errorf("usage lacks command %q", c.name)
				}
			}
			wantEveryFlag(t, out.String(), commands...)
		})
	}
}

func TestRun_aCommandGroupAloneListsItsCommands(t *testing.T) {
	for _, args := range [][]string{{"apiserver"}, {"apiserver", "--help"}, {"help", "apiserver"}, {"run"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out bytes.Buffer
			if err := run(t.Context(), args, &out, io.Discard); err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			group := args[0]
			if group == "help" {
				group = args[1]
			}
			for _, c := range commands {
				in := strings.HasPrefix(c.name, group+" ")
				if got := strings.Contains(out.String(), "\n  "+c.name+" "); got != in {
					t.Errorf("usage lists %q: %v, want %v:\n%s", c.name, got, in, out.String())
				}
			}
		})
	}
}

func TestRun_everyCommandsHelpListsEveryFlagAndSucceeds(t *testing.T) {
	for _, c := range commands {
		for _, form := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			args := strings.Fields(strings.Join(form, " "))
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				var out, errOut bytes.Buffer
				if err := run(t.Context(), args, &out, &errOut); err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				if !strings.HasPrefix(out.String(), "usage: ctrlkit "+c.name) || errOut.Len() > 0 {
					t.Errorf("stdout = %q, stderr = %q; want the usage of %s on stdout only", out.String(), errOut.String(), c.name)
				}
				wantEveryFlag(t, out.String(), c)
			})
		}
	}
}

func TestRun_aWrongCommandFlagOrArgumentIsAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"}, {"apiserver", "frobnicate"}, {"help", "frobnicate"},
		{"demo", "--bogus"}, {"apiserver", "run", "stray"}, {"run", "foo", "--workers", "x"},
		{"demo", "--shards"}, {"demo", "--shards", "--replicas", "1"}, {"demo", "--replicas", "3", "--shards", "--kill-leader"},
		{"run", "foo", "--shard-ring", "r", "--leader-elect"}, {"run", "foo", "--shard-ring", "r", "--shard-key", "name"},
		{"run", "foo", "--lease-duration", "0s"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(t.Context(), args, &out, &errOut)
			if !errors.Is(err, errUsage) {
				t.Fatalf("err = %v, want errUsage", err)
			}
			if out.Len() > 0 || !strings.Contains(errOut.String(), "usage:") {
				t.Errorf("stdout = %q, stderr = %q; want what was wrong and the usage on stderr", out.String(), errOut.String())
			}
		})
	}
}

func TestRun_runFooRefusesVirtualShardsTheRingCannotUse(t *testing.T) {
	kubeconfig := unreachableKubeconfig(t) // manager.New checks them before any request
	for _, tc := range []struct{ virtual, want string }{{"3", "want a power of two"}, {"8192", "want at most 4096"}, {"-4", "want a power of two"}} {
		t.Run(tc.virtual, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(t.Context(), []string{"run", "foo", "--kubeconfig", kubeconfig, "--metrics-addr", "0",
				"--shard-ring", "r", "--virtual-shards", tc.virtual}, &out, &errOut)
			if !errors.Is(err, errUsage) {
				t.Fatalf("err = %v, want errUsage", err)
			}
			if !strings.Contains(errOut.String(), "--virtual-shards "+tc.virtual) || !strings.Contains(errOut.String(), tc.want) ||
				!strings.Contains(errOut.String(), "usage:") {
				t.Errorf("stderr = %q; want --virtual-shards %s, %q and the usage", errOut.String(), tc.virtual, tc.want)
			}
		})
	}
}

func TestReplication_setsLeaderElectionOrShardingWithTheLeaseTimings(t *testing.T) {
	ring := func(key shard.Key, ld, rd, rp time.Duration) manager.Sharding {
		return manager.Sharding{Name: "r", Namespace: "ns", Identity: "me", Key: key, VirtualShards: 64,
			Timing: lease.Timing{LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp}}
	}
	base := replicationFlags{key: "namespace", virtual: 64, namespace: "ns", identity: "me", leaseDuration: 15 * time.Second}
	with := func(f func(*replicationFlags)) replicationFlags { c := base; f(&c); return c }
	for _, tc := range []struct {
		name     string
		flags    replicationFlags
		election election.Options
		sharding manager.Sharding
	}{
		{name: "neither by default", flags: base},
		{name: "leader election with client-go's timings at 15s", flags: with(func(f *replicationFlags) { f.leaderElect = true }),
			election: election.Options{Name: "foo-controller", Namespace: "ns", Identity: "me",
				Timing: lease.Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}}},
		{name: "a ring hashed by namespace", flags: with(func(f *replicationFlags) { f.ring = "r" }),
			sharding: ring(shard.Namespace, 15*time.Second, 10*time.Second, 2*time.Second)},
		{name: "a ring hashed by uid with a short lease", flags: with(func(f *replicationFlags) {
			f.ring, f.key, f.leaseDuration = "r", "uid", 3*time.Second
		}), sharding: ring(shard.UID, 3*time.Second, 2*time.Second, 400*time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts manager.Options
			if err := replication(&opts, tc.flags); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(opts.LeaderElection, tc.election) || !reflect.DeepEqual(opts.Sharding, tc.sharding) {
				t.Errorf("got %+v and %+v, want %+v and %+v", opts.LeaderElection, opts.Sharding, tc.election, tc.sharding)
			}
		})
	}
}

// unreachableKubeconfig writes a kubeconfig naming a server nobody serves.
func unreachableKubeconfig(t *testing.T) string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

func TestRun_withoutAClusterSaysWhatWasTriedAndHowToPointAtOne(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	t.Setenv("KUBECONFIG", missing)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, args := range [][]string{{"run", "podlogger"}, {"run", "foo", "--metrics-addr", "0"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			err := run(t.Context(), args, io.Discard, io.Discard)
			if err == nil {
				t.Fatal("err = nil, want an error")
			}
			for _, want := range []string{"--kubeconfig: not given", "$KUBECONFIG: " + missing + " (no such file)",
				"in-cluster config: not running in a Pod", "--kubeconfig PATH or KUBECONFIG=PATH", "ctrlkit apiserver run"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			if strings.Contains(err.Error(), "KUBERNETES_MASTER") {
				t.Errorf("error still suggests KUBERNETES_MASTER:\n%v", err)
			}
		})
	}
}

func TestRun_runFooWarnsThatADebugTokenFlagIsVisibleInPs(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing")) // run foo fails at once, after the warning
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	const warning = "--debug-token is visible to every local user"
	for _, tc := range []struct {
		name string
		args []string
		env  string
		warn bool
	}{
		{"the flag", []string{"--debug-token", "s3cret"}, "", true},
		{"the environment variable", nil, "s3cret", false},
		{"neither", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envDebugToken, tc.env)
			var errOut bytes.Buffer
			err := run(t.Context(), append([]string{"run", "foo", "--metrics-addr", "0"}, tc.args...), io.Discard, &errOut)
			if err == nil {
				t.Fatal("err = nil, want the missing kubeconfig")
			}
			if got := strings.Contains(errOut.String(), warning); got != tc.warn {
				t.Errorf("warned %v, want %v; stderr = %q", got, tc.warn, errOut.String())
			}
			if tc.warn && !strings.Contains(errOut.String(), envDebugToken) {
				t.Errorf("the warning does not name %s: %q", envDebugToken, errOut.String())
			}
		})
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"help", "run", "foo"}, &out, io.Discard); err != nil ||
		!strings.Contains(out.String(), envDebugToken) {
		t.Errorf("help run foo does not name %s: %v %q", envDebugToken, err, out.String())
	}
}

// TestMain_exitCodes runs this test binary as the ctrlkit command (see TestMain).
func TestMain_exitCodes(t *testing.T) {
	kubeconfig := unreachableKubeconfig(t)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{nil, 0}, {[]string{"--help"}, 0}, {[]string{"apiserver"}, 0}, {[]string{"run", "foo", "--help"}, 0},
		{[]string{"frobnicate"}, 2}, {[]string{"demo", "--bogus"}, 2}, {[]string{"demo", "--shards"}, 2},
		{[]string{"run", "foo", "--shard-ring", "r", "--leader-elect"}, 2}, {[]string{"run", "foo", "--shard-key", "name"}, 2},
		{[]string{"run", "foo", "--kubeconfig", kubeconfig, "--shard-ring", "r", "--virtual-shards", "3"}, 2},
		{[]string{"run", "podlogger"}, 1}, // no cluster
	} {
		t.Run(strings.Join(append([]string{"ctrlkit"}, tc.args...), " "), func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], tc.args...)
			cmd.Env = append(os.Environ(), envRunAsCLI+"=1", "KUBECONFIG="+filepath.Join(t.TempDir(), "missing"),
				"KUBERNETES_SERVICE_HOST=")
			out, err := cmd.CombinedOutput()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.code, out)
			}
		})
	}
}

// apiserverRun runs "ctrlkit apiserver run args..." in the background and
// returns its stdout lines and its result.
func apiserverRun(t *testing.T, ctx context.Context, args ...string) (lines <-chan string, done <-chan error, stderr *syncBuffer) {
	t.Helper()
	pr, pw := io.Pipe()
	stderr = &syncBuffer{}
	result := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"apiserver", "run"}, args...), pw, stderr)
		pw.Close()
		result <- err
	}()
	out := make(chan string, 16)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			out <- sc.Text()
		}
	}()
	return out, result, stderr
}

// lineWithPrefix returns the rest of the first line starting with prefix.
func lineWithPrefix(t *testing.T, lines <-chan string, prefix string, stderr *syncBuffer) string {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("run ended before printing %q:\n%s", prefix, stderr.String())
			}
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		case <-timeout:
			t.Fatalf("no line %q within 2m", prefix)
		}
	}
}

func TestRun_apiserverRunServesUntilInterruptedAndCleansUp(t *testing.T) {
	leakcheck.Check(t)
	ctx, cancel := context.WithCancel(t.Context())
	lines, done, stderr := apiserverRun(t, ctx)
	path := lineWithPrefix(t, lines, "kubeconfig: ", stderr)
	if _, err := clientcmd.LoadFromFile(path); err != nil {
		t.Fatalf("printed kubeconfig does not load: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after interrupt: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not return within 1m of the interrupt")
	}
	for range lines { // the reader ends when the pipe closes
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("temporary kubeconfig %s still exists after stop (err %v)", path, err)
	}
}

func TestRun_apiserverRunCreatesItsDataDirAndExitsWhenTheServerDies(t *testing.T) {
	leakcheck.Check(t)
	dataDir := filepath.Join(t.TempDir(), "not", "there", "yet")
	lines, done, stderr := apiserverRun(t, t.Context(), "--data-dir", dataDir)
	ready := lineWithPrefix(t, lines, "API server ready at ", stderr)
	if path := lineWithPrefix(t, lines, "kubeconfig: ", stderr); filepath.Dir(path) != dataDir {
		t.Errorf("kubeconfig %s is not in the data dir %s", path, dataDir)
	}
	_, pidText, _ := strings.Cut(ready, "(pid ")
	pid, err := strconv.Atoi(strings.TrimSuffix(pidText, ")"))
	if err != nil {
		t.Fatalf("ready line %q has no pid: %v", ready, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "server exited") {
			t.Fatalf("run = %v, want an error saying the server exited", err)
		}
		if !strings.Contains(stderr.String(), "stopped on its own") {
			t.Errorf("stderr does not say the server stopped:\n%s", stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not notice its server dying within 1m")
	}
	for range lines {
	}
	if _, err := os.Stat(filepath.Join(dataDir, "kubeconfig")); err != nil {
		t.Errorf("the data dir was not kept: %v", err)
	}
}

func TestRun_apiserverRunRefusesADataDirOthersCanWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "k")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // were it accepted, it would serve until then
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, []string{"apiserver", "run", "--data-dir", dir}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "chmod 700 "+dir) {
		t.Fatalf("apiserver run --data-dir (mode 0777) = %v, want an error naming the fix \"chmod 700 %s\"", err, dir)
	}
	if strings.Contains(out.String(), "ready") {
		t.Errorf("a server started anyway:\n%s", out.String())
	}
}

func TestRun_apiserverBuildPrintsTheCachedBinary(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"apiserver", "build"}, &out, &errOut); err != nil {
		t.Fatalf("apiserver build: %v\n%s", err, errOut.String())
	}
	if fi, err := os.Stat(strings.TrimSpace(out.String())); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("printed %q, not an executable (%v)", out.String(), err)
	}
	err := run(t.Context(), []string{"apiserver", "build", "--testenv", t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "not ctrlkit's testenv module") {
		t.Errorf("build from an empty folder = %v, want an error saying it is not testenv", err)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and a concurrent reader.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
