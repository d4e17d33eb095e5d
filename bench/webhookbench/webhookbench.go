// Package webhookbench measures admission webhook latency (p50, p99) and
// requests per second of ctrlkit's webhook server against
// controller-runtime's, side by side in one process: the same validator
// and defaulter logic for Pods on both, each server on its own loopback
// port over HTTPS with the same self-signed certificate, a load client
// that sends what the API server sends (a fresh AdmissionReview of a
// realistic Pod per request, marshalled per request, over keep-alive
// connections). A second ctrlkit server gives the A/A row: the noise floor.
//
// Before measuring, one review per webhook goes to every server, and the
// answers must agree: allowed, the request's UID, and a JSON patch that
// turns the Pod into the same object on every side (the Pod with the
// defaulter's label). Every measured answer must be allowed, with a patch
// from the defaulter; a run with any other answer fails.
package webhookbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/bench/scenario"
)

// The sides of the comparison.
const (
	Ctrlkit           = "ctrlkit"
	ControllerRuntime = "controller-runtime"
	AA                = "ctrlkit (A/A)" // a second ctrlkit server: the noise floor
)

// The protocols the load client speaks.
const (
	HTTP1 = "http/1.1" // what the API server uses for a webhook behind a Service
	HTTP2 = "h2"       // what it uses for a loopback URL
)

// The webhooks measured.
const (
	Validate = "validate" // allowed after one field check
	Mutate   = "mutate"   // sets a label: a one-operation JSON patch
)

// Config sizes a run.
type Config struct {
	// Protocols to measure, each a table of its own. Default: HTTP1.
	Protocols []string
	// Senders are the numbers of concurrent senders to measure. Default: 1 and 16.
	Senders []int
	// Warmup is sent before each measurement and not counted. Default: 250 ms.
	Warmup time.Duration
	// Duration is each measurement's length. Default: 1 s.
	Duration time.Duration
	// Rounds is how many times each side is measured, the sides' order
	// reversed every other round; the table shows medians. Default: 3.
	Rounds int
	// Progress receives a line per measurement. Default: discarded.
	Progress io.Writer
}

