//go:build !race

package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"time"

	"github.com/ctrlkit/ctrlkit/testenv/internal/datadir"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// etcdServer is the in-process etcd the API server stores its data in.
type etcdServer struct {
	e         *embed.Etcd
	clientURL string
}

// startEtcd starts a single-member etcd on free loopback ports with its data
// in DATA-DIR/etcd. Both ports speak TLS and demand a client certificate
// signed by the etcd CA of the data directory (see datadir.WriteEtcdCerts):
// other local users can connect but are refused in the handshake, so the
// API server's authentication and RBAC cannot be bypassed through etcd.
// fsync is off: this is a test server, and a restart of the process (not the
// machine) keeps everything the OS has already been handed.
func startEtcd(dataDir string, apiserverPort int) (*etcdServer, error) {
	clientPort, err := freePortBut(apiserverPort)
	if err != nil {
		return nil, err
	}
	peerPort, err := freePortBut(apiserverPort, clientPort)
	if err != nil {
		return nil, err
	}
	cu := url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	pu := url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	tlsInfo := transport.TLSInfo{
		CertFile:       filepath.Join(dataDir, datadir.EtcdServerCertFile),
		KeyFile:        filepath.Join(dataDir, datadir.EtcdServerKeyFile),
		TrustedCAFile:  filepath.Join(dataDir, datadir.EtcdCAFile),
		ClientCertAuth: true,
	}

	cfg := embed.NewConfig()
	cfg.Name = "ctrlkit"
	cfg.Dir = filepath.Join(dataDir, "etcd")
	cfg.ClientTLSInfo = tlsInfo
	cfg.PeerTLSInfo = tlsInfo
	cfg.ListenClientUrls = []url.URL{cu}
	cfg.AdvertiseClientUrls = []url.URL{cu}
	cfg.ListenPeerUrls = []url.URL{pu}
	cfg.AdvertisePeerUrls = []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd was not ready within 60s")
	}
	return &etcdServer{e: e, clientURL: cu.String()}, nil
}

func (s *etcdServer) close() { s.e.Close() }

// freePortBut returns a free loopback port other than those given: the
// ports already picked are free until their servers bind them, and the
// kernel may hand a port just probed out again (etcd once took the API
// server's, which then failed with "address already in use").
func freePortBut(picked ...int) (int, error) {
	for range 20 {
		p, err := datadir.FreePort()
		if err != nil {
			return 0, err
		}
		if !slices.Contains(picked, p) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port other than %v", picked)
}

// compact compacts etcd's history up to its current revision and returns
// that revision: afterwards every older resource version is gone.
func (s *etcdServer) compact(ctx context.Context) (int64, error) {
	rev := s.e.Server.KV().Rev()
	_, err := s.e.Server.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true})
	return rev, err
}

// adminServer serves POST /compact on a loopback port, for tests.
type adminServer struct {
	srv *http.Server
	url string
}

func startAdmin(etcd *etcdServer, token string, apiserverPort int) (*adminServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	for tries := 0; err == nil && l.Addr().(*net.TCPAddr).Port == apiserverPort && tries < 20; tries++ {
		// The API server's port is free until it binds it: not ours.
		held := l
		l, err = net.Listen("tcp", "127.0.0.1:0")
		held.Close()
	}
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /compact", func(w http.ResponseWriter, r *http.Request) {
		want := "Bearer " + token
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(want)) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		rev, err := etcd.compact(r.Context())
		if err != nil {
			http.Error(w, "compact: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int64{"revision": rev})
	})
	a := &adminServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, url: "http://" + l.Addr().String()}
	go func() { _ = a.srv.Serve(l) }()
	return a, nil
}

func (a *adminServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
}
