package reflector

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	streamdec "k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/util/framer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	restwatch "k8s.io/client-go/rest/watch"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// streamLW answers List from a page and serves each Watch as a JSON stream
// decoded by client-go's own watch decoder, from frames the test writes.
type streamLW struct {
	page    func() (List[*corev1.Pod], error)
	mu      sync.Mutex
	lists   int
	streams chan *io.PipeWriter
}

func (s *streamLW) List(context.Context, metav1.ListOptions) (List[*corev1.Pod], error) {
	s.mu.Lock()
	s.lists++
	s.mu.Unlock()
	return s.page()
}

func (s *streamLW) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	pr, pw := io.Pipe()
	codec := scheme.Codecs.UniversalDeserializer()
	dec := restwatch.NewDecoder(streamdec.NewDecoder(framer.NewJSONFramedReader(pr), scheme.Codecs.UniversalDeserializer()), codec)
	s.streams <- pw
	return watch.NewStreamWatcher(dec, watchErrorReporter{}), nil
}

func (s *streamLW) listCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists
}

// watchErrorReporter turns a decode error into an Error event, as client-go's REST client does.
type watchErrorReporter struct{}

func (watchErrorReporter) AsObject(err error) runtime.Object {
	return &metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError, Message: err.Error()}
}

func podFrame(typ, name, rv string) string {
	return `{"type":"` + typ + `","object":{"kind":"Pod","apiVersion":"v1","metadata":{"namespace":"ns","name":"` + name + `","resourceVersion":"` + rv + `"}}}` + "\n"
}

func TestReflector_survivesBadInputWithALogLineAndAMetric(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frame  string
		metric func(r *Reflector[*corev1.Pod]) float64
		relist bool // the bad frame ends the stream, so the reflector resyncs
	}{
		{name: "an undecodable object ends the stream with an error and a resync",
			frame: `{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":5}}}` + "\n",
			metric: func(r *Reflector[*corev1.Pod]) float64 {
				return testutil.ToFloat64(r.metrics.events.WithLabelValues("ERROR"))
			},
			relist: true},
		{name: "an error event whose object is not a Status ends the stream with a resync",
			frame: `{"type":"ERROR","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"x"}}}` + "\n",
			metric: func(r *Reflector[*corev1.Pod]) float64 {
				return testutil.ToFloat64(r.metrics.events.WithLabelValues("ERROR"))
			},
			relist: true},
		{name: "an object of the wrong kind is skipped",
			frame: `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"namespace":"ns","name":"cm","resourceVersion":"11"}}}` + "\n",
			metric: func(r *Reflector[*corev1.Pod]) float64 {
				return testutil.ToFloat64(r.metrics.skipped.WithLabelValues("wrong type"))
			}},
		{name: "an object without a name is skipped",
			frame: podFrame("ADDED", "", "11"),
			metric: func(r *Reflector[*corev1.Pod]) float64 {
				return testutil.ToFloat64(r.metrics.skipped.WithLabelValues("no metadata"))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			lw := &streamLW{page: page("10", pod("a", "5")), streams: make(chan *io.PipeWriter, 4)}
			sink := newMemSink[*corev1.Pod]()
			r := newTestReflector(t, lw, sink, Options{DisableWatchList: true, Telemetry: telemetry.Telemetry{Registerer: prometheus.NewRegistry()}})
			runReflector(t, r)
			w := nextStream(t, lw)
			write(t, w, tc.frame)
			if tc.relist {
				w = nextStream(t, lw) // the old stream ended; a resync opened a new one
				if lw.listCount() < 2 {
					t.Errorf("%d lists, want a resync after the bad frame", lw.listCount())
				}
			}
			write(t, w, podFrame("ADDED", "b", "12"))
			sink.waitFor(t, 10*time.Second, "pod b after the bad frame", func(keys map[string]string, _ int) bool {
				return keys["ns/b"] == "12" && keys["ns/a"] == "5"
			})
			if n := tc.metric(r); n != 1 {
				t.Errorf("metric = %v, want 1", n)
			}
			t.Cleanup(func() { w.Close() })
		})
	}
}

// watchingReflector runs a Reflector with its own metrics over a fake that lists
// nothing at version 10, and returns it once its watch is open.
func watchingReflector(t *testing.T) (*fakeLW, *memSink[*corev1.Pod], *Reflector[*corev1.Pod], *watch.RaceFreeFakeWatcher) {
	t.Helper()
	leakcheck.Check(t)
	lw := newFakeLW(page("10"))
	sink := newMemSink[*corev1.Pod]()
	r := newTestReflector(t, lw, sink, Options{DisableWatchList: true, Telemetry: telemetry.Telemetry{Registerer: prometheus.NewRegistry()}})
	runReflector(t, r)
	return lw, sink, r, lw.nextWatch(t)
}