func (c *Config) defaults() error {
	if len(c.Protocols) == 0 {
		c.Protocols = []string{HTTP1}
	}
	for _, p := range c.Protocols {
		if p != HTTP1 && p != HTTP2 {
			return fmt.Errorf("webhookbench: protocol %q, want %q or %q", p, HTTP1, HTTP2)
		}
	}
	if len(c.Senders) == 0 {
		c.Senders = []int{1, 16}
	}
	for _, n := range c.Senders {
		if n < 1 {
			return fmt.Errorf("webhookbench: %d senders, want at least 1", n)
		}
	}
	if c.Warmup == 0 {
		c.Warmup = 250 * time.Millisecond
	}
	if c.Duration == 0 {
		c.Duration = time.Second
	}
	if c.Warmup < 0 || c.Duration < 0 {
		return fmt.Errorf("webhookbench: negative warmup %v or duration %v", c.Warmup, c.Duration)
	}
	if c.Rounds == 0 {
		c.Rounds = 3
	}
	if c.Rounds < 0 {
		return fmt.Errorf("webhookbench: %d rounds", c.Rounds)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// Measure is one measurement of one side.
type Measure struct {
	P50, P99 time.Duration
	PerSec   float64 // answers per second
	Requests int     // answers counted
	// CPU is the process's CPU time (user and system, the load client's
	// and the servers') over the measurement, per answer: unlike latency
	// it barely moves when other processes take the machine's cores.
	CPU time.Duration
}

// Row is one webhook at one protocol and number of senders: every side's
// measurements, one per round.
type Row struct {
	Protocol string
	Webhook  string
	Senders  int
	Runs     map[string][]Measure // side -> rounds
}

// Metric is one column of measurements of a Row.
type Metric struct {
	Name, Unit, Better string
	get                func(Measure) float64
}

// Metrics are what a Row reports, in the table's order.
var Metrics = []Metric{
	{"p50 latency", "µs", "lower", func(m Measure) float64 { return float64(m.P50) / 1e3 }},
	{"p99 latency", "µs", "lower", func(m Measure) float64 { return float64(m.P99) / 1e3 }},
	{"throughput", "req/s", "higher", func(m Measure) float64 { return m.PerSec }},
	{"CPU per request, client and server", "µs", "lower", func(m Measure) float64 { return float64(m.CPU) / 1e3 }},
}

// Median returns side's median of m over the rounds, and the spread.
func (r Row) Median(side string, m Metric) (median, lo, hi float64) {
	var vs []float64
	for _, run := range r.Runs[side] {
		vs = append(vs, m.get(run))
	}
	if len(vs) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	slices.Sort(vs)
	n := len(vs)
	median = vs[n/2]
	if n%2 == 0 {
		median = (vs[n/2-1] + vs[n/2]) / 2
	}
	return median, vs[0], vs[n-1]
}

// Run starts the servers, checks that they answer alike, and measures
// every protocol, webhook and number of senders, each side once per
// round.
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "webhookbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(ctx)
	srv := &servers{}
	rows, err := func() ([]Row, error) {
		if err := srv.start(ctx, dir); err != nil {
			return nil, err
		}
		return measureAll(ctx, cfg, srv)
	}()
	cancel()
	if werr := srv.wait(); werr != nil && err == nil {
		err = fmt.Errorf("webhookbench: stopping the servers: %w", werr)
	}
	return rows, err
}

func measureAll(ctx context.Context, cfg Config, srv *servers) ([]Row, error) {
	pods := podPool(256)
	sides := []string{Ctrlkit, ControllerRuntime, AA}
	var rows []Row
	for _, proto := range cfg.Protocols {
		clients := map[string]*http.Client{}
		for _, side := range sides {
			clients[side] = newClient(srv.roots, proto)
			defer clients[side].CloseIdleConnections()
		}
		if err := checkAlike(ctx, srv, clients, pods[0]); err != nil {
			return nil, err
		}
		for _, hook := range []string{Validate, Mutate} {
			for _, senders := range cfg.Senders {
				row := Row{Protocol: proto, Webhook: hook, Senders: senders, Runs: map[string][]Measure{}}
				for round := range cfg.Rounds {
					order := slices.Clone(sides)
					if round%2 == 1 {
						slices.Reverse(order)
					}
					for _, side := range order {
						runtime.GC() // one side's garbage is not the next one's pause
						m, err := load(ctx, clients[side], srv.urls[side]+pathOf(hook), hook, pods, senders, cfg.Warmup, cfg.Duration)
						if err != nil {
							return nil, fmt.Errorf("webhookbench: %s, %s, %d senders, round %d, %s: %w", proto, hook, senders, round+1, side, err)
						}
						fmt.Fprintf(cfg.Progress, "  %s %-8s C=%-3d round %d %-18s p50=%v p99=%v %.0f req/s (%d) cpu/req=%v\n",
							proto, hook, senders, round+1, side, m.P50, m.P99, m.PerSec, m.Requests, m.CPU)
						row.Runs[side] = append(row.Runs[side], m)
					}
				}
				rows = append(rows, row)
			}
		}
	}
	return rows, nil
}

func pathOf(hook string) string {
	if hook == Mutate {
		return MutatePath
	}
	return ValidatePath
}

// podPool builds n realistic Pods once; each request marshals one afresh.
func podPool(n int) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		p := scenario.Pod(i, 100)
		out[i] = &p
	}
	return out
}

var reqSeq atomic.Uint64

