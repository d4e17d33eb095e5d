// Package datadir manages what ctrlkit-apiserver keeps in its data directory
// besides etcd's own files: a CA and serving certificate for the loopback
// addresses, the service-account signing key, the admin bearer token and the
// secure port. Everything is created on first use and reused afterwards, so a
// client configured before a restart still reaches and trusts the server.
package datadir

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Files in the data directory. All are created on first use and reused.
const (
	stateFile = "ctrlkit-apiserver.json"
	CAFile    = "ca.crt"              // PEM CA that signed CertFile
	CertFile  = "apiserver.crt"       // PEM serving certificate
	KeyFile   = "apiserver.key"       // PEM key of CertFile
	SAKeyFile = "service-account.key" // PEM RSA key that signs service-account tokens
	TokenFile = "tokens.csv"          // kube-apiserver --token-auth-file
)

// AdminUser is the identity behind the generated token; it is in the
// system:masters group.
const AdminUser = "ctrlkit-admin"

// State is what must survive a restart with the same data directory.
type State struct {
	Port  int    `json:"port"`
	Token string `json:"token"`
	CA    []byte `json:"-"` // PEM, read from CAFile
}

// Load reads the state of the data directory dir, creating the certificates,
// keys and token on first use. A non-zero port overrides the remembered one;
// with none remembered, a free loopback port is chosen and remembered.
func Load(dir string, port int) (State, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return State{}, err
	}
	var st State
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &st); err != nil {
			return State{}, fmt.Errorf("read %s: %w", stateFile, err)
		}
	case errors.Is(err, os.ErrNotExist):
		if st, err = create(dir); err != nil {
			return State{}, err
		}
	default:
		return State{}, err
	}
	if port != 0 {
		st.Port = port
	}
	if st.Port == 0 {
		if st.Port, err = FreePort(); err != nil {
			return State{}, err
		}
	}
	if st.CA, err = os.ReadFile(filepath.Join(dir, CAFile)); err != nil {
		return State{}, err
	}
	b, err = json.Marshal(st)
	if err != nil {
		return State{}, err
	}
	return st, os.WriteFile(filepath.Join(dir, stateFile), b, 0o600)
}

func create(dir string) (State, error) {
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return State{}, err
	}
	st := State{Token: hex.EncodeToString(tok)}
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", st.Token, AdminUser, AdminUser)
	if err := os.WriteFile(filepath.Join(dir, TokenFile), []byte(line), 0o600); err != nil {
		return State{}, err
	}
	if err := writeServingCerts(dir); err != nil {
		return State{}, err
	}
	return st, writeServiceAccountKey(dir)
}

// writeServingCerts makes a CA and a serving certificate for the loopback
// addresses and the in-cluster names of the kubernetes Service.
func writeServingCerts(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ctrlkit-apiserver-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return errors.Join(
		writePEM(filepath.Join(dir, CAFile), "CERTIFICATE", caDER),
		writePEM(filepath.Join(dir, CertFile), "CERTIFICATE", der),
		writePEM(filepath.Join(dir, KeyFile), "EC PRIVATE KEY", keyDER),
	)
}

func writeServiceAccountKey(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, SAKeyFile), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// HTTPClient returns a client that trusts the generated CA only.
func (st State) HTTPClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(st.CA) {
		return nil, errors.New("no certificate in " + CAFile)
	}
	return &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}, nil
}

// Get sends a GET with the admin token and returns an error unless the
// answer is 200 OK.
func (st State) Get(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+st.Token)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
