//go:build !race

package main

import (
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ctrlkit/ctrlkit/testenv/internal/datadir"
)

// writeKubeconfig writes an admin kubeconfig for server, mode 0600 and
// atomically (see datadir.WritePrivate): a reader never sees half a file,
// and a file planted at the path or a temporary name gets none of it.
func writeKubeconfig(path, server string, st datadir.State) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["ctrlkit"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: st.CA}
	cfg.AuthInfos[datadir.AdminUser] = &clientcmdapi.AuthInfo{Token: st.Token}
	cfg.Contexts["ctrlkit"] = &clientcmdapi.Context{Cluster: "ctrlkit", AuthInfo: datadir.AdminUser, Namespace: "default"}
	cfg.CurrentContext = "ctrlkit"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return datadir.WritePrivate(path, b)
}
