package fleet

import (
	"errors"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeconfig returns a kubeconfig of one context whose user is auth.
func kubeconfig(t *testing.T, auth *clientcmdapi.AuthInfo) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.AuthInfos["u"] = auth
	cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "x"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A provider's kubeconfig may not run a plugin unless allowed, nor read
// credentials from local files when it comes from a Secret.
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
		{"token file, Directory", kubeconfigPolicy{allowFiles: true}, tokenFile, true},
		{"exec, Directory", kubeconfigPolicy{allowFiles: true}, exec, false},
		{"exec, Secrets", kubeconfigPolicy{}, exec, false},
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
