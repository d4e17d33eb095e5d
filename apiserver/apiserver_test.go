package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

var env Shared

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

func clientset(t *testing.T, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": name}}
}

// createConfigMaps creates n ConfigMaps named prefix-0000... with 8 writers.
func createConfigMaps(t *testing.T, cs *kubernetes.Clientset, ns, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				_, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), configMap(fmt.Sprintf("%s-%04d", prefix, i)), metav1.CreateOptions{})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
}

// nextEvent returns the next watch event, failing t after a deadline.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed while an event was expected")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event within 30s")
	}
	panic("unreachable")
}

// expectEvents reads events, skipping bookmarks, and checks their types and names in order.
func expectEvents(t *testing.T, w watch.Interface, want ...string) (lastRV string) {
	t.Helper()
	for _, wantEv := range want {
		ev := nextEvent(t, w)
		for ev.Type == watch.Bookmark {
			ev = nextEvent(t, w)
		}
		if ev.Type == watch.Error {
			t.Fatalf("watch error while waiting for %s: %v", wantEv, apierrors.FromObject(ev.Object))
		}
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok {
			t.Fatalf("event %s carries %T, want *ConfigMap", ev.Type, ev.Object)
		}
		if got := string(ev.Type) + " " + cm.Name; got != wantEv {
			t.Fatalf("event = %q, want %q", got, wantEv)
		}
		lastRV = cm.ResourceVersion
	}
	return lastRV
}

func TestServer_paginatedListOf1000ConfigMaps(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	cs := clientset(t, srv.Config())
	createConfigMaps(t, cs, ns, "cm", 1000)

	seen := map[string]bool{}
	pages, opts := 0, metav1.ListOptions{Limit: 100}
	for {
		list, err := cs.CoreV1().ConfigMaps(ns).List(t.Context(), opts)
		if err != nil {
			t.Fatalf("list page %d: %v", pages+1, err)
		}
		pages++
		if len(list.Items) > 100 {
			t.Fatalf("page %d has %d items, limit was 100", pages, len(list.Items))
		}
		for _, cm := range list.Items {
			if seen[cm.Name] {
				t.Fatalf("%s listed twice", cm.Name)
			}
			seen[cm.Name] = true
		}
		if list.Continue == "" {
			break
		}
		if rem := list.RemainingItemCount; rem == nil || int(*rem) != 1000-len(seen) {
			t.Errorf("page %d: remainingItemCount = %v, want %d", pages, rem, 1000-len(seen))
		}
		opts.Continue = list.Continue
	}
	if len(seen) != 1000 || pages != 10 {
		t.Fatalf("listed %d ConfigMaps in %d pages, want 1000 in 10", len(seen), pages)
	}
}

