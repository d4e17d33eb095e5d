package fleet

import (
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/internal/safefile"
)

// Whoever writes a kubeconfig a provider reads chooses what the fleet's
// process connects to and with what: a plugin it runs (exec, auth-provider)
// is code run in the process, and a credential read from a local file
// (tokenFile, client-certificate, client-key) can send the process's own
// credentials to a server of the writer's choice. So a provider takes only
// what it needs: credentials and certificates inline (Cluster API's
// kubeconfig Secrets are so), no plugin unless allowed, and files only
// from a folder no other user can write.

// ErrUnsafeKubeconfig is the error of a kubeconfig a provider refuses.
var ErrUnsafeKubeconfig = errors.New("fleet: kubeconfig refused")

// kubeconfigPolicy says what a provider accepts in a kubeconfig.
type kubeconfigPolicy struct {
	allowExec  bool // exec and auth-provider plugins
	allowFiles bool // credentials and certificates read from local files
}

// restConfig reads kubeconfig b (its current context) under p. It judges
// the file before client-go touches it: building the configuration reads
// the files it names.
func (p kubeconfigPolicy) restConfig(b []byte) (*rest.Config, error) {
	cfg, err := clientcmd.Load(b)
	if err != nil {
		return nil, err
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil {
		return nil, fmt.Errorf("fleet: kubeconfig has no current context %q", cfg.CurrentContext)
	}
	auth, cluster := cfg.AuthInfos[ctx.AuthInfo], cfg.Clusters[ctx.Cluster]
	plugin := auth != nil && (auth.Exec != nil || auth.AuthProvider != nil)
	files := auth != nil && (auth.TokenFile != "" || auth.ClientCertificate != "" || auth.ClientKey != "") ||
		cluster != nil && cluster.CertificateAuthority != ""
	switch {
	case plugin && !p.allowExec:
		return nil, fmt.Errorf("%w: it runs a credential plugin (exec or auth-provider); set AllowExec to allow it", ErrUnsafeKubeconfig)
	case files && !p.allowFiles:
		return nil, fmt.Errorf("%w: it reads credentials or certificates from local files; a provider of this kind takes them inline only",
			ErrUnsafeKubeconfig)
	}
	return clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
}

// readPrivate reads the regular file at path if it belongs to this
// process's user and no other user can write it.
func readPrivate(path string) ([]byte, error) {
	f, fi, err := safefile.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := private(fi); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// private fails unless fi belongs to this process's user and no other user
// can write it.
func private(fi os.FileInfo) error {
	if owner := safefile.Owner(fi); owner != os.Getuid() {
		return fmt.Errorf("%w: owned by uid %d, not this process's user", ErrUnsafeKubeconfig, owner)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: other users can write it (mode %s)", ErrUnsafeKubeconfig, fi.Mode().Perm())
	}
	return nil
}
