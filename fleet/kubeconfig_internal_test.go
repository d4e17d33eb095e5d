package fleet

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeconfig returns a kubeconfig of one context whose user is auth.
func kubeconfig(t *testing.T, auth *clientcmdapi.AuthInfo) []byte {
	t.Helper()
	return kubeconfigOf(t, &clientcmdapi.Cluster{}, auth)
}

// kubeconfigOf returns a kubeconfig of one context whose cluster (its
// server set here) is cluster and whose user is auth.
func kubeconfigOf(t *testing.T, cluster *clientcmdapi.Cluster, auth *clientcmdapi.AuthInfo) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cluster.Server = "https://127.0.0.1:1"
	cfg.Clusters["c"], cfg.AuthInfos["u"] = cluster, auth
	cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "x"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A provider's kubeconfig may not run a plugin unless allowed, nor have
// client-go read credentials from local files (Directory puts its files
// inline first).
func TestKubeconfigPolicy_refusesPluginsAndLocalFilesUnlessAllowed(t *testing.T) {
	inline := kubeconfig(t, &clientcmdapi.AuthInfo{Token: "t"})
	tokenFile := kubeconfig(t, &clientcmdapi.AuthInfo{TokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token"})
	certFile := kubeconfig(t, &clientcmdapi.AuthInfo{ClientCertificate: "/etc/cert.pem", ClientKey: "/etc/key.pem"})
	exec := kubeconfig(t, &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "/bin/sh", Args: []string{"-c", "id"},
		APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}})
	for _, tc := range []struct {
		name   string
		policy kubeconfigPolicy
		b      []byte
		ok     bool
	}{
		{"inline, Secrets", kubeconfigPolicy{}, inline, true},
		{"token file, Secrets", kubeconfigPolicy{}, tokenFile, false},
		{"certificate files, Secrets", kubeconfigPolicy{}, certFile, false},
		{"exec", kubeconfigPolicy{}, exec, false},
		{"exec allowed", kubeconfigPolicy{allowExec: true}, exec, true},
	} {
		_, err := tc.policy.restConfig(tc.b)
		if tc.ok && errors.Is(err, ErrUnsafeKubeconfig) { // (a missing file is client-go's error, not a refusal)
			t.Errorf("%s: refused: %v", tc.name, err)
		}
		if !tc.ok && !errors.Is(err, ErrUnsafeKubeconfig) {
			t.Errorf("%s: %v, want ErrUnsafeKubeconfig", tc.name, err)
		}
	}
}

// A plugin allowed (AllowExec) still runs only from a file no other user
// could have planted or swapped (found by a probe: an absolute command
// owned by another user, writable by all, in a folder writable by all,
// ran), whether named by its path or found on PATH; the configuration
// then names the file found.
func TestKubeconfigPolicy_runsOnlyAPluginNoOtherUserCouldHavePlanted(t *testing.T) {
	allowed := kubeconfigPolicy{allowExec: true}
	withCommand := func(command string) []byte {
		return kubeconfig(t, &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: command,
			APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}})
	}
	plugin := func(dir string, dirMode, mode os.FileMode) string {
		t.Helper()
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "get-token")
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		for p, m := range map[string]os.FileMode{dir: dirMode, path: mode} {
			if err := os.Chmod(p, m); err != nil { // past the umask
				t.Fatal(err)
			}
		}
		return path
	}
	root := t.TempDir()
	mine := plugin(filepath.Join(root, "mine"), 0o700, 0o700)
	writable := plugin(filepath.Join(root, "writable"), 0o700, 0o777)
	inOpenFolder := plugin(filepath.Join(root, "open"), 0o777, 0o755)

	cfg, err := allowed.restConfig(withCommand(mine))
	if err != nil || cfg.ExecProvider == nil || cfg.ExecProvider.Command != mine {
		t.Errorf("a plugin of this user's: %v, command %v; want it run from %s", err, cfg, mine)
	}
	for name, command := range map[string]string{"writable by others": writable, "in a folder others can write": inOpenFolder} {
		if _, err := allowed.restConfig(withCommand(command)); !errors.Is(err, ErrUnsafeKubeconfig) {
			t.Errorf("a plugin %s: %v, want ErrUnsafeKubeconfig", name, err)
		}
	}
	t.Setenv("PATH", filepath.Dir(inOpenFolder)+string(os.PathListSeparator)+filepath.Dir(mine))
	if _, err := allowed.restConfig(withCommand("get-token")); !errors.Is(err, ErrUnsafeKubeconfig) {
		t.Errorf("a plugin found on PATH in a folder others can write: %v, want ErrUnsafeKubeconfig", err)
	}
	t.Setenv("PATH", filepath.Dir(mine))
	if cfg, err := allowed.restConfig(withCommand("get-token")); err != nil || cfg.ExecProvider.Command != mine {
		t.Errorf("a plugin found on PATH: %v, %v; want it pinned to %s", err, cfg, mine)
	}
	// A plugin not installed is missing, not unsafe: the error says so,
	// with the kubeconfig's hint.
	missing := kubeconfig(t, &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "no-such-plugin",
		APIVersion: "client.authentication.k8s.io/v1", InstallHint: "install it with your package manager"}})
	if _, err := allowed.restConfig(missing); err == nil || errors.Is(err, ErrUnsafeKubeconfig) ||
		!strings.Contains(err.Error(), "install it with your package manager") {
		t.Errorf("a plugin not installed: %v, want an error with its install hint, not ErrUnsafeKubeconfig", err)
	}
}