func TestServer_watchFromAResourceVersionSeesEveryLaterChangeInOrder(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	cs := clientset(t, srv.Config())
	cms := cs.CoreV1().ConfigMaps(ns)
	if _, err := cms.Create(t.Context(), configMap("before"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := cms.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Changes after the list, made before the watch starts.
	a, err := cms.Create(t.Context(), configMap("a"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.Data["k"] = "changed"
	if _, err := cms.Update(t.Context(), a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(t.Context(), "before", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := cms.Watch(t.Context(), metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	expectEvents(t, w, "ADDED a", "MODIFIED a", "DELETED before")
}

// TestServer_restartResumesWatchesAndCompactionAnswersGone runs a server of
// its own, since it restarts it and compacts its etcd. The watch cache is off:
// a restarted kube-apiserver's watch cache starts at the resource version it
// lists at, so with the cache on (as in production) a watch from an older
// resource version answers 410 "too old resource version" instead of
// resuming. With the cache off, watches reach etcd, whose history survives
// the restart until it is compacted.
func TestServer_restartResumesWatchesAndCompactionAnswersGone(t *testing.T) {
	srv := StartForTest(t, Options{DisableWatchCache: true})
	ns := srv.Namespace(t)
	cms := clientset(t, srv.Config()).CoreV1().ConfigMaps(ns)
	created, err := cms.Create(t.Context(), configMap("before-restart"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lastRV := created.ResourceVersion

	if err := srv.Restart(t.Context()); err != nil {
		t.Fatalf("restart: %v", err)
	}

	// The client configured before the restart still works, and a watch
	// from the last resource version seen before it resumes.
	if _, err := cms.Create(t.Context(), configMap("after-restart"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create after restart with the old client: %v", err)
	}
	w, err := cms.Watch(t.Context(), metav1.ListOptions{ResourceVersion: lastRV})
	if err != nil {
		t.Fatalf("watch from %s after restart: %v", lastRV, err)
	}
	rv := expectEvents(t, w, "ADDED after-restart")
	w.Stop()

	rev, err := srv.Compact(t.Context())
	if err != nil {
		t.Fatalf("compact: %v", err)
	}
	if rev < mustAtoi(t, rv) {
		t.Fatalf("compacted at revision %d, before the last write %s", rev, rv)
	}

	t.Run("a list at a compacted resource version answers 410", func(t *testing.T) {
		_, err := cms.List(t.Context(), metav1.ListOptions{ResourceVersion: lastRV, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("err = %v, want 410 Gone", err)
		}
	})
	t.Run("a watch from a compacted resource version answers 410", func(t *testing.T) {
		w, err := cms.Watch(t.Context(), metav1.ListOptions{ResourceVersion: lastRV})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return
			}
			t.Fatalf("watch: %v", err)
		}
		defer w.Stop()
		ev := nextEvent(t, w)
		if err := apierrors.FromObject(ev.Object); ev.Type != watch.Error || !(apierrors.IsResourceExpired(err) || apierrors.IsGone(err)) {
			t.Fatalf("first event = %s %v, want an Error event with 410 Gone", ev.Type, err)
		}
	})
}

func TestProxy_cutEndsWatchesWithAnErrorAndStallTimesRequestsOut(t *testing.T) {
	// The shared server and client-go's cached transport for it outlive this
	// test; what must not outlive it is the proxy and its connections.
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	p, err := srv.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cfg := p.Config()
	cfg.Timeout = 2 * time.Second // bounds plain requests; watches are long-running
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	cms := cs.CoreV1().ConfigMaps(ns)

	t.Run("cut ends an open watch", func(t *testing.T) {
		w, err := cms.Watch(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if _, err := cms.Create(t.Context(), configMap("seen"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		expectEvents(t, w, "ADDED seen")
		if n := p.Cut(); n == 0 {
			t.Fatal("Cut found no open connection")
		}
		for range w.ResultChan() { // client-go ends a watch on a lost connection by closing it
		}
		if _, err := cms.Get(t.Context(), "seen", metav1.GetOptions{}); err != nil {
			t.Fatalf("get after cut (new connection): %v", err)
		}
	})

	t.Run("cut fails a streaming read with a connection error", func(t *testing.T) {
		body, err := cs.CoreV1().RESTClient().Get().Namespace(ns).Resource("configmaps").
			Param("watch", "true").Timeout(0).Stream(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer body.Close()
		read := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, body)
			read <- err
		}()
		if n := p.Cut(); n == 0 {
			t.Fatal("Cut found no open connection")
		}
		select {
		case err := <-read:
			if err == nil {
				t.Fatal("stream ended cleanly after a cut; want a connection error")
			}
			t.Logf("client error after cut: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("stream still open 30s after the cut")
		}
	})

	t.Run("stall times requests out until resume", func(t *testing.T) {
		p.Stall()
		_, err := cms.Get(t.Context(), "seen", metav1.GetOptions{})
		p.Resume()
		var netErr net.Error
		if err == nil || !(errors.As(err, &netErr) && netErr.Timeout() || strings.Contains(err.Error(), "Timeout")) {
			t.Fatalf("get while stalled: err = %v, want a client timeout", err)
		}
		t.Logf("get while stalled: %v", err)
		p.Cut() // drop the connection that carried the timed-out request
		if _, err := cms.Get(t.Context(), "seen", metav1.GetOptions{}); err != nil {
			t.Fatalf("get after resume: %v", err)
		}
	})
}

func TestStart_failsWithTheCauseWhenTheBinaryExitsEarly(t *testing.T) {
	_, err := Start(t.Context(), Options{Binary: "/bin/false", StartTimeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Fatalf("err = %v, want it to say the server exited before it was ready", err)
	}
}

func TestStart_honoursTheContext(t *testing.T) {
	// A server that never prints its ready line: the cancelled context must end the wait.
	bin := filepath.Join(t.TempDir(), "never-ready")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Start(ctx, Options{Binary: bin})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("resource version %q is not a number: %v", s, err)
	}
	return n
}

// KubeconfigAs acts as the ServiceAccount: the server knows it by that
// name, and it may do what its RBAC grants and nothing more.
func TestServer_kubeconfigAsActsAsTheServiceAccountWithItsPermissionsOnly(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config())
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "op"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.KubeconfigAs(t, ns, "op"))
	if err != nil {
		t.Fatal(err)
	}
	op := kubernetes.NewForConfigOrDie(cfg)
	review, err := op.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + ns + ":op"; review.Status.UserInfo.Username != want {
		t.Errorf("the kubeconfig acts as %q, want %q", review.Status.UserInfo.Username, want)
	}
	if _, err := op.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing ConfigMaps without a grant: %v, want forbidden", err)
	}
}
