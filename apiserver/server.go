package apiserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options configure Start. The zero value is ready to use.
type Options struct {
	// Binary is the ctrlkit-apiserver to run. Default: Binary(Progress).
	Binary string
	// DataDir holds etcd's data, certificates and the kubeconfig; Start
	// creates it (mode 0700) if missing, and Restart keeps it. An existing
	// folder must belong to the current user and not be writable by others,
	// or Start refuses it: it will hold an admin token. Every file the
	// server writes there is mode 0600. Default: a new temporary folder,
	// removed by Stop.
	DataDir string
	// Log receives the server's own log. Default: DATA-DIR/apiserver.log
	// (mode 0600), whose last lines are quoted in Start's error when the
	// server fails.
	Log io.Writer
	// Progress receives build progress when the binary must be built first.
	// Default: discard.
	Progress io.Writer
	// DisableWatchCache serves every list and watch from etcd, as
	// kube-apiserver --watch-cache=false does. Production servers keep the
	// watch cache on; so does the default.
	DisableWatchCache bool
	// DisableShardedListAndWatch leaves kube-apiserver's alpha feature
	// ShardedListAndWatch off. By default it is on, so that lists and
	// watches honour ListOptions.ShardSelector (server-side sharding).
	DisableShardedListAndWatch bool
	// Controllers runs kube-controller-manager's garbage collector and
	// namespace controller in the server's process, the same code a
	// cluster runs: owner references cascade (a deleted owner's dependents
	// are deleted, in the background or the foreground, or orphaned, as the
	// delete asked; custom resources too, within 5 seconds of their CRD's
	// install) and a deleted namespace is emptied and goes, as in a
	// cluster and unlike envtest. Off by default: they watch every
	// resource, which costs the server CPU a test may not want to pay.
	Controllers bool
	// Args are extra kube-apiserver flags; they override ctrlkit's.
	Args []string
	// StartTimeout bounds each start or restart. Default: 90s.
	StartTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.StartTimeout == 0 {
		o.StartTimeout = 90 * time.Second
	}
	return o
}

// Server is a running ctrlkit-apiserver: a real kube-apiserver with an
// embedded etcd, listening on 127.0.0.1 only. Its methods are safe for
// concurrent use, but Stop, Restart and Compact are meant to be called from
// one test at a time.
type Server struct {
	opts    Options
	dataDir string
	tempDir bool // dataDir was created by Start and is removed by Stop
	logFile *os.File

	mu   sync.Mutex // guards proc, info and cfg
	proc *process
	info readyLine
	cfg  *rest.Config // read from info.Kubeconfig; handed out as copies
}

// readyLine is what ctrlkit-apiserver prints to stdout once it is ready.
type readyLine struct {
	Event      string `json:"event"`
	Server     string `json:"server"`
	Kubeconfig string `json:"kubeconfig"`
	Admin      string `json:"admin"`
	Etcd       string `json:"etcd"` // etcd's client endpoint: TLS, a client certificate required
	PID        int    `json:"pid"`
}

// process is one run of the binary.
type process struct {
	cmd    *exec.Cmd
	stdin  io.Closer // closing it makes the server shut down (--stop-on-stdin-eof)
	exited chan struct{}
	err    error // valid once exited is closed
}

// Start runs a new server and returns once it answers /readyz, or with an
// error that quotes the server's last log lines. Stop it when done.
func Start(ctx context.Context, opts Options) (*Server, error) {
	opts = opts.withDefaults()
	s := &Server{opts: opts}
	if opts.DataDir != "" { // checked before a build that may take minutes
		dir, err := prepareDataDir(opts.DataDir)
		if err != nil {
			return nil, err
		}
		s.dataDir = dir
	}
	if opts.Binary == "" {
		bin, err := Binary(opts.Progress)
		if err != nil {
			return nil, err
		}
		s.opts.Binary = bin
	}
	temp := s.dataDir == ""
	for attempt := 1; ; attempt++ {
		if temp {
			dir, err := os.MkdirTemp("", "ctrlkit-apiserver-")
			if err != nil {
				return nil, fmt.Errorf("apiserver: %w", err)
			}
			s.dataDir, s.tempDir = dir, true
		}
		if opts.Log == nil {
			f, err := openLog(filepath.Join(s.dataDir, "apiserver.log"))
			if err != nil {
				s.removeTemp()
				return nil, err
			}
			s.logFile, s.opts.Log = f, f
		}
		err := s.start(ctx)
		if err == nil {
			return s, nil
		}
		s.closeLog()
		s.removeTemp()
		// A port probed free can be taken by another process before the
		// server binds it: a new data folder picks new ports.
		if !temp || attempt == 3 || !strings.Contains(err.Error(), "address already in use") || ctx.Err() != nil {
			return nil, err
		}
		s.logFile, s.opts.Log = nil, opts.Log
	}
}

