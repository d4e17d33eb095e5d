package manager_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/manager"
)

// A config that sets no client-side rate limit gets none, as with
// controller-runtime: a controller throttled by its own client lags behind
// a burst of changes. A limit the config sets is kept.
func TestNew_setsNoClientSideRateLimitUnlessTheConfigDoes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		qps       float32
		burst     int
		wantLimit bool
		wantQPS   float32
	}{
		{name: "unset", wantLimit: false},
		{name: "set by the user", qps: 5, burst: 10, wantLimit: true, wantQPS: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &rest.Config{Host: "https://127.0.0.1:1", QPS: tc.qps, Burst: tc.burst}
			m, err := manager.New(cfg, quiet(t))
			if err != nil {
				t.Fatal(err)
			}
			limiter := m.Kube().CoreV1().RESTClient().GetRateLimiter()
			switch {
			case !tc.wantLimit && limiter != nil:
				t.Errorf("the manager's clientset has a client-side rate limit of %v/s", limiter.QPS())
			case tc.wantLimit && (limiter == nil || limiter.QPS() != tc.wantQPS):
				t.Errorf("the manager's clientset limiter = %v, want %v/s", limiter, tc.wantQPS)
			}
		})
	}
}

// The logger, registry and scheme are set once, on manager.Options: one set
// in a nested option would be overwritten, so New refuses it and names it.
func TestNew_refusesALoggerRegistryOrSchemeSetInANestedOption(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	opts := quiet(t)
	opts.Informers.Registerer = prometheus.NewRegistry()
	opts.Webhook.Logger = slog.Default()
	_, err := manager.New(cfg, opts)
	if !errors.Is(err, manager.ErrNestedOption) || !strings.Contains(err.Error(), "Informers.Registerer, Webhook.Logger") {
		t.Fatalf("New = %v; want ErrNestedOption naming Informers.Registerer and Webhook.Logger", err)
	}
	if _, err := manager.New(cfg, quiet(t)); err != nil {
		t.Fatalf("New without nested options: %v", err)
	}
}
