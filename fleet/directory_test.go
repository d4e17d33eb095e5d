package fleet_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/fleet"
	"github.com/ctrlkit/ctrlkit/internal/certs"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

// A kubeconfig in a Directory that names its CA by a relative path gets
// the CA beside it, not one planted in the process's working directory (a
// shared folder another user can write): the cluster's connection trusts
// its server, signed by the right CA, and would not trust a server signed
// by the planted one, to which it would send its token.
func TestDirectory_takesTheFilesAKubeconfigNamesFromItsOwnFolder(t *testing.T) {
	leakcheck.Check(t)
	now := time.Now()
	ca, caKey, err := certs.NewCA("the cluster's CA", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	planted, _, err := certs.NewCA("a planted CA", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := certs.Serving(ca, caKey, []string{"127.0.0.1"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	var token atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token.Store(r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusNotFound)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	defer srv.Close()

	dir := filepath.Join(t.TempDir(), "clusters")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), certs.CertPEM(ca.Raw), 0o600); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": {Server: srv.URL, CertificateAuthority: "ca.crt"}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"u": {Token: "the token"}},
		Contexts:       map[string]*clientcmdapi.Context{"x": {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prod.yaml"), kc, 0o600); err != nil {
		t.Fatal(err)
	}
	shared := t.TempDir()
	if err := os.WriteFile(filepath.Join(shared, "ca.crt"), certs.CertPEM(planted.Raw), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(shared)

	f, err := fleet.New(controller.ReconcileFunc[fleet.Key](func(context.Context, fleet.Key) (controller.Result, error) {
		return controller.Result{}, nil
	}), fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- fleet.Directory{Path: dir, Interval: 20 * time.Millisecond}.Run(ctx, f) }()
	eventually(t, 10*time.Second, "the cluster engaged", func() bool { return f.Engaged("prod") })
	c, ok := f.Cluster("prod")
	if !ok {
		t.Fatal("no cluster prod")
	}
	if cfg := c.Config(); cfg.CAFile != "" || len(cfg.CAData) == 0 {
		t.Errorf("the cluster's configuration names CA file %q (%d bytes inline): client-go would read it itself", cfg.CAFile, len(cfg.CAData))
	}
	resp, err := c.HTTPClient().Get(srv.URL + "/version")
	if err != nil {
		t.Fatalf("the cluster's server, signed by the CA beside the kubeconfig, is not trusted: %v", err)
	}
	resp.Body.Close()
	if got := token.Load(); got != "Bearer the token" {
		t.Errorf("the server got Authorization %q", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if err := f.Disengage("prod"); err != nil {
		t.Error(err)
	}
}
