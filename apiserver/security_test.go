package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"io/fs"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/safefile"
)

// Files ctrlkit-apiserver keeps in its data dir (testenv/internal/datadir).
const (
	etcdCAFile         = "etcd-ca.crt"
	etcdClientCertFile = "etcd-client.crt"
	etcdClientKeyFile  = "etcd-client.key"
	stateFile          = "ctrlkit-apiserver.json"
	tokenFile          = "tokens.csv"
)

// otherUID is the owner given to files and folders "made by another user".
const otherUID = 65534 // nobody

// asAnotherUser makes path look made by another user: owned by otherUID
// when the test runs as root (it can chown), and readable and writable by
// everyone in any case.
func asAnotherUser(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 {
		if err := os.Chown(path, otherUID, otherUID); err != nil {
			t.Fatal(err)
		}
	}
}

// foreignDir returns a folder owned by someone other than the test's user.
func foreignDir(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		return "/" // owned by root; refused before anything is written
	}
	d := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	asAnotherUser(t, d, 0o700)
	return d
}

// etcdPost sends etcd's JSON range request for every key to url with client
// and returns the status and body, or the error.
func etcdPost(ctx context.Context, client *http.Client, url string) (int, string, error) {
	body := strings.NewReader(`{"key":"AA==","range_end":"AA==","keys_only":true,"limit":1}`) // all keys
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v3/kv/range", body)
	if err != nil {
		return 0, "", err
	}
	req.Close = true
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b), nil
}

func httpClient(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

// Every listener of the server is on loopback and refuses a client without
// credentials: the API server without a token, the admin endpoint without
// it, etcd without the API server's client certificate.
func TestServer_listenersRefuseClientsWithoutCredentials(t *testing.T) {
	leakcheck.Check(t)
	srv := StartForTest(t, Options{DataDir: filepath.Join(t.TempDir(), "data")})
	srv.mu.Lock()
	info := srv.info
	srv.mu.Unlock()
	etcdURL := info.Etcd
	for name, url := range map[string]string{"API server": info.Server, "etcd": etcdURL, "admin endpoint": info.Admin} {
		if !strings.HasPrefix(url, "https://127.0.0.1:") && !(name == "admin endpoint" && strings.HasPrefix(url, "http://127.0.0.1:")) {
			t.Errorf("%s at %q, want 127.0.0.1 (https but for the admin endpoint)", name, url)
		}
	}
	if _, err := Client(t, srv.Config()).CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("the API server does not work: %v", err)
	}
	_, err := Client(t, rest.AnonymousClientConfig(srv.Config())).CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("the API server without a token: %v; want 401 Unauthorized", err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, info.Admin+"/compact", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Close = true
	resp, err := httpClient(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /compact without the token: %s; want 401", resp.Status)
	}

	dir := srv.DataDir()
	caPEM, err := os.ReadFile(filepath.Join(dir, etcdCAFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no certificate in %s", etcdCAFile)
	}
	ours, err := tls.LoadX509KeyPair(filepath.Join(dir, etcdClientCertFile), filepath.Join(dir, etcdClientKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]*http.Client{
		"plain HTTP":                       httpClient(nil),
		"TLS without a client certificate": httpClient(&tls.Config{RootCAs: roots}),
		"TLS with a self-made certificate": httpClient(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{selfSigned(t)}}),
	}
	for name, c := range refused {
		url := etcdURL
		if name == "plain HTTP" {
			url = "http://" + strings.TrimPrefix(etcdURL, "https://")
		}
		code, body, err := etcdPost(t.Context(), c, url)
		if err == nil && (code == http.StatusOK || strings.Contains(body, `"header"`)) {
			t.Errorf("%s: etcd answered %d %q; want the connection refused", name, code, body)
		}
	}
	// The same request with the API server's certificate works: the refusals
	// above are etcd's, not a wrong address or request.
	code, body, err := etcdPost(t.Context(), httpClient(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{ours}}), etcdURL)
	if err != nil || code != http.StatusOK || !strings.Contains(body, `"header"`) {
		t.Fatalf("with the API server's client certificate: %d %q %v; want 200 and a range response", code, body, err)
	}
	if rev, err := srv.Compact(t.Context()); err != nil || rev <= 0 {
		t.Errorf("Compact = %d, %v; want it to keep working", rev, err)
	}
}

// selfSigned makes a client certificate that no CA of the server signed.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kube-apiserver-etcd-client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestServer_everyFileItWritesIsPrivate(t *testing.T) {
	leakcheck.Check(t)
	dir := filepath.Join(t.TempDir(), "data") // Start creates it
	srv := StartForTest(t, Options{DataDir: dir})
	check := func(when string) {
		t.Helper()
		var seen []string
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if owner := safefile.Owner(fi); owner != os.Getuid() || fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s: %s has owner uid %d and mode %s; want ours and no group or other permissions", when, p, owner, fi.Mode())
			}
			seen = append(seen, d.Name())
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"apiserver.log", "kubeconfig", tokenFile, stateFile, etcdClientKeyFile, "db"} {
			if !strings.Contains(" "+strings.Join(seen, " ")+" ", " "+want+" ") {
				t.Errorf("%s: no %s in the data dir (saw %v)", when, want, seen)
			}
		}
	}
	check("after start")
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	check("after restart")
}