// reviewFor marshals the AdmissionReview the API server sends for a
// create of pod: a fresh UID, the Pod as JSON, the requesting user.
func reviewFor(pod *corev1.Pod) (uid types.UID, body []byte, err error) {
	raw, err := json.Marshal(pod)
	if err != nil {
		return "", nil, err
	}
	n := reqSeq.Add(1)
	uid = types.UID(fmt.Sprintf("%08x-5a1e-4c3b-9d2f-%012x", n>>16, n))
	gvk := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	gvr := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	body, err = json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: uid, Kind: gvk, Resource: gvr, RequestKind: &gvk, RequestResource: &gvr,
			Name: pod.Name, Namespace: pod.Namespace, Operation: admissionv1.Create,
			UserInfo: authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:replicaset-controller",
				UID: "6c1a9d2e-0b7f-4e3a-8c5d-2f1e0a9b8c7d", Groups: []string{"system:serviceaccounts",
					"system:serviceaccounts:kube-system", "system:authenticated"}},
			Object:  kruntime.RawExtension{Raw: raw},
			DryRun:  new(bool),
			Options: kruntime.RawExtension{Raw: []byte(`{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1","fieldManager":"kube-controller-manager"}`)},
		},
	})
	return uid, body, err
}

// send posts one review and returns the decoded answer.
func send(ctx context.Context, c *http.Client, url string, body []byte) (*admissionv1.AdmissionResponse, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, */*")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil {
		return nil, 0, err
	}
	if want := protoMajor(c); resp.ProtoMajor != want {
		return nil, 0, fmt.Errorf("answered over %s, the client asked for HTTP/%d", resp.Proto, want)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(data))
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &review); err != nil {
		return nil, 0, fmt.Errorf("the answer does not decode: %w", err)
	}
	if review.Response == nil {
		return nil, 0, fmt.Errorf("the answer has no response: %s", data)
	}
	return review.Response, took, nil
}

// protoMajor is the HTTP major version c's transport negotiates.
func protoMajor(c *http.Client) int {
	if c.Transport.(*http.Transport).ForceAttemptHTTP2 {
		return 2
	}
	return 1
}

// answerOK checks a measured answer: allowed, the request's UID, a patch
// exactly when the webhook mutates.
func answerOK(r *admissionv1.AdmissionResponse, uid types.UID, hook string) error {
	switch {
	case !r.Allowed:
		return fmt.Errorf("denied: %v", r.Result)
	case r.UID != uid:
		return fmt.Errorf("answer for UID %q, sent %q", r.UID, uid)
	case hook == Mutate && (r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch || len(r.Patch) == 0):
		return fmt.Errorf("the defaulter's answer has no JSON patch")
	case hook == Validate && len(r.Patch) != 0:
		return fmt.Errorf("the validator's answer has a patch: %s", r.Patch)
	}
	return nil
}

// load runs senders concurrent senders against url for warmup, then
// counts and times the answers that arrive in the next d.
func load(ctx context.Context, c *http.Client, url, hook string, pods []*corev1.Pod, senders int, warmup, d time.Duration) (Measure, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	begin := time.Now().Add(warmup)
	end := begin.Add(d)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		lats     = make([][]time.Duration, senders)
		next     atomic.Uint64
	)
	for s := range senders {
		wg.Go(func() {
			for ctx.Err() == nil {
				pod := pods[next.Add(1)%uint64(len(pods))]
				uid, body, err := reviewFor(pod)
				if err == nil {
					var r *admissionv1.AdmissionResponse
					var took time.Duration
					r, took, err = send(ctx, c, url, body)
					if err == nil {
						err = answerOK(r, uid, hook)
					}
					if err == nil {
						now := time.Now()
						if now.After(end) {
							return
						}
						if !now.Before(begin) { // answered within the measurement
							lats[s] = append(lats[s], took)
						}
						continue
					}
				}
				mu.Lock()
				if firstErr == nil && ctx.Err() == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel()
				return
			}
		})
	}
	cpu0 := cpuAt(ctx, begin)
	cpu1 := cpuAt(ctx, end)
	wg.Wait()
	if firstErr != nil {
		return Measure{}, firstErr
	}
	if err := ctx.Err(); err != nil && time.Now().Before(end) {
		return Measure{}, err
	}
	all := slices.Concat(lats...)
	if len(all) == 0 {
		return Measure{}, fmt.Errorf("no answer within %v", d)
	}
	slices.Sort(all)
	return Measure{P50: percentile(all, 0.50), P99: percentile(all, 0.99), PerSec: float64(len(all)) / d.Seconds(), Requests: len(all),
		CPU: (cpu1 - cpu0) / time.Duration(len(all))}, nil
}

// cpuAt waits until t (or ctx's end) and returns the process's CPU time
// then.
func cpuAt(ctx context.Context, t time.Time) time.Duration {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percentile is the nearest-rank percentile of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// checkAlike sends the same review of pod to every side, for each
// webhook, and fails unless the answers agree: allowed, the request's
// UID, no patch from the validator, and a defaulter's patch that turns
// the sent Pod into the Pod with the defaulter's label on every side.
func checkAlike(ctx context.Context, srv *servers, clients map[string]*http.Client, pod *corev1.Pod) error {
	uid, body, err := reviewFor(pod)
	if err != nil {
		return err
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return err
	}
	sent := review.Request.Object.Raw
	want := pod.DeepCopy()
	defaultPod(want)
	wantJSON, err := json.Marshal(want)
	if err != nil {
		return err
	}
	for _, hook := range []string{Validate, Mutate} {
		for side, c := range clients {
			r, _, err := send(ctx, c, srv.urls[side]+pathOf(hook), body)
			if err == nil {
				err = answerOK(r, uid, hook)
			}
			if err == nil && hook == Mutate {
				err = patchGives(sent, r.Patch, wantJSON)
			}
			if err != nil {
				return fmt.Errorf("webhookbench: %s's %s webhook: %w", side, hook, err)
			}
		}
	}
	return nil
}

// patchGives applies the JSON patch to doc and compares the result with
// want as JSON values (member order aside).
func patchGives(doc, patch, want []byte) error {
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return fmt.Errorf("the patch does not decode: %w: %s", err, patch)
	}
	got, err := p.Apply(doc)
	if err != nil {
		return fmt.Errorf("the patch does not apply: %w: %s", err, patch)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		return err
	}
	if err := json.Unmarshal(want, &w); err != nil {
		return err
	}
	if !reflect.DeepEqual(g, w) {
		return fmt.Errorf("the patch %s gives a Pod other than the defaulted one", patch)
	}
	return nil
}

// Markdown writes one table row per webhook, protocol, number of senders
// and metric: each side's median (min–max over the rounds), ctrlkit over
// controller-runtime, and the A/A ratio (the second ctrlkit server over
// the first) as the noise floor.
func Markdown(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| webhook | protocol | senders | metric | ctrlkit (min–max) | controller-runtime (min–max) | ctrlkit / controller-runtime | A/A noise |\n")
	b.WriteString("|---|---|---:|---|---:|---:|---:|---:|\n")
	for _, r := range rows {
		proto := "HTTP/1.1"
		if r.Protocol == HTTP2 {
			proto = "HTTP/2"
		}
		for _, m := range Metrics {
			ck, ckLo, ckHi := r.Median(Ctrlkit, m)
			cr, crLo, crHi := r.Median(ControllerRuntime, m)
			aa, _, _ := r.Median(AA, m)
			fmt.Fprintf(&b, "| %s | %s | %d | %s (%s, %s is better) | %s (%s–%s) | %s (%s–%s) | %s | %s |\n",
				r.Webhook, proto, r.Senders, m.Name, m.Unit, m.Better,
				num(ck), num(ckLo), num(ckHi), num(cr), num(crLo), num(crHi), ratio(ck/cr), ratio(aa/ck))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ratio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", r)
}

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
