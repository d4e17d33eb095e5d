package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ctrlkit/ctrlkit/internal/safefile"
)

// Whoever writes a kubeconfig a provider reads chooses what the fleet's
// process connects to and with what: a plugin it runs (exec, auth-provider)
// is code run in the process, and a credential read from a local file
// (tokenFile, client-certificate, client-key) can send the process's own
// credentials to a server of the writer's choice. So a provider takes only
// what it needs: credentials and certificates inline (Cluster API's
// kubeconfig Secrets are so), no plugin unless allowed, and files only
// from a folder no other user can write, read and put inline by the
// provider itself (inlineFiles), so that client-go never reads a file a
// fleet's kubeconfig names.

// ErrUnsafeKubeconfig is the error of a kubeconfig a provider refuses.
var ErrUnsafeKubeconfig = errors.New("fleet: kubeconfig refused")

// kubeconfigPolicy says what a provider accepts in a kubeconfig.
type kubeconfigPolicy struct {
	allowExec bool // exec and auth-provider plugins
}

// restConfig reads kubeconfig b (its current context) under p. It judges
// the file before client-go touches it: building the configuration would
// read the files it names, and a kubeconfig that names one is refused
// (Directory puts its files inline first, inlineFiles).
func (p kubeconfigPolicy) restConfig(b []byte) (*rest.Config, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("no kubeconfig: it is empty")
	}
	cfg, err := clientcmd.Load(b)
	if err != nil {
		return nil, fmt.Errorf("not a kubeconfig (YAML or JSON of kind Config): %w", err)
	}
	auth, cluster, err := current(cfg)
	if err != nil {
		return nil, err
	}
	plugin := auth != nil && (auth.Exec != nil || auth.AuthProvider != nil)
	files := auth != nil && (auth.TokenFile != "" || auth.ClientCertificate != "" || auth.ClientKey != "") ||
		cluster != nil && cluster.CertificateAuthority != ""
	switch {
	case plugin && !p.allowExec:
		return nil, fmt.Errorf("%w: it runs a credential plugin (exec or auth-provider); set AllowExec to allow it", ErrUnsafeKubeconfig)
	case files:
		return nil, fmt.Errorf("%w: it reads credentials or certificates from local files; a provider of this kind takes them inline only",
			ErrUnsafeKubeconfig)
	}
	if plugin && auth.Exec != nil {
		command, err := trustedCommand(auth.Exec.Command)
		switch {
		case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist): // missing, not unsafe: say how to get it
			hint := ""
			if auth.Exec.InstallHint != "" {
				hint = " (" + auth.Exec.InstallHint + ")"
			}
			return nil, fmt.Errorf("fleet: kubeconfig's credential plugin %q: %w%s", auth.Exec.Command, err, hint)
		case err != nil:
			return nil, fmt.Errorf("%w: its credential plugin %q: %v", ErrUnsafeKubeconfig, auth.Exec.Command, err)
		}
		auth.Exec.Command = command
	}
	return clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
}

// trustedCommand finds a credential plugin's command as client-go would
// run it (a name without a slash on PATH, "." on PATH refused) and checks
// that no other user could have planted or swapped it: the file is the
// current user's or root's, no one else can write it, and no folder above
// it lets another user replace it (safefile.Trusted, the rule for the
// binaries package apiserver runs). AllowExec accepts running a plugin,
// not running whatever another user of the machine put in its place. It
// returns the absolute path found, which the configuration then names, so
// that what runs does not change with PATH later.
func trustedCommand(command string) (string, error) {
	path, err := exec.LookPath(command)
	if err != nil {
		return "", err
	}
	if path, err = filepath.Abs(path); err != nil {
		return "", err
	}
	if err := safefile.Trusted(path); err != nil {
		return "", err
	}
	return path, nil
}

// current returns the user and the cluster of cfg's current context (nil
// where the context names none that cfg has, which client-go reports).
func current(cfg *clientcmdapi.Config) (*clientcmdapi.AuthInfo, *clientcmdapi.Cluster, error) {
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil {
		return nil, nil, fmt.Errorf("fleet: kubeconfig has no current context %q", cfg.CurrentContext)
	}
	return cfg.AuthInfos[ctx.AuthInfo], cfg.Clusters[ctx.Cluster], nil
}

