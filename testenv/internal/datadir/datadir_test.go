package datadir

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
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

// asAnotherUser makes path look made by another user: owned by uid 65534
// when the test runs as root (it can chown), and with mode in any case.
func asAnotherUser(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 {
		if err := os.Chown(path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoad_createsAPrivateDirAndPrivateFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	st, err := Load(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dir != dir {
		t.Errorf("Dir = %s, want %s", st.Dir, dir)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, mode %v; want 0700", d, err, fi.Mode())
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 11 {
		t.Fatalf("only %d files in the data dir", len(entries))
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != 0o600 || ownerOf(fi) != os.Getuid() {
			t.Errorf("%s: mode %s, owner %d; want -rw------- and ours", e.Name(), fi.Mode(), ownerOf(fi))
		}
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestPrepare_refusesADirAnotherUserCouldChange(t *testing.T) {
	tmp := t.TempDir()
	mkdir := func(name string, mode os.FileMode) string {
		d := filepath.Join(tmp, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	foreign := "/" // root's, for a test not run as root
	if os.Getuid() == 0 {
		foreign = mkdir("theirs", 0o700)
		asAnotherUser(t, foreign, 0o700)
	}
	open := mkdir("open", 0o777)
	for _, c := range []struct{ name, dir, want string }{
		{"owned by another user", foreign, "not by you"},
		{"writable by everyone", mkdir("ww", 0o777), "chmod 700 " + filepath.Join(tmp, "ww")},
		{"writable by the group", mkdir("gw", 0o770), "chmod 700"},
		{"inside a folder everyone can write", mkdir("open/data", 0o700), "is inside " + open},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(c.dir, 0)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load(%s) = %v, want an error containing %q", c.dir, err, c.want)
			}
			if _, err := os.Lstat(filepath.Join(c.dir, TokenFile)); err == nil {
				t.Errorf("Load wrote %s into the refused folder", TokenFile)
			}
		})
	}
	t.Run("a sticky folder everyone can write, as /tmp, is a fine parent", func(t *testing.T) {
		sticky := mkdir("sticky", 0o777|os.ModeSticky)
		if _, err := Prepare(filepath.Join(sticky, "data")); err != nil {
			t.Fatal(err)
		}
	})
}

func TestLoad_refusesToReuseFilesThatAreNotPrivate(t *testing.T) {
	for _, c := range []struct {
		file  string
		mode  os.FileMode
		other bool
	}{
		{stateFile, 0o600, true},
		{stateFile, 0o644, false},
		{TokenFile, 0o666, true},
		{KeyFile, 0o640, false},
		{CAFile, 0o644, false},
	} {
		t.Run(fmt.Sprintf("%s %s other=%v", c.file, c.mode, c.other), func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Load(dir, 0); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, c.file)
			if c.other {
				asAnotherUser(t, p, c.mode)
			} else if err := os.Chmod(p, c.mode); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir, 0)
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "use a fresh data directory") {
				t.Fatalf("Load = %v, want an error naming %s and the fix", err, p)
			}
		})
	}
	t.Run("a symbolic link", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := Load(dir, 0); err != nil {
			t.Fatal(err)
		}
		elsewhere := filepath.Join(t.TempDir(), "state")
		if err := os.WriteFile(elsewhere, []byte(`{"port":1,"token":"x"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, stateFile)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, p); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir, 0); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Fatalf("Load = %v, want an error about the link", err)
		}
	})
}

func TestWritePrivate_replacesAPlantedFileInsteadOfWritingThroughIt(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "kubeconfig")
	for _, p := range []string{target, target + ".tmp"} {
		if err := os.WriteFile(p, []byte("planted"), 0o666); err != nil {
			t.Fatal(err)
		}
		asAnotherUser(t, p, 0o666)
	}
	if err := WritePrivate(target, []byte("ours")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "ours" || fi.Mode() != 0o600 || ownerOf(fi) != os.Getuid() {
		t.Errorf("%s: %q, mode %s, owner %d; want ours, -rw-------", target, b, fi.Mode(), ownerOf(fi))
	}
	if b, _ := os.ReadFile(target + ".tmp"); string(b) != "planted" {
		t.Errorf("the planted kubeconfig.tmp now holds %q; want it untouched", b)
	}
}

func TestWriteEtcdCerts_trustsOnlyItsOwnFreshCA(t *testing.T) {
	dir := t.TempDir()
	st, err := Load(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	etcdCA := readCert(t, filepath.Join(dir, EtcdCAFile))
	pool := x509.NewCertPool()
	pool.AddCert(etcdCA)
	server := readCert(t, filepath.Join(dir, EtcdServerCertFile))
	if _, err := server.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: pool}); err != nil {
		t.Errorf("etcd's certificate does not verify for 127.0.0.1: %v", err)
	}
	client := readCert(t, filepath.Join(dir, EtcdClientCertFile))
	clientUse := x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if _, err := client.Verify(clientUse); err != nil {
		t.Errorf("the API server's etcd client certificate does not verify: %v", err)
	}
	apiCA := x509.NewCertPool()
	apiCA.AppendCertsFromPEM(st.CA)
	if _, err := client.Verify(x509.VerifyOptions{Roots: apiCA, KeyUsages: clientUse.KeyUsages}); err == nil {
		t.Error("the etcd client certificate verifies with the API server's CA; want a CA of etcd's own")
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, EtcdClientCertFile), filepath.Join(dir, EtcdClientKeyFile)); err != nil {
		t.Errorf("client key pair: %v", err)
	}
	if _, err := Load(dir, 0); err != nil {
		t.Fatal(err)
	}
	again := readCert(t, filepath.Join(dir, EtcdCAFile))
	if again.Equal(etcdCA) {
		t.Fatal("a second Load kept the etcd CA; want a new one each start")
	}
	newPool := x509.NewCertPool()
	newPool.AddCert(again)
	if _, err := client.Verify(x509.VerifyOptions{Roots: newPool, KeyUsages: clientUse.KeyUsages}); err == nil {
		t.Error("a client certificate of the last start verifies with the new etcd CA")
	}
}
