package ledger_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/ctrlkit/ctrlkit/internal/metrics"
	"github.com/ctrlkit/ctrlkit/ledger"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

var secrets = schema.GroupResource{Resource: "secrets"}

// fakeCache is a cache of one resource: name -> resource version.
type fakeCache struct {
	mu   sync.Mutex
	objs map[object.ObjectName]string
}

func (c *fakeCache) set(n object.ObjectName, rv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rv == "" {
		delete(c.objs, n)
		return
	}
	c.objs[n] = rv
}

func (c *fakeCache) lookup(n object.ObjectName) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rv, ok := c.objs[n]
	return rv, ok
}

func newLedger(t *testing.T) (*ledger.Ledger, *fakeCache, *prometheus.Registry, *[]object.ObjectName) {
	t.Helper()
	reg := prometheus.NewRegistry()
	l, err := ledger.New(ledger.Options{Bound: 5 * time.Second, Telemetry: telemetry.Telemetry{Registerer: reg}})
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeCache{objs: map[object.ObjectName]string{}}
	l.Track(secrets, ledger.Cache{Lookup: c.lookup,
		Holds: func(ns string, labels map[string]string) bool { return labels["skip"] == "" }})
	var released []object.ObjectName
	l.OnRelease(func(o object.ObjectName) { released = append(released, o) })
	return l, c, reg, &released
}

var (
	owner = object.ObjectName{Namespace: "ns", Name: "owner"}
	child = ledger.Ref{Resource: secrets, Name: object.ObjectName{Namespace: "ns", Name: "child"}}
)

func TestLedger_aKeyWaitsUntilTheCacheHasItsWriteAndIsReleasedThen(t *testing.T) {
	l, c, _, released := newLedger(t)
	l.Record(owner, child, "10", nil, false)
	if wait, _ := l.Wait(owner); !wait {
		t.Fatal("the owner does not wait for a write the cache has not seen")
	}
	c.set(child.Name, "9") // an older version: still waiting
	l.Observe(secrets, child.Name)
	if wait, _ := l.Wait(owner); !wait || len(*released) != 0 {
		t.Fatalf("released at an older version (wait %v, released %v)", wait, *released)
	}
	c.set(child.Name, "12") // newer than the write (someone else wrote since): good
	l.Observe(secrets, child.Name)
	if wait, _ := l.Wait(owner); wait || len(*released) != 1 || (*released)[0] != owner || l.Pending() != 0 {
		t.Errorf("after the cache caught up: wait %v, released %v, pending %d; want false, [owner], 0", wait, *released, l.Pending())
	}
}

// A release function removed (its controller was) is not called again;
// the others are.
func TestLedger_aRemovedReleaseFunctionIsNotCalled(t *testing.T) {
	l, c, _, released := newLedger(t)
	var removedCalls int
	remove := l.OnRelease(func(object.ObjectName) { removedCalls++ })
	remove()
	remove() // twice: nothing more
	l.Record(owner, child, "10", nil, false)
	c.set(child.Name, "10")
	l.Observe(secrets, child.Name)
	if removedCalls != 0 || len(*released) != 1 {
		t.Errorf("after the release: the removed function called %d times, the other %d; want 0 and 1", removedCalls, len(*released))
	}
}

func TestLedger_writesThatNeedNoWaitAreNotKept(t *testing.T) {
	l, c, _, _ := newLedger(t)
	c.set(child.Name, "10")
	l.Record(owner, child, "10", nil, false) // the watch was faster than the response
	other := ledger.Ref{Resource: schema.GroupResource{Resource: "events"}, Name: child.Name}
	l.Record(owner, other, "11", nil, false)                                                                      // no cache of events
	l.Record(owner, ledger.Ref{Resource: secrets, Name: child.Name}, "12", map[string]string{"skip": "x"}, false) // outside every cache's selector
	l.Record(owner, ledger.Ref{Resource: secrets, Name: object.ObjectName{Namespace: "ns", Name: "never-cached"}}, "", nil, true)
	if wait, _ := l.Wait(owner); wait || l.Pending() != 0 {
		t.Errorf("wait %v with %d pending; want nothing kept", wait, l.Pending())
	}
}

