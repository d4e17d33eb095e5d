package webhookbench

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRun_tinyEverySideAnswersAndTheTableHasEveryRow(t *testing.T) {
	rows, err := Run(t.Context(), Config{Protocols: []string{HTTP1, HTTP2}, Senders: []int{1, 3},
		Warmup: 100 * time.Millisecond, Duration: time.Second, Rounds: 1}) // a second: the first answers under -race on a loaded machine take hundreds of ms
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2*2*2 {
		t.Fatalf("%d rows, want 8 (2 protocols × 2 webhooks × 2 sender counts)", len(rows))
	}
	for _, r := range rows {
		for _, side := range []string{Ctrlkit, ControllerRuntime, AA} {
			runs := r.Runs[side]
			if len(runs) != 1 || runs[0].Requests == 0 || runs[0].P50 <= 0 || runs[0].P99 < runs[0].P50 || runs[0].PerSec <= 0 || runs[0].CPU <= 0 {
				t.Errorf("%s %s C=%d, %s: %+v", r.Protocol, r.Webhook, r.Senders, side, runs)
			}
		}
	}
	var b strings.Builder
	if err := Markdown(&b, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2+len(rows)*len(Metrics) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), 2+len(rows)*len(Metrics), b.String())
	}
	for _, l := range lines[2:] {
		if cells := strings.Split(l, "|"); len(cells) != 10 || strings.Contains(l, "n/a") {
			t.Errorf("row %q: want 8 cells, every one measured", l)
		}
	}
	for _, want := range []string{"| mutate | HTTP/2 | 3 | p99 latency (µs, lower is better) |", "| validate | HTTP/1.1 | 1 | throughput (req/s, higher is better) |",
		"| mutate | HTTP/1.1 | 1 | CPU per request, client and server (µs, lower is better) |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no row %q in\n%s", want, b.String())
		}
	}
}

// The servers must give equivalent answers to the same review: checkAlike
// runs inside Run; here its verdict is checked to catch a wrong patch.
func TestCheckAlike_bothServersPatchThePodIntoTheSameObject(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	srv := &servers{}
	defer func() { // after the clients closed their connections
		cancel()
		if err := srv.wait(); err != nil {
			t.Error(err)
		}
	}()
	if err := srv.start(ctx, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	clients := map[string]*http.Client{}
	for _, side := range []string{Ctrlkit, ControllerRuntime} {
		clients[side] = newClient(srv.roots, HTTP1)
		defer clients[side].CloseIdleConnections()
	}
	pod := podPool(1)[0]
	if err := checkAlike(ctx, srv, clients, pod); err != nil {
		t.Fatal(err)
	}
	// Each side's patch, applied to the Pod, gives the Pod with the label.
	uid, body, err := reviewFor(pod)
	if err != nil {
		t.Fatal(err)
	}
	var sent struct {
		Request struct {
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatal(err)
	}
	want := pod.DeepCopy()
	defaultPod(want)
	wantJSON, _ := json.Marshal(want)
	other := pod.DeepCopy()
	other.Labels["another"] = "label"
	otherJSON, _ := json.Marshal(other)
	for side, c := range clients {
		r, _, err := send(ctx, c, srv.urls[side]+MutatePath, body)
		if err != nil {
			t.Fatal(side, err)
		}
		if err := answerOK(r, uid, Mutate); err != nil {
			t.Fatal(side, err)
		}
		if err := patchGives(sent.Request.Object, r.Patch, wantJSON); err != nil {
			t.Errorf("%s: %v", side, err)
		}
		if err := patchGives(sent.Request.Object, r.Patch, otherJSON); err == nil {
			t.Errorf("%s: patchGives accepts a patch that gives another object", side)
		}
	}
}
