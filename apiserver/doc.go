// Package apiserver runs a real Kubernetes API server on loopback for tests,
// examples and the demo: kube-apiserver with an embedded etcd, built from
// ctrlkit's testenv module into one binary, ctrlkit-apiserver.
//
// It is the same server code a production cluster runs, not a fake: RBAC,
// admission, validation, resource versions, pagination, watch bookmarks,
// watch-list streaming and 410 Gone all behave as they do there. No
// scheduler or kubelet runs, so nothing schedules Pods. By default no
// controller-manager runs either, so nothing garbage-collects or finalizes
// namespaces; Options.Controllers runs kube-controller-manager's garbage
// collector and namespace controller in the server's process (owner
// references cascade, a deleted namespace is emptied and goes). No other
// controller runs: a Deployment gets no Pods, a namespace no default
// ServiceAccount.
//
// The package itself does not import kube-apiserver or etcd: it finds or
// builds the binary (see Binary) and runs it as a child process, so ctrlkit's
// users never download k8s.io/kubernetes into their own builds.
//
// When ctrlkit is a dependency, the Go module proxy serves it without the
// nested testenv module. Get the binary once per machine with
//
//	go run github.com/ctrlkit/ctrlkit/cmd/ctrlkit apiserver build
//
// (it fetches testenv at the ctrlkit version your go.mod names and builds it
// into the cache), or install it onto your PATH, stamping the Kubernetes
// version that /version and "kubectl version" report:
//
//	go install -ldflags "-X k8s.io/component-base/version.gitVersion=v1.36.3 \
//	  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36" \
//	  github.com/ctrlkit/ctrlkit/testenv/cmd/ctrlkit-apiserver@VERSION
//
// Binary finds either by its version, without the sources.
//
// What the server offers tests:
//
//   - Start, Stop, and Restart with the same etcd data, address, certificates
//     and token, so existing clients keep working across the restart.
//   - Compact: etcd history up to now is dropped, so requests that reach etcd
//     at an older resource version answer 410 Gone. The API server's watch
//     cache keeps a short history of its own (as in production); start with
//     Options.DisableWatchCache to send every read to etcd.
//   - A fault Proxy that cuts or stalls every connection through it.
//   - Shared, one server per test package, and Namespace, one namespace per test.
//
// Other users of the machine get nothing: every listener is on 127.0.0.1
// and demands credentials (the admin token, or for etcd the API server's
// client certificate), the data folder must belong to the current user and
// be writable by nobody else, and every file written into it is mode 0600.
// docs/security.md lists each promise and its test.
//
// If the server cannot start, Start returns an error quoting its log, and
// Shared.Get fails the test: tests that need the server never skip.
package apiserver