func TestLedger_aDeleteWaitsUntilTheCacheDropsTheObject(t *testing.T) {
	l, c, _, released := newLedger(t)
	c.set(child.Name, "10")
	l.Record(owner, child, "", nil, true)
	if wait, _ := l.Wait(owner); !wait {
		t.Fatal("the owner does not wait for its delete")
	}
	c.set(child.Name, "")
	l.Observe(secrets, child.Name)
	if wait, _ := l.Wait(owner); wait || len(*released) != 1 {
		t.Errorf("after the cache dropped it: wait %v, released %v", wait, *released)
	}
}

func TestLedger_aVersionThatIsNotANumberWaitsForTheBoundAndIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, c, reg, _ := newLedger(t)
		l.Record(owner, child, "opaque-version", nil, false)
		c.set(child.Name, "opaque-version")
		l.Observe(secrets, child.Name)
		wait, atMost := l.Wait(owner)
		if !wait || atMost != 100*time.Millisecond {
			t.Fatalf("Wait = %v, %s; want true, check again in 100ms (versions that cannot be compared wait for the bound)", wait, atMost)
		}
		time.Sleep(5 * time.Second)
		if wait, _ := l.Wait(owner); wait || l.Pending() != 0 {
			t.Errorf("after the bound: wait %v, %d pending; want the key let through", wait, l.Pending())
		}
		if n, _ := metrics.Sum(reg, "ctrlkit_ledger_timeouts_total", nil); n != 1 {
			t.Errorf("timeouts counted: %v, want 1", n)
		}
	})
}

// roundTripper answers every request with resp.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func respond(status int, contentType string, body []byte) roundTripper {
	return func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {contentType}},
			Body: io.NopCloser(bytes.NewReader(body))}, nil
	}
}

func TestTransport_recordsWritesFromJSONAndProtobufResponsesOnlyForOwnedSuccessfulWrites(t *testing.T) {
	created := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "child-x7k2p", ResourceVersion: "42"}}
	var js, pb bytes.Buffer
	jsonCodec := scheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion)
	if err := jsonCodec.Encode(created, &js); err != nil {
		t.Fatal(err)
	}
	info, _ := runtimeSerializer("application/vnd.kubernetes.protobuf")
	if err := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion).Encode(created, &pb); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		rt          roundTripper
		owned       bool
		wantPending int
	}{
		{name: "a JSON create names the generated object", rt: respond(201, "application/json", js.Bytes()), owned: true, wantPending: 1},
		{name: "a protobuf create too", rt: respond(201, "application/vnd.kubernetes.protobuf", pb.Bytes()), owned: true, wantPending: 1},
		{name: "a write without an owner is not recorded", rt: respond(201, "application/json", js.Bytes()), wantPending: 0},
		{name: "a failed write records nothing", rt: respond(409, "application/json", []byte(`{"kind":"Status"}`)), owned: true, wantPending: 0},
		{name: "a body that is no object records nothing", rt: respond(201, "text/plain", []byte("hello")), owned: true, wantPending: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _, _, _ := newLedger(t)
			ctx := context.Background()
			if tc.owned {
				ctx = ledger.WithOwner(ctx, owner)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://x/api/v1/namespaces/ns/secrets", strings.NewReader("{}"))
			resp, err := l.Transport(tc.rt).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := io.ReadAll(resp.Body); len(b) == 0 {
				t.Error("the response body was not handed on")
			}
			if l.Pending() != tc.wantPending {
				t.Errorf("%d owners pending, want %d", l.Pending(), tc.wantPending)
			}
		})
	}
}

func runtimeSerializer(mediaType string) (runtime.SerializerInfo, bool) {
	return runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
}
