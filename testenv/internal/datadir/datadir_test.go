package datadir

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoad_createsStateAndReusesItOnRestart(t *testing.T) {
	dir := t.TempDir()
	first, err := Load(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if first.Port == 0 || len(first.Token) < 32 || len(first.CA) == 0 {
		t.Fatalf("incomplete state: port %d, token %d bytes, CA %d bytes", first.Port, len(first.Token), len(first.CA))
	}
	second, err := Load(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if second.Port != first.Port || second.Token != first.Token || string(second.CA) != string(first.CA) {
		t.Fatalf("state changed across reload: %+v then %+v", first, second)
	}
	for _, f := range []string{CAFile, CertFile, KeyFile, SAKeyFile, TokenFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	tokens, err := os.ReadFile(filepath.Join(dir, TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := first.Token + "," + AdminUser + "," + AdminUser + `,"system:masters"`; strings.TrimSpace(string(tokens)) != want {
		t.Errorf("token file = %q, want %q", tokens, want)
	}
}

func TestLoad_explicitPortOverridesAndIsRemembered(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir, 0); err != nil {
		t.Fatal(err)
	}
	st, err := Load(dir, 40123)
	if err != nil {
		t.Fatal(err)
	}
	if st.Port != 40123 {
		t.Fatalf("port = %d, want 40123", st.Port)
	}
	again, err := Load(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if again.Port != 40123 {
		t.Fatalf("remembered port = %d, want 40123", again.Port)
	}
}

func TestLoad_corruptStateIsAnErrorNamingTheFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, stateFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir, 0)
	if err == nil || !strings.Contains(err.Error(), stateFile) {
		t.Fatalf("err = %v, want an error naming %s", err, stateFile)
	}
}

func TestServingCert_verifiesForLoopbackAndServiceNames(t *testing.T) {
	dir := t.TempDir()
	st, err := Load(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(st.CA)
	leaf := readCert(t, filepath.Join(dir, CertFile))
	for _, name := range []string{"127.0.0.1", "::1", "localhost", "kubernetes.default.svc", "10.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
			t.Errorf("certificate does not verify for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: pool}); err == nil {
		t.Error("certificate verifies for example.com; want only loopback and service names")
	}
}

func TestState_GetSendsTheTokenAndTrustsOnlyTheCA(t *testing.T) {
	dir := t.TempDir()
	st, err := Load(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	var gotAuth string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()

	c, err := st.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Get(t.Context(), c, srv.URL+"/readyz"); err != nil {
		t.Fatalf("Get /readyz: %v", err)
	}
	if gotAuth != "Bearer "+st.Token {
		t.Errorf("Authorization = %q, want the admin token", gotAuth)
	}
	if err := st.Get(t.Context(), c, srv.URL+"/missing"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("Get /missing: err = %v, want a 404 error", err)
	}

	other := httptest.NewTLSServer(http.NotFoundHandler()) // signed by httptest's own CA
	defer other.Close()
	if err := st.Get(t.Context(), c, other.URL); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Get from a server with another CA: err = %v, want a certificate error", err)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
