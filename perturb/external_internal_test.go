package perturb

import (
	"errors"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/tracing"
)

// The Nth external write is dropped (never sent) or its answer lost (sent,
// answered, and a timeout returned); reads pass; every write is recorded
// as external and numbered among the run's writes; outside a run External
// returns the round tripper it was given.
func TestExternal_dropsOrLosesTheChosenWriteAndRecordsEveryOne(t *testing.T) {
	calls := []struct{ method, path string }{{"POST", "/things"}, {"GET", "/things"}, {"DELETE", "/things/1"}, {"POST", "/things"}}
	for _, c := range []struct {
		name     string
		rf       runFaults
		failed   int      // the call that times out, 0 for none
		sent     []string // what reached the application
		recorded []string // the writes' methods and faults
	}{
		{"dropped", runFaults{dropCall: 2}, 3, []string{"POST /things", "GET /things", "POST /things"},
			[]string{"POST", "DELETE", "dropped", "POST"}},
		{"lost", runFaults{loseCall: 2}, 3, []string{"POST /things", "GET /things", "DELETE /things/1", "POST /things"},
			[]string{"POST", "DELETE", "answer lost", "POST"}},
		{"none", runFaults{}, 0, []string{"POST /things", "GET /things", "DELETE /things/1", "POST /things"},
			[]string{"POST", "DELETE", "POST"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			app := newFake()
			tr := newTransport("a", 0, time.Now(), c.rf, func() {})
			rt := Env{run: tr}.External(app)
			ctx := tracing.WithController(t.Context(), "things") // as a ctrlkit controller's reconcile
			for i, call := range calls {
				resp, err := do(t, rt, ctx, call.method, call.path)
				if i+1 == c.failed {
					var ne net.Error
					if !errors.Is(err, ErrExternalTimeout) || !errors.As(err, &ne) || !ne.Timeout() {
						t.Errorf("call %d: %v, want a timeout (ErrExternalTimeout)", i+1, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
				_ = resp.Body.Close()
			}
			if got := app.requests(); !slices.Equal(got, c.sent) {
				t.Errorf("the application got %q, want %q", got, c.sent)
			}
			var got []string
			for _, w := range tr.history() {
				if !w.External || w.Replica != "a" || w.Controller != "things" {
					t.Errorf("write %s: not recorded as the external write of replica a by controller things", w)
				}
				got = append(got, w.Method)
				if w.Fault != "" {
					got = append(got, w.Fault)
				}
			}
			if !slices.Equal(got, c.recorded) {
				t.Errorf("recorded %q, want %q", got, c.recorded)
			}
		})
	}
	app := newFake()
	if rt := (Env{}).External(app); rt != http.RoundTripper(app) {
		t.Errorf("outside a run External returned %T, want the round tripper it was given", rt)
	}
}