// inlineFiles returns kubeconfig b, read from folder dir, with the files
// its current context names (tokenFile, client-certificate, client-key,
// certificate-authority) read and put inline, and the paths it read: a
// relative path is taken from dir, as kubectl takes it from the
// kubeconfig's folder, never from the process's working directory, and
// each file is read as the kubeconfig was (readPrivate: a regular file of
// this user that no other user can write, not through a link, at most
// 1 MiB), so that another user can neither plant nor change one. A plugin
// command given as a relative path (with a slash in it) is likewise made
// relative to dir, and must be such a file too. A file named beside
// inline data of the same thing is refused, as client-go refuses it; a
// tokenFile beside a token wins, as client-go reads it for every request.
// Since the result holds the files' contents, a change to one of them is a
// change to the kubeconfig (Directory's digest): rotated certificates and
// tokens reach the cluster's connection.
func inlineFiles(b []byte, dir string) (out []byte, paths []string, err error) {
	cfg, err := clientcmd.Load(b)
	if err != nil {
		return nil, nil, err
	}
	auth, cluster, err := current(cfg)
	if err != nil {
		return nil, nil, err
	}
	resolve := func(path string) string {
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		paths = append(paths, path)
		return path
	}
	read := func(what, path string, inline bool) ([]byte, error) {
		if inline {
			return nil, fmt.Errorf("%w: it gives %s both inline and as the file %s", ErrUnsafeKubeconfig, what, path)
		}
		data, err := readPrivate(resolve(path))
		if err != nil {
			return nil, fmt.Errorf("fleet: kubeconfig's %s: %w", what, err)
		}
		return data, nil
	}
	check := func(what, path string) (string, error) {
		path = resolve(path)
		f, err := openPrivate(path)
		if err != nil {
			return path, fmt.Errorf("fleet: kubeconfig's %s: %w", what, err)
		}
		return path, f.Close()
	}
	if err := inlineInto(auth, cluster, read, check); err != nil {
		return nil, paths, err
	}
	out, err = clientcmd.Write(*cfg)
	return out, paths, err
}

// inlineInto puts inline the files auth and cluster name, read with read;
// a relative plugin command is checked, and resolved, with check.
func inlineInto(auth *clientcmdapi.AuthInfo, cluster *clientcmdapi.Cluster,
	read func(what, path string, inline bool) ([]byte, error), check func(what, path string) (string, error)) (err error) {
	if cluster != nil && cluster.CertificateAuthority != "" {
		if cluster.CertificateAuthorityData, err = read("certificate-authority", cluster.CertificateAuthority, len(cluster.CertificateAuthorityData) > 0); err != nil {
			return err
		}
		cluster.CertificateAuthority = ""
	}
	if auth == nil {
		return nil
	}
	if auth.ClientCertificate != "" {
		if auth.ClientCertificateData, err = read("client-certificate", auth.ClientCertificate, len(auth.ClientCertificateData) > 0); err != nil {
			return err
		}
		auth.ClientCertificate = ""
	}
	if auth.ClientKey != "" {
		if auth.ClientKeyData, err = read("client-key", auth.ClientKey, len(auth.ClientKeyData) > 0); err != nil {
			return err
		}
		auth.ClientKey = ""
	}
	if auth.TokenFile != "" {
		token, err := read("tokenFile", auth.TokenFile, false)
		if err != nil {
			return err
		}
		auth.Token, auth.TokenFile = strings.TrimSpace(string(token)), ""
	}
	if e := auth.Exec; e != nil && strings.Contains(e.Command, "/") && !filepath.IsAbs(e.Command) {
		e.Command, err = check("exec command", e.Command)
	}
	return err
}

// openPrivate opens the regular file at path if it belongs to this
// process's user and no other user can write it, not through a link.
func openPrivate(path string) (*os.File, error) {
	f, fi, err := safefile.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	if err := private(fi); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// readPrivate reads the file openPrivate opens, at most maxFile bytes.
func readPrivate(path string) ([]byte, error) {
	f, err := openPrivate(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err == nil && len(b) > maxFile {
		err = fmt.Errorf("%w: %s is larger than %d bytes", ErrUnsafeKubeconfig, path, maxFile)
	}
	return b, err
}

// maxFile is the most a provider reads of a kubeconfig, or of a file one
// names; a larger one is refused, not cut.
const maxFile = 1 << 20

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
