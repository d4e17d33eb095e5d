package reflector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

func TestError_isReadWithErrorsAsAndKeepsItsCause(t *testing.T) {
	forbidden := apierrors.NewForbidden(corev1.Resource("configmaps"), "", errors.New("no RBAC"))
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/api/v1/namespaces/x/configmaps?limit=500&resourceVersion=0",
		Err: &netOpError{syscall.ECONNREFUSED}}
	for _, tc := range []struct {
		name       string
		op         string
		cause      error
		wantCode   int32
		wantReason metav1.StatusReason
		wantMsg    string
	}{
		{name: "a 403 names the verb, the resource, the reason and the code", op: OpWatch, cause: forbidden,
			wantCode: 403, wantReason: metav1.StatusReasonForbidden,
			wantMsg: `watch configmaps/v1 in namespace x: forbidden (403): configmaps is forbidden: no RBAC`},
		{name: "a wrapped 404 is classified too", op: OpList, cause: fmt.Errorf("page 2: %w", apierrors.NewNotFound(corev1.Resource("configmaps"), "")),
			wantCode: 404, wantReason: metav1.StatusReasonNotFound,
			wantMsg: `list configmaps/v1 in namespace x: not found (404): page 2: configmaps "" not found`},
		{name: "a refused connection has no code and no URL in its message", op: OpList, cause: refused,
			wantMsg: `list configmaps/v1 in namespace x: dial tcp 127.0.0.1:6443: connect: connection refused`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error = newError(tc.op, "configmaps/v1 in namespace x", tc.cause)
			var rerr *Error
			if !errors.As(err, &rerr) {
				t.Fatalf("errors.As(%v, *Error) = false", err)
			}
			if rerr.Op != tc.op || rerr.Code != tc.wantCode || rerr.Reason != tc.wantReason {
				t.Errorf("op %q code %d reason %q, want %q %d %q", rerr.Op, rerr.Code, rerr.Reason, tc.op, tc.wantCode, tc.wantReason)
			}
			if !errors.Is(err, tc.cause) {
				t.Errorf("the cause is not reachable through Unwrap")
			}
			if got := err.Error(); got != tc.wantMsg {
				t.Errorf("Error() = %q\nwant      %q", got, tc.wantMsg)
			}
		})
	}
	if !apierrors.IsForbidden(newError(OpList, "x", forbidden)) {
		t.Error("apierrors.IsForbidden does not see the 403 through *Error")
	}
}

// logRecords is a slog.Handler that keeps "LEVEL message" lines.
type logRecords struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Level.String()+" "+r.Message)
	return nil
}

// matching returns the lines that contain s.
func (l *logRecords) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// instantClock is the real clock, except that waits end at once: backoff
// does not slow the test down.
type instantClock struct{}

func (instantClock) Now() time.Time { return time.Now() }
func (instantClock) After(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Now()
	return c
}

func TestReflector_aRepeatedFailureIsLoggedOnceAtWarnThenCountedUntilItRecovers(t *testing.T) {
	leakcheck.Check(t)
	forbidden := apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New("no RBAC"))
	var answers []func() (List[*corev1.Pod], error)
	for range 5 {
		answers = append(answers, failing(forbidden))
	}
	lw := newFakeLW(append(answers, page("10", pod("a", "5")))...)
	lw.watchErr = apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New("may list, not watch"))
	logs := &logRecords{}
	reg := prometheus.NewRegistry()
	r := newTestReflector(t, lw, newMemSink[*corev1.Pod](), Options{DisableWatchList: true, Name: "pods",
		Telemetry: telemetry.Telemetry{Logger: slog.New(logs), Registerer: reg}, Clock: instantClock{}})
	runReflector(t, r)
	failures := func(op, code string) float64 {
		return testutil.ToFloat64(r.metrics.failures.WithLabelValues(op, code))
	}
	// The list fails 5 times, then succeeds; the watch keeps failing, and
	// each failed watch relists (which succeeds).
	waitUntil(t, "10 refused watches", func() bool { return failures(OpWatch, "403") >= 10 })
	lw.mu.Lock()
	lw.watchErr = nil
	lw.mu.Unlock()
	lw.nextWatch(t).Add(pod("b", "11"))
	waitUntil(t, "the watch to recover", func() bool { return len(logs.matching("watch recovered")) == 1 })

	if got := failures(OpList, "403"); got != 5 {
		t.Errorf("failures_total{op=list,code=403} = %v, want 5", got)
	}
	for _, tc := range []struct{ substr, want string }{
		{"list failed", "WARN reflector: list failed; repeats are only counted until it recovers"},
		{"list recovered", "INFO reflector: list recovered"},
		{"watch failed", "WARN reflector: watch failed; repeats are only counted until it recovers"},
		{"watch recovered", "INFO reflector: watch recovered"},
	} {
		if got := logs.matching(tc.substr); !slices.Equal(got, []string{tc.want}) {
			t.Errorf("log lines with %q: %q, want exactly [%q]", tc.substr, got, tc.want)
		}
	}
	if r.LastError() != nil {
		t.Errorf("LastError = %v after recovery, want nil", r.LastError())
	}
}

// waitUntil polls cond every millisecond for at most 10s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s waiting for %s", what)
		}
		<-time.After(time.Millisecond)
	}
}