func TestStart_refusesADataDirAnotherUserCouldChange(t *testing.T) {
	tmp := t.TempDir()
	mkdir := func(name string, mode fs.FileMode) string {
		d := filepath.Join(tmp, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil { // not subject to the umask
			t.Fatal(err)
		}
		return d
	}
	worldWritable := mkdir("world-writable", 0o777)
	groupWritable := mkdir("group-writable", 0o770)
	openParent := mkdir("open-parent", 0o777)
	inOpenParent := filepath.Join(openParent, "data")
	if err := os.Mkdir(inOpenParent, 0o700); err != nil {
		t.Fatal(err)
	}
	foreign := foreignDir(t)
	link := filepath.Join(tmp, "link")
	if err := os.Symlink(foreign, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, dir, want string }{
		{"owned by another user", foreign, "use a fresh directory"},
		{"a link to a folder of another user", link, "not by you"},
		{"writable by everyone", worldWritable, `chmod 700 ` + worldWritable},
		{"writable by the group", groupWritable, `chmod 700 ` + groupWritable},
		{"inside a folder everyone can write", inOpenParent, "is inside " + openParent},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, err := Start(t.Context(), Options{DataDir: c.dir, Progress: os.Stderr})
			if err == nil {
				_ = srv.Stop()
				t.Fatalf("Start accepted %s", c.dir)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("Start: %v\nwant an error containing %q", err, c.want)
			}
			if _, err := os.Lstat(filepath.Join(c.dir, "apiserver.log")); err == nil {
				t.Errorf("Start wrote apiserver.log into the refused %s", c.dir)
			}
		})
	}
	t.Run("a folder of ours that others may only read is accepted", func(t *testing.T) {
		d := mkdir("readable", 0o755)
		if _, err := prepareDataDir(d); err != nil {
			t.Fatal(err)
		}
	})
}

// The binary enforces the same rules when run by hand, without Start.
func TestBinary_refusesADataDirAnotherUserCouldChange(t *testing.T) {
	bin, err := Binary(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	worldWritable := filepath.Join(t.TempDir(), "world-writable")
	if err := os.Mkdir(worldWritable, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(worldWritable, 0o777); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{foreignDir(t): "use a fresh directory", worldWritable: "chmod 700"} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		// Standard input is empty: were the folder accepted, the server would
		// start and stop again at once (--stop-on-stdin-eof).
		out, err := exec.CommandContext(ctx, bin, "--data-dir", dir, "--stop-on-stdin-eof").CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("ctrlkit-apiserver --data-dir %s: %v\n%s\nwant a failure containing %q", dir, err, out, want)
		}
	}
}