// What is not a kubeconfig at all is refused saying so, not with the
// decoder's words alone.
func TestKubeconfigPolicy_saysWhenWhatItReadsIsNoKubeconfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty (no value key)", nil, "no kubeconfig: it is empty"},
		{"a string", []byte("hello"), "not a kubeconfig"},
		{"another kind", []byte(`{"apiVersion": "v1", "kind": "ConfigMap"}`), "not a kubeconfig"},
	} {
		if _, err := (kubeconfigPolicy{}).restConfig(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// A Directory's kubeconfig names its files relative to its own folder:
// inlineFiles reads them there, as the kubeconfig was read (the user's, no
// one else's to write, no link), never from the working directory, where
// another user may have planted a CA of their own; client-go then reads no
// file.
func TestInlineFiles_readsTheNamedFilesFromTheKubeconfigsFolderOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "clusters")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "ca.crt"), "the cluster's CA", 0o600)
	write(filepath.Join(dir, "token"), "the token\n", 0o600)
	write(filepath.Join(dir, "tls.crt"), "the client certificate", 0o600)
	write(filepath.Join(dir, "tls.key"), "the client key", 0o600)
	cwd := t.TempDir()
	write(filepath.Join(cwd, "ca.crt"), "a planted CA", 0o666)
	t.Chdir(cwd)

	named := func(cluster *clientcmdapi.Cluster, auth *clientcmdapi.AuthInfo) []byte {
		return kubeconfigOf(t, cluster, auth)
	}
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(dir, "bin", "get-token"), "#!/bin/sh\n", 0o700)
	b, paths, err := inlineFiles(named(&clientcmdapi.Cluster{CertificateAuthority: "ca.crt"},
		&clientcmdapi.AuthInfo{TokenFile: "token", ClientCertificate: filepath.Join(dir, "tls.crt"), ClientKey: "tls.key",
			Exec: &clientcmdapi.ExecConfig{Command: "bin/get-token", APIVersion: "client.authentication.k8s.io/v1"}}), dir)
	if err != nil {
		t.Fatalf("inlineFiles: %v", err)
	}
	if want := []string{filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"),
		filepath.Join(dir, "token"), filepath.Join(dir, "bin/get-token")}; !slices.Equal(paths, want) {
		t.Errorf("paths read %q, want %q", paths, want)
	}
	cfg, err := clientcmd.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	cluster, auth := cfg.Clusters["c"], cfg.AuthInfos["u"]
	if string(cluster.CertificateAuthorityData) != "the cluster's CA" || cluster.CertificateAuthority != "" {
		t.Errorf("certificate-authority: %q from file %q; want the folder's CA, inline", cluster.CertificateAuthorityData, cluster.CertificateAuthority)
	}
	if auth.Token != "the token" || auth.TokenFile != "" {
		t.Errorf("token %q, tokenFile %q; want the folder's token, inline", auth.Token, auth.TokenFile)
	}
	if string(auth.ClientCertificateData) != "the client certificate" || string(auth.ClientKeyData) != "the client key" ||
		auth.ClientCertificate != "" || auth.ClientKey != "" {
		t.Errorf("client certificate %q (%q), key %q (%q); want both inline", auth.ClientCertificateData, auth.ClientCertificate,
			auth.ClientKeyData, auth.ClientKey)
	}
	if want := filepath.Join(dir, "bin/get-token"); auth.Exec.Command != want {
		t.Errorf("plugin command %q, want %q (the folder's, not the working directory's)", auth.Exec.Command, want)
	}
	auth.Exec = nil
	if b, err = clientcmd.Write(*cfg); err != nil {
		t.Fatal(err)
	}
	rc, err := kubeconfigPolicy{}.restConfig(b)
	if err != nil {
		t.Fatalf("restConfig of the inlined kubeconfig: %v", err)
	}
	if string(rc.CAData) != "the cluster's CA" || rc.CAFile != "" || rc.BearerToken != "the token" || rc.BearerTokenFile != "" {
		t.Errorf("rest config: CA %q (file %q), token %q (file %q)", rc.CAData, rc.CAFile, rc.BearerToken, rc.BearerTokenFile)
	}

	// A named file changed is a kubeconfig changed: rotation reaches the cluster.
	before, _, _ := inlineFiles(named(&clientcmdapi.Cluster{CertificateAuthority: "ca.crt"}, &clientcmdapi.AuthInfo{Token: "t"}), dir)
	write(filepath.Join(dir, "ca.crt"), "the cluster's next CA", 0o600)
	after, _, _ := inlineFiles(named(&clientcmdapi.Cluster{CertificateAuthority: "ca.crt"}, &clientcmdapi.AuthInfo{Token: "t"}), dir)
	if bytes.Equal(before, after) {
		t.Error("a rotated CA file left the kubeconfig the same")
	}

	// Refused: a named file others can write, a link, a file beside inline
	// data of the same thing, a file that is not there.
	write(filepath.Join(dir, "shared.crt"), "writable by others", 0o666)
	if err := os.Symlink(filepath.Join(cwd, "ca.crt"), filepath.Join(dir, "link.crt")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		b       []byte
		refused bool // ErrUnsafeKubeconfig, beside failing
	}{
		{"others can write it", named(&clientcmdapi.Cluster{CertificateAuthority: "shared.crt"}, &clientcmdapi.AuthInfo{}), true},
		{"a link", named(&clientcmdapi.Cluster{CertificateAuthority: "link.crt"}, &clientcmdapi.AuthInfo{}), false},
		{"inline too", named(&clientcmdapi.Cluster{CertificateAuthority: "ca.crt", CertificateAuthorityData: []byte("x")}, &clientcmdapi.AuthInfo{}), true},
		{"missing", named(&clientcmdapi.Cluster{}, &clientcmdapi.AuthInfo{ClientKey: "nothing.key"}), false},
	} {
		_, _, err := inlineFiles(tc.b, dir)
		if err == nil || tc.refused && !errors.Is(err, ErrUnsafeKubeconfig) {
			t.Errorf("%s: %v, want it refused", tc.name, err)
		}
	}

	// A tokenFile beside a token wins, as client-go reads the file for
	// every request.
	b, _, err = inlineFiles(named(&clientcmdapi.Cluster{}, &clientcmdapi.AuthInfo{Token: "stale", TokenFile: "token"}), dir)
	if cfg, lerr := clientcmd.Load(b); err != nil || lerr != nil || cfg.AuthInfos["u"].Token != "the token" || cfg.AuthInfos["u"].TokenFile != "" {
		t.Errorf("a token beside a tokenFile: %v, %v; want the file's token, inline", err, lerr)
	}
}

