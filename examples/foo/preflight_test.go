package foo_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/examples/foo"
	"github.com/ctrlkit/ctrlkit/examples/foo/config"
)

func TestPreflight_namesAnUnreachableServer(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1", Timeout: 5 * time.Second}
	err := foo.Preflight(t.Context(), kubernetes.NewForConfigOrDie(cfg), cfg.Host, "")
	if !errors.Is(err, foo.ErrUnreachable) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("err = %v, want ErrUnreachable naming the address", err)
	}
}

func TestPreflight_namesAMissingCRDAndHowToInstallIt(t *testing.T) {
	srv := apiserver.StartForTest(t, apiserver.Options{}) // a server that has never seen the CRD
	err := foo.Preflight(t.Context(), kubernetes.NewForConfigOrDie(srv.Config()), srv.URL(), "")
	if !errors.Is(err, foo.ErrCRDMissing) || !strings.Contains(err.Error(), "crd.yaml") {
		t.Fatalf("err = %v, want ErrCRDMissing with the install command", err)
	}
}

func TestPreflight_namesEveryMissingPermission(t *testing.T) {
	srv := env.Get(t)
	if err := config.InstallCRD(t.Context(), srv.Config()); err != nil {
		t.Fatal(err)
	}
	cfg := srv.Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "jane", Groups: []string{"system:authenticated"}}
	err := foo.Preflight(t.Context(), kubernetes.NewForConfigOrDie(cfg), cfg.Host, "")
	if !errors.Is(err, foo.ErrMissingRBAC) {
		t.Fatalf("err = %v, want ErrMissingRBAC", err)
	}
	for _, want := range []string{"list foos.samplecontroller.ctrlkit.dev", "update foos/status.samplecontroller.ctrlkit.dev",
		"create deployments.apps", "create events", "rbac.yaml"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if err := foo.Preflight(t.Context(), kubernetes.NewForConfigOrDie(srv.Config()), cfg.Host, ""); err != nil {
		t.Errorf("the admin passes preflight: %v", err)
	}
}
