package perturb

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

func configMap(rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: rv},
		Data:       map[string]string{"tricky": `a "quoted" } { brace \ and a backslash`}}
}

// protoEvent is a watch event as the API server streams it in protobuf.
func protoEvent(t *testing.T, typ string, obj runtime.Object) []byte {
	t.Helper()
	raw, err := runtime.Encode(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), obj)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := (&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(ev))), ev...)
}

// jsonEvent is a watch event as the API server streams it in JSON.
func jsonEvent(t *testing.T, typ string, obj runtime.Object) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"type": typ, "object": obj})
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// A stream is split into its events whatever the sizes of its reads, in
// both encodings, and each event's resource version read; a bookmark
// reads as 0 (no hold stops it), an object with no version is held by
// every hold.
func TestFrames_splitsAStreamIntoEventsAndReadsTheirVersions(t *testing.T) {
	for _, c := range []struct {
		contentType string
		event       func(*testing.T, string, runtime.Object) []byte
	}{
		{"application/vnd.kubernetes.protobuf;stream=watch", protoEvent},
		{"application/json;stream=watch", jsonEvent},
	} {
		t.Run(c.contentType, func(t *testing.T) {
			bookmark := configMap("23") // as the one that ends a watch-list's initial events: never held
			bookmark.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
			events := [][]byte{c.event(t, "ADDED", configMap("7")), c.event(t, "MODIFIED", configMap("19")),
				c.event(t, "BOOKMARK", bookmark), c.event(t, "MODIFIED", configMap(""))}
			var stream []byte
			for _, e := range events {
				stream = append(stream, e...)
			}
			f := newFrames(c.contentType)
			r := iotest.HalfReader(iotest.OneByteReader(&readerOf{b: stream}))
			var passed []byte
			for i, want := range []uint64{7, 19, 0, math.MaxUint64} {
				got, rv, err := f.next(r)
				if err != nil {
					t.Fatalf("event %d: %v", i+1, err)
				}
				if rv != want {
					t.Errorf("event %d: resource version %d, want %d", i+1, rv, want)
				}
				if strings.TrimSpace(string(got)) != strings.TrimSpace(string(events[i])) {
					t.Errorf("event %d: %q, want %q", i+1, got, events[i])
				}
				passed = append(passed, got...)
			}
			// Every byte goes through, in order (JSON's last newline
			// aside: nothing follows it).
			if string(passed) != strings.TrimSuffix(string(stream), "\n") && string(passed) != string(stream) {
				t.Errorf("the events' bytes differ from the stream's")
			}
			if _, _, err := f.next(r); err != io.EOF {
				t.Errorf("after the last event: %v, want io.EOF", err)
			}
		})
	}
	if newFrames("text/plain") != nil {
		t.Error("an encoding it does not know: want nil (held byte by byte)")
	}
}

// readerOf reads b, then io.EOF.
type readerOf struct{ b []byte }

func (r *readerOf) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// A hold from a version lets the events up to it through and stops the
// ones after, until released.
func TestTransport_holdAfterAVersionLetsEarlierEventsThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFake()
		srv.watchType = "application/json;stream=watch"
		tr := newTransport("a", 0, time.Now(), runFaults{}, func() {})
		resp, err := do(t, &wrapped{t: tr, next: srv}, t.Context(), http.MethodGet, cmWatch)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		tr.holdAfter("configmaps", 7)
		early, late := jsonEvent(t, "ADDED", configMap("7")), jsonEvent(t, "MODIFIED", configMap("8"))
		go func() { _, _ = srv.stream("https://server" + cmWatch).Write(append(early, late...)) }()
		got := make(chan string, 2)
		go func() {
			for {
				b := make([]byte, 4096)
				n, err := resp.Body.Read(b)
				if err != nil {
					return
				}
				got <- string(b[:n])
			}
		}()
		synctest.Wait()
		if s := <-got; s != strings.TrimSpace(string(early)) {
			t.Fatalf("read %q, want the event at version 7", s)
		}
		select {
		case s := <-got:
			t.Fatalf("read %q, an event after version 7, while held", s)
		default:
		}
		tr.release("configmaps")
		if s := <-got; len(s) == 0 {
			t.Fatal("nothing once released")
		}
	})
}
