package informer_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/metrics"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// lockedBuffer is a bytes.Buffer safe for a logger and a test at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestNew_givesItsReflectorItsNameLoggerAndRegistererUnlessTheReflectorOptionsHaveTheirOwn(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no RBAC"))
	for _, tc := range []struct {
		name     string
		own      func(o *reflector.Options, reg prometheus.Registerer, log *slog.Logger)
		wantName string
	}{
		{name: "empty reflector options take the informer's", own: func(*reflector.Options, prometheus.Registerer, *slog.Logger) {},
			wantName: "cms"},
		{name: "the reflector's own name, logger and registerer win", wantName: "cms-reflector",
			own: func(o *reflector.Options, reg prometheus.Registerer, log *slog.Logger) {
				o.Name, o.Registerer, o.Logger = "cms-reflector", reg, log
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			srv := newFakeServer("a")
			srv.setListErr(forbidden)
			informerReg, reflectorReg := prometheus.NewRegistry(), prometheus.NewRegistry()
			var informerLog, reflectorLog lockedBuffer
			opts := informer.Options[*corev1.ConfigMap]{Name: "cms"}
			opts.Telemetry = telemetry.Telemetry{Registerer: informerReg, Logger: slog.New(slog.NewTextHandler(&informerLog, nil))}
			tc.own(&opts.Reflector, reflectorReg, slog.New(slog.NewTextHandler(&reflectorLog, nil)))
			inf := newInformer(t, srv, opts)
			run(t, inf)

			reg, log := informerReg, &informerLog
			if opts.Reflector.Registerer != nil {
				reg, log = reflectorReg, &reflectorLog
			}
			waitFor(t, wait, "the reflector's first failed list in its registry", func() bool {
				n, err := metrics.Sum(reg, "ctrlkit_reflector_failures_total",
					map[string]string{"name": tc.wantName, "op": "list", "code": "403"})
				return err == nil && n >= 1
			})
			waitFor(t, wait, "the reflector's WARN line in its log", func() bool {
				s := log.String()
				return strings.Contains(s, "level=WARN") && strings.Contains(s, "name="+tc.wantName)
			})
			if opts.Reflector.Registerer != nil && strings.Contains(informerLog.String(), "reflector:") {
				t.Errorf("the informer's log has reflector lines although the reflector has its own logger:\n%s", informerLog.String())
			}
		})
	}
}

func TestFactory_givesEveryReflectorItsOptionsNamedAfterItsInformer(t *testing.T) {
	leakcheck.Check(t)
	srv := newFakeServer("a")
	srv.setListErr(apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no RBAC")))
	errs := make(chan error, 16)
	f := informer.NewFactory(informer.FactoryOptions{Reflector: reflector.Options{Name: "not used", DisableWatchList: true,
		OnError: func(err error) {
			select {
			case errs <- err:
			default:
			}
		}}})
	for _, ns := range []string{"ns", "other"} {
		if _, err := informer.For(f, informer.Scope{Resource: configMapsGVR, Namespace: ns}, func() reflector.ListerWatcher[*corev1.ConfigMap] { return srv }); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	// Only list errors: with watch-list on, the first request of each
	// would be a watch, which this fake server refuses with a 400.
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case err := <-errs:
			var rerr *reflector.Error
			if !errors.As(err, &rerr) || rerr.Op != reflector.OpList || rerr.Code != 403 {
				t.Fatalf("OnError got %v, want the list's 403 as a *reflector.Error", err)
			}
			seen[rerr.Resource] = true
		case <-time.After(wait):
			t.Fatalf("OnError heard only from %v", seen)
		}
	}
	if !seen["configmaps/v1 in namespace ns"] || !seen["configmaps/v1 in namespace other"] {
		t.Errorf("errors came from %v, want one reflector per informer, each named after it", seen)
	}
}