// start runs the binary and waits for its ready line.
func (s *Server) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()

	args := []string{"--data-dir", s.dataDir, "--stop-on-stdin-eof",
		"--watch-cache=" + fmt.Sprint(!s.opts.DisableWatchCache)}
	if s.opts.Controllers {
		args = append(args, "--controllers=garbagecollector,namespace")
	}
	args = append(args, "--")
	if !s.opts.DisableShardedListAndWatch {
		args = append(args, "--feature-gates=ShardedListAndWatch=true")
	}
	args = append(args, s.opts.Args...)
	cmd := exec.Command(s.opts.Binary, args...)
	cmd.Stderr = s.opts.Log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("apiserver: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("apiserver: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("apiserver: start %s: %w", s.opts.Binary, err)
	}
	p := &process{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	ready := make(chan readyLine, 1)
	go func() {
		readReady(stdout, ready)
		p.err = cmd.Wait()
		close(p.exited)
	}()

	select {
	case info := <-ready:
		cfg, err := clientcmd.BuildConfigFromFlags("", info.Kubeconfig)
		if err != nil {
			_ = p.stop(10 * time.Second)
			return fmt.Errorf("apiserver: read kubeconfig: %w", err)
		}
		cfg.QPS, cfg.Burst = -1, 0
		if info.Etcd == "" && s.opts.Progress != nil {
			fmt.Fprintf(s.opts.Progress, "ctrlkit: warning: %s is from an older ctrlkit: its etcd takes any local client "+
				"without credentials; rebuild it (ctrlkit apiserver build) on a machine shared with others\n", s.opts.Binary)
		}
		s.mu.Lock()
		s.proc, s.info, s.cfg = p, info, cfg
		s.mu.Unlock()
		return nil
	case <-p.exited:
		return fmt.Errorf("apiserver: server exited before it was ready (%v)%s", p.err, s.logTail())
	case <-ctx.Done():
		_ = p.stop(10 * time.Second)
		return fmt.Errorf("apiserver: server not ready: %w%s", context.Cause(ctx), s.logTail())
	}
}

// readReady passes on the first ready line, then drains stdout until it closes.
func readReady(r io.Reader, ready chan<- readyLine) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var l readyLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Event == "ready" {
			ready <- l
			break
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// stop asks the server to shut down (SIGTERM) and kills it after grace.
func (p *process) stop(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("apiserver: server did not stop within %s and was killed", grace)
	}
	p.stdin.Close()
	var exit *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exit) {
		return p.err
	}
	if exit != nil {
		return fmt.Errorf("apiserver: server exited uncleanly: %w", p.err)
	}
	return nil
}

// Config returns a new client configuration for the admin user (in
// system:masters). Client-side rate limiting is off (QPS < 0), so tests are
// paced by the server alone.
func (s *Server) Config() *rest.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rest.CopyConfig(s.cfg)
}

// Kubeconfig returns the path of the admin kubeconfig, for kubectl. It
// holds the server's CA and token inline (it names no other file), so its
// bytes are a kubeconfig as a fleet's provider takes it from a Secret.
func (s *Server) Kubeconfig() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info.Kubeconfig
}

// URL returns the server's https address.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info.Server
}

// PID returns the process id of the running server, or 0 when it is stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Wait blocks until the server process exits or ctx ends. It returns nil when
// ctx ends first, and otherwise an error saying how the process ended, with
// the last lines of its log. Stop and Restart end the process too: Wait is
// for a caller that serves until interrupted and must notice the server
// dying, and does not run concurrently with Stop or Restart.
func (s *Server) Wait(ctx context.Context) error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return errors.New("apiserver: wait: the server is not running")
	}
	select {
	case <-ctx.Done():
		return nil
	case <-p.exited:
		return fmt.Errorf("apiserver: the server exited (%v)%s", p.err, s.logTail())
	}
}

// DataDir returns the folder that holds etcd's data, the certificates and the kubeconfig.
func (s *Server) DataDir() string { return s.dataDir }

// Stop shuts the server down and waits for it to exit. A temporary data
// folder is removed. Calling Stop again does nothing.
func (s *Server) Stop() error {
	err := s.stopProcess()
	s.closeLog()
	s.removeTemp()
	return err
}

// Restart stops the server and starts it again on the same address with the
// same etcd data, certificates and token: configurations from Config stay
// valid, and resource versions continue where they were.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Down(); err != nil {
		return err
	}
	return s.Up(ctx)
}

// Down stops the server's process and keeps everything else (its data,
// address, certificates and token), so that clients see a server that is
// down (connections refused) until Up starts it again: Restart in two
// steps, with a test's work between them. Down on a server that is down
// does nothing.
func (s *Server) Down() error { return s.stopProcess() }

// Up starts a server that Down stopped, on the same address with the same
// data, and returns once it is ready. Up on a running server does nothing.
func (s *Server) Up(ctx context.Context) error {
	s.mu.Lock()
	running := s.proc != nil
	s.mu.Unlock()
	if running {
		return nil
	}
	return s.start(ctx)
}

func (s *Server) stopProcess() error {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop(60 * time.Second)
}

// Compact compacts etcd up to its current revision and returns it. Reads
// that reach etcd at an older resource version then answer 410 Gone.
// (The API server's watch cache keeps its own history; see package doc.)
func (s *Server) Compact(ctx context.Context) (int64, error) {
	s.mu.Lock()
	admin, token := s.info.Admin, s.cfg.BearerToken
	s.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, admin+"/compact", nil)
	if err != nil {
		return 0, fmt.Errorf("apiserver: compact: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Close = true // one request now and then: leave no idle connection (or its goroutines) behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("apiserver: compact: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Revision int64 `json:"revision"`
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, fmt.Errorf("apiserver: compact: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("apiserver: compact: %w", err)
	}
	return out.Revision, nil
}

func (s *Server) closeLog() {
	if s.logFile != nil {
		s.logFile.Close()
		s.logFile = nil
	}
}

func (s *Server) removeTemp() {
	if s.tempDir {
		os.RemoveAll(s.dataDir)
		s.tempDir = false
	}
}

// logTail quotes the last lines of the server log, when it is a file.
func (s *Server) logTail() string {
	if s.logFile == nil {
		return ""
	}
	b, err := os.ReadFile(s.logFile.Name())
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "\nlast lines of " + s.logFile.Name() + ":\n" + strings.Join(lines, "\n")
}
