// Package datadir manages what ctrlkit-apiserver keeps in its data directory
// besides etcd's own files: a CA and serving certificate for the loopback
// addresses, the service-account signing key, the admin bearer token, the
// secure port, and etcd's mutual-TLS certificates. Everything but the etcd
// certificates is created on first use and reused afterwards, so a client
// configured before a restart still reaches and trusts the server.
//
// The directory and every file in it are private to the current user: see
// Prepare for the rules and the errors that name their fix.
package datadir

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	Dir   string `json:"-"` // the data directory, absolute and with symbolic links resolved
}

// Load prepares the data directory dir (see Prepare) and reads its state,
// creating the certificates, keys and token on first use; etcd's
// certificates are made afresh every time. A non-zero port overrides the
// remembered one; with none remembered, a free loopback port is chosen and
// remembered. A state, token or key file that is not private to the current
// user is refused, never reused.
func Load(dir string, port int) (State, error) {
	dir, err := Prepare(dir)
	if err != nil {
		return State{}, err
	}
	st := State{Dir: dir}
	b, err := readPrivate(filepath.Join(dir, stateFile))
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &st); err != nil {
			return State{}, fmt.Errorf("read %s: %w", stateFile, err)
		}
		if err := checkReused(dir); err != nil {
			return State{}, err
		}
	case errors.Is(err, os.ErrNotExist):
		if st.Token, err = create(dir); err != nil {
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
	if st.CA, err = readPrivate(filepath.Join(dir, CAFile)); err != nil {
		return State{}, err
	}
	if err := WriteEtcdCerts(dir); err != nil {
		return State{}, err
	}
	b, err = json.Marshal(st)
	if err != nil {
		return State{}, err
	}
	return st, WritePrivate(filepath.Join(dir, stateFile), b)
}

// checkReused checks the files that kube-apiserver will read on its own.
func checkReused(dir string) error {
	var errs []error
	for _, f := range []string{CertFile, KeyFile, SAKeyFile, TokenFile} {
		errs = append(errs, checkPrivate(filepath.Join(dir, f)))
	}
	return errors.Join(errs...)
}

// create makes the token, certificates and keys, and returns the token.
func create(dir string) (string, error) {
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return "", err
	}
	token := hex.EncodeToString(tok)
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", token, AdminUser, AdminUser)
	if err := WritePrivate(filepath.Join(dir, TokenFile), []byte(line)); err != nil {
		return "", err
	}
	if err := writeServingCerts(dir); err != nil {
		return "", err
	}
	return token, writeServiceAccountKey(dir)
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