// A Directory reads its folder every second: what a kubeconfig makes is
// kept while it and the files it names are as they were, and made again
// when one changes.
func TestInlinedFiles_makesAKubeconfigAgainOnlyWhenWhatItReadChanged(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-time.Minute)
	if err := os.Chtimes(ca, long, long); err != nil { // not changed just now: its result may be kept
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", CertificateAuthority: "ca.crt"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "x"
	kc, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	cache := inlinedFiles{}
	first, err := cache.inline("c", kc, dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := cache.inline("c", kc, dir)
	if err != nil || &again[0] != &first[0] {
		t.Error("an unchanged kubeconfig was made again")
	}
	if err := os.WriteFile(ca, []byte("two, rotated"), 0o600); err != nil {
		t.Fatal(err)
	}
	rotated, err := cache.inline("c", kc, dir)
	if err != nil || bytes.Equal(rotated, first) || !bytes.Contains(rotated, []byte(base64.StdEncoding.EncodeToString([]byte("two, rotated")))) {
		t.Errorf("a rotated CA file was not read again: %v", err)
	}
	if next, _ := cache.inline("c", kc, dir); &next[0] == &rotated[0] {
		t.Error("a file changed just now was cached: a change while it was read could go unseen")
	}

	// Refused: a named file larger than a provider reads; an exec command
	// others can write.
	big := filepath.Join(dir, "big.crt")
	if err := os.WriteFile(big, make([]byte, maxFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Clusters["c"].CertificateAuthority = "big.crt"
	kc, _ = clientcmd.Write(*cfg)
	if _, _, err := inlineFiles(kc, dir); !errors.Is(err, ErrUnsafeKubeconfig) {
		t.Errorf("a named file over %d bytes: %v, want it refused", maxFile, err)
	}
	plugin := filepath.Join(dir, "plugin")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\n"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(plugin, 0o777); err != nil {
		t.Fatal(err)
	}
	cfg.Clusters["c"].CertificateAuthority = ""
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "./plugin", APIVersion: "client.authentication.k8s.io/v1"}}
	kc, _ = clientcmd.Write(*cfg)
	if _, _, err := inlineFiles(kc, dir); !errors.Is(err, ErrUnsafeKubeconfig) {
		t.Errorf("an exec command others can write: %v, want it refused", err)
	}
}