func TestReflector_aWatchResumesAfterAnObjectItSkippedForHavingNoName(t *testing.T) {
	lw, sink, r, w := watchingReflector(t)
	w.Add(pod("", "11"))
	w.Stop() // the stream ends after the unnamed object: the next watch starts where it left off
	w = lw.nextWatch(t)
	w.Add(pod("b", "12"))
	sink.waitFor(t, 10*time.Second, "pod b", func(keys map[string]string, _ int) bool { return keys["ns/b"] == "12" })
	opts := lw.watchOptions()
	if len(opts) != 2 || opts[1].ResourceVersion != "11" {
		t.Errorf("watches from %v, want the second from 11, the skipped object's version", opts)
	}
	if n := testutil.ToFloat64(r.metrics.skipped.WithLabelValues("no metadata")); n != 1 {
		t.Errorf("skipped{no metadata} = %v, want 1", n)
	}
	if keys, n := sink.snapshot(); n != 1 || len(keys) != 1 {
		t.Errorf("%d replaces, cache %v; want 1 replace (a skipped object needs no resync) and only ns/b", n, keys)
	}
}

func TestReflector_skipsAnUnknownEventType(t *testing.T) {
	_, sink, r, w := watchingReflector(t)
	w.Action(watch.EventType("SURPRISE"), pod("x", "11"))
	for i := range 50 { // each its own type: still one series
		w.Action(watch.EventType(fmt.Sprintf("SURPRISE-%d-%s", i, strings.Repeat("z", 1000))), pod("x", "11"))
	}
	w.Add(pod("b", "12"))
	sink.waitFor(t, 10*time.Second, "pod b", func(keys map[string]string, _ int) bool { return keys["ns/b"] == "12" })
	if n := testutil.ToFloat64(r.metrics.skipped.WithLabelValues("unknown event")); n != 51 {
		t.Errorf("skipped{unknown event} = %v, want 51", n)
	}
	if n := testutil.ToFloat64(r.metrics.events.WithLabelValues("unknown")); n != 51 {
		t.Errorf("events{type=unknown} = %v, want 51", n)
	}
	if n := testutil.CollectAndCount(r.metrics.events); n > 6 {
		t.Errorf("%d series of events by type; want at most the five known types and unknown", n)
	}
	if _, ok := sink.snapshot(); ok > 1 {
		t.Errorf("%d replaces, want 1: an unknown event type needs no resync", ok)
	}
}

func nextStream(t *testing.T, lw *streamLW) *io.PipeWriter {
	t.Helper()
	select {
	case w := <-lw.streams:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("no watch stream opened within 10s")
		return nil
	}
}

func write(t *testing.T, w *io.PipeWriter, frame string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := io.Copy(w, strings.NewReader(frame)); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("write frame: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reflector did not read the frame within 10s")
	}
}

// notDecoded is an object a ListerWatcher could not decode.
type notDecoded struct{ metav1.TypeMeta }

func (*notDecoded) Undecodable() error               { return errorString("field 3: wire type 2, want 0") }
func (n *notDecoded) DeepCopyObject() runtime.Object { return n }

type errorString string

func (e errorString) Error() string { return string(e) }

func TestReflector_skipsAnUndecodableObjectAndGoesOn(t *testing.T) {
	leakcheck.Check(t)
	lw := newFakeLW(func() (List[*corev1.Pod], error) {
		return List[*corev1.Pod]{Items: []*corev1.Pod{pod("a", "9")}, ResourceVersion: "10",
			Skipped: 1, Skip: "list item does not decode: truncated", SkipReason: "undecodable"}, nil
	})
	sink := newMemSink[*corev1.Pod]()
	r := newTestReflector(t, lw, sink, Options{DisableWatchList: true, Telemetry: telemetry.Telemetry{Registerer: prometheus.NewRegistry()}})
	runReflector(t, r)
	w := lw.nextWatch(t)
	w.Modify(&notDecoded{})
	w.Add(pod("b", "12"))
	sink.waitFor(t, 10*time.Second, "pod a listed and pod b watched", func(keys map[string]string, _ int) bool {
		return keys["ns/a"] != "" && keys["ns/b"] == "12"
	})
	if n := testutil.ToFloat64(r.metrics.skipped.WithLabelValues("undecodable")); n != 2 {
		t.Errorf("skipped{undecodable} = %v, want 2 (one list item, one event)", n)
	}
	if _, replaces := sink.snapshot(); replaces > 1 {
		t.Errorf("%d replaces, want 1: an object that does not decode needs no resync", replaces)
	}
}