func TestStart_neverUsesFilesPlantedInTheDataDir(t *testing.T) {
	leakcheck.Check(t)
	plant := func(t *testing.T, dir, name, content string, mode fs.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		asAnotherUser(t, p, mode)
		return p
	}
	const planted = "planted-token-0123456789abcdef"
	tokens := planted + `,attacker,attacker,"system:masters"` + "\n"

	// A temporary kubeconfig and a token file of another user are replaced,
	// not written through.
	first := t.TempDir()
	tmp := plant(t, first, "kubeconfig.tmp", "planted\n", 0o666)
	plant(t, first, tokenFile, tokens, 0o666)
	srv, err := Start(t.Context(), Options{DataDir: first, Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(tmp); err != nil || string(b) != "planted\n" {
		t.Errorf("planted %s now holds %q (%v): the server wrote through it", tmp, b, err)
	}
	for _, name := range []string{"kubeconfig", tokenFile} {
		fi, err := os.Stat(filepath.Join(first, name))
		if err != nil {
			t.Fatal(err)
		}
		if safefile.Owner(fi) != os.Getuid() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: owner uid %d, mode %s; want ours and -rw-------", name, safefile.Owner(fi), fi.Mode())
		}
	}
	if b, _ := os.ReadFile(filepath.Join(first, tokenFile)); strings.Contains(string(b), planted) {
		t.Errorf("%s still holds the planted token", tokenFile)
	}
	cfg := rest.AnonymousClientConfig(srv.Config())
	cfg.BearerToken = planted
	_, err = Client(t, cfg).CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("list with the planted token: %v; want 401 Unauthorized", err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	// A state file naming a token another user knows, beside certificates
	// and keys that work (the first server's), is refused.
	for _, c := range []struct {
		name  string
		mode  fs.FileMode
		other bool // owned by another user
	}{
		{"a state file of another user is refused", 0o666, true},
		{"a state file of ours that others can read is refused", 0o644, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			state := filepath.Join(dir, stateFile)
			if err := os.WriteFile(state, []byte(`{"port":0,"token":"`+planted+`"}`), c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(state, c.mode); err != nil {
				t.Fatal(err)
			}
			if c.other {
				asAnotherUser(t, state, c.mode)
			}
			plant(t, dir, tokenFile, tokens, 0o666)
			for _, f := range []string{"ca.crt", "apiserver.crt", "apiserver.key", "service-account.key"} {
				b, err := os.ReadFile(filepath.Join(first, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			srv, err := Start(t.Context(), Options{DataDir: dir, Progress: os.Stderr})
			if err == nil {
				_ = srv.Stop()
				t.Fatal("Start reused a state file that is not private")
			}
			for _, want := range []string{state, "not private", "use a fresh data directory"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Start: %v\nwant an error containing %q", err, want)
				}
			}
		})
	}
}

func TestStart_warnsAboutABinaryWhoseEtcdTakesAnyClient(t *testing.T) {
	// An older ctrlkit-apiserver (Binary may find one by its Kubernetes
	// version) prints no etcd endpoint: its etcd is plain HTTP.
	bin := filepath.Join(t.TempDir(), "old-ctrlkit-apiserver")
	script := `#!/bin/sh
dir="$2"
printf 'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n' > "$dir/kubeconfig"
echo '{"event":"ready","server":"https://127.0.0.1:1","kubeconfig":"'"$dir"'/kubeconfig","admin":"http://127.0.0.1:1","pid":'$$'}'
exec sleep 600
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	srv, err := Start(t.Context(), Options{Binary: bin, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	_ = srv.Stop() // sleep dies of the SIGTERM: an unclean exit, expected here
	if !strings.Contains(progress.String(), "its etcd takes any local client") {
		t.Errorf("progress = %q, want a warning about the old binary's etcd", progress.String())
	}
}
