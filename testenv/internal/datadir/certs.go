package datadir

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"path/filepath"
	"time"
)

// Files of etcd's mutual TLS, made afresh by WriteEtcdCerts at every start.
// The CA's key is never written anywhere: nobody, ourselves included, can
// sign another certificate that etcd accepts.
const (
	EtcdCAFile         = "etcd-ca.crt"     // PEM CA that signed the two certificates below
	EtcdServerCertFile = "etcd-server.crt" // etcd's serving (and peer) certificate, for 127.0.0.1
	EtcdServerKeyFile  = "etcd-server.key"
	EtcdClientCertFile = "etcd-client.crt" // the API server's client certificate
	EtcdClientKeyFile  = "etcd-client.key"
)

// ca is a certificate authority held in memory only.
type ca struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
}

func newCA(name string, now time.Time) (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &ca{cert: cert, der: der, key: key}, nil
}

// issue signs a leaf certificate from tmpl (its key and validity are set
// here) and writes it and its key, mode 0600, to certFile and keyFile.
func (c *ca) issue(tmpl *x509.Certificate, serial int64, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = c.cert.NotBefore
	tmpl.NotAfter = c.cert.NotAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return errors.Join(
		writePEM(certFile, "CERTIFICATE", der),
		writePEM(keyFile, "EC PRIVATE KEY", keyDER),
	)
}

// writeServingCerts makes a CA and a serving certificate for the loopback
// addresses and the in-cluster names of the kubernetes Service.
func writeServingCerts(dir string) error {
	c, err := newCA("ctrlkit-apiserver-ca", time.Now())
	if err != nil {
		return err
	}
	leaf := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}
	if err := c.issue(leaf, 2, filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, CAFile), "CERTIFICATE", c.der)
}

// WriteEtcdCerts makes a new CA for etcd and signs with it etcd's serving
// certificate (also its peer certificate, hence client use too) and the API
// server's client certificate, then forgets the CA's key. etcd trusts only
// this CA, so only a holder of one of these two keys (files readable by us
// alone) can talk to it.
func WriteEtcdCerts(dir string) error {
	c, err := newCA("ctrlkit-etcd-ca", time.Now())
	if err != nil {
		return err
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "ctrlkit-etcd"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
	}
	client := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver-etcd-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return errors.Join(
		c.issue(server, 2, filepath.Join(dir, EtcdServerCertFile), filepath.Join(dir, EtcdServerKeyFile)),
		c.issue(client, 3, filepath.Join(dir, EtcdClientCertFile), filepath.Join(dir, EtcdClientKeyFile)),
		writePEM(filepath.Join(dir, EtcdCAFile), "CERTIFICATE", c.der),
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
	return WritePrivate(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}
