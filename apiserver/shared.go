package apiserver

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Shared is one server for a whole test package, started by the first test
// that asks for it. Tests share it through a namespace each; tests that
// restart or compact should start a Server of their own instead.
//
//	var env apiserver.Shared
//
//	func TestMain(m *testing.M) { os.Exit(env.Run(m)) }
//
//	func TestSomething(t *testing.T) {
//		srv := env.Get(t)
//		ns := srv.Namespace(t)
//		...
//	}
//
// The zero value is ready to use; Options may be set before the first Get.
type Shared struct {
	Options Options

	mu  sync.Mutex // guards srv and err
	srv *Server
	err error // the first start's error, repeated to every later Get
}

// Get returns the shared server, starting it on first use. If it cannot
// start, t fails: a test that needs the real server never skips.
func (sh *Shared) Get(t testing.TB) *Server {
	t.Helper()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.srv == nil && sh.err == nil {
		opts := sh.Options
		if opts.Progress == nil {
			opts.Progress = os.Stderr
		}
		sh.srv, sh.err = Start(t.Context(), opts)
	}
	if sh.err != nil {
		t.Fatalf("the real API server is required and did not start: %v", sh.err)
	}
	return sh.srv
}

// Run runs the tests and then stops the server if one was started; use it
// from TestMain. It returns m.Run's exit code, or 1 if stopping failed.
func (sh *Shared) Run(m *testing.M) int {
	code := m.Run()
	sh.mu.Lock()
	srv := sh.srv
	sh.srv = nil
	sh.mu.Unlock()
	if srv != nil {
		if err := srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "apiserver: stop shared server:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// StartForTest starts a server for t alone (tests that restart or compact
// need their own) and stops it when t ends. The stop is registered now, so
// it runs after every cleanup registered later: informers and controllers
// started afterwards stop before the server does. If the server cannot
// start, or does not stop cleanly, t fails; it never skips.
func StartForTest(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Progress == nil {
		opts.Progress = os.Stderr
	}
	srv, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("the real API server is required and did not start: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop the API server: %v", err)
		}
	})
	return srv
}

// Namespace creates a namespace named after t with a random suffix and
// returns its name. Namespaces are left in place and go away with the
// server: without Options.Controllers (off by default) the server runs no
// namespace controller, so a deleted namespace would stay Terminating.
func (s *Server) Namespace(t testing.TB) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaceName(t.Name())}}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns.Name, err)
	}
	return ns.Name
}

// namespaceName turns a test name into a valid, unique namespace name
// (a DNS label of at most 63 characters).
func namespaceName(test string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if len(name) > 50 {
		name = strings.TrimRight(name[:50], "-")
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	if name == "" {
		name = "test"
	}
	return name + "-" + hex.EncodeToString(suffix)
}

// Client returns a clientset for cfg whose idle connections are closed
// when t ends: a leak check registered before it (leakcheck.Check, at the
// start of a test) sees no connection goroutine left. It fails t on an
// invalid cfg.
func Client(t testing.TB, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	kube, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// KubeconfigAs writes a kubeconfig that acts as the ServiceAccount
// namespace/serviceAccount (a token from the TokenRequest API, valid for
// an hour, and the server's certificate authority) into a folder of the
// test's, and returns its path: run a program with it, and it has the
// permissions its RBAC gives that ServiceAccount and nothing else, as in
// a cluster (the ServiceAccount and its bindings applied first, e.g. from
// a manager.Main program's --manifests).
func (s *Server) KubeconfigAs(t testing.TB, namespace, serviceAccount string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), serviceAccount,
		&authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for ServiceAccount %s/%s: %v", namespace, serviceAccount, err)
	}
	cfg := s.Config()
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["ctrlkit"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: ca}
	kc.AuthInfos[serviceAccount] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts["ctrlkit"] = &clientcmdapi.Context{Cluster: "ctrlkit", AuthInfo: serviceAccount, Namespace: namespace}
	kc.CurrentContext = "ctrlkit"
	path := filepath.Join(t.TempDir(), "kubeconfig-"+serviceAccount)
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
