package listwatch

import (
	"bufio"
	"bytes"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/ctrlkit/ctrlkit/intern"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/object"
)

func managedPod(withManaged bool) *corev1.Pod {
	now := metav1.Now()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"note": "x"}, Finalizers: []string{"ctrlkit.io/cleanup"}},
		Spec:   corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "web:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if withManaged {
		p.ManagedFields = []metav1.ManagedFieldsEntry{
			{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", Time: &now,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:app":{}}}}`)}},
			{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:phase":{}}}`)}, Subresource: "status"},
		}
	}
	return p
}

// FuzzWithoutManagedFields: whatever the bytes, cutting managedFields (all
// of them, or all but kubelet's) never panics; and bytes as an encoder
// writes them (the input's own decoding, encoded again) cut decode to the
// same object but for managedFields, of which they keep exactly kubelet's
// entries when asked. (On other bytes the generated decoder may read a map
// entry past its end, into what the cut moved: no encoder writes them,
// and the informer strips whatever entries a cut left.)
func FuzzWithoutManagedFields(f *testing.F) {
	for _, p := range []*corev1.Pod{managedPod(true), managedPod(false), {}} {
		b, err := p.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{0x0a, 0x03, 0xba, 0x01, 0x00}) // metadata holding an empty field 23
	f.Fuzz(func(t *testing.T, data []byte) {
		var buf []byte
		withoutManagedFields(data, &buf, intern.ManagedFields{})
		withoutManagedFields(data, &buf, intern.ManagedFields{Of: []string{"kubelet"}})
		var want corev1.Pod
		if want.Unmarshal(data) != nil {
			return
		}
		encoded, err := want.Marshal()
		if err != nil {
			return
		}
		kubelets := slices.DeleteFunc(slices.Clone(want.ManagedFields), func(e metav1.ManagedFieldsEntry) bool { return e.Manager != "kubelet" })
		want.ManagedFields = nil
		for _, keep := range []intern.ManagedFields{{}, {Of: []string{"kubelet"}}} {
			var got corev1.Pod
			if err := got.Unmarshal(withoutManagedFields(encoded, &buf, keep)); err != nil {
				t.Fatalf("the bytes cut to %v do not decode: %v", keep.Of, err)
			}
			if wantKept := kubelets[:len(kubelets)*len(keep.Of)]; !equality.Semantic.DeepEqual(got.ManagedFields, wantKept) {
				t.Fatalf("cut to %v, kept managedFields\n%v\nwant\n%v", keep.Of, got.ManagedFields, wantKept)
			}
			got.ManagedFields = nil
			if !equality.Semantic.DeepEqual(&got, &want) {
				t.Fatalf("bytes cut to %v decode to\n%v\nwant\n%v", keep.Of, &got, &want)
			}
		}
	})
}

func TestWithoutManagedFields_keepsBytesWithoutThem(t *testing.T) {
	b, err := managedPod(false).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var buf []byte
	if cut := withoutManagedFields(b, &buf, intern.ManagedFields{}); &cut[0] != &b[0] || len(cut) != len(b) {
		t.Error("bytes without managedFields were copied")
	}
	with, err := managedPod(true).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if cut := withoutManagedFields(with, &buf, intern.ManagedFields{}); len(cut) != len(b) {
		t.Errorf("cut %d bytes to %d, want %d (the same Pod without them)", len(with), len(cut), len(b))
	}
	both := intern.ManagedFields{Of: []string{"kubectl", "kubelet"}}
	if cut := withoutManagedFields(with, &buf, both); &cut[0] != &with[0] || len(cut) != len(with) {
		t.Error("bytes whose every managedFields entry is kept were copied")
	}
}

// watchOf starts a decodedWatch of dec over body.
func watchOf[T object.Object](dec *decoder[T], body []byte) *decodedWatch[T] {
	w := &decodedWatch[T]{d: dec, body: io.NopCloser(bytes.NewReader(body)), r: bufio.NewReader(bytes.NewReader(body)),
		out: make(chan watch.Event), done: make(chan struct{})}
	go w.run()
	return w
}

// frame encodes a watch event as the API server frames it in protobuf.
func frame(t *testing.T, typ watch.EventType, cm *corev1.ConfigMap) []byte {
	t.Helper()
	info, _ := runtime.SerializerInfoForMediaType(clientgoscheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	var obj, ev, out bytes.Buffer
	if err := clientgoscheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion).Encode(cm, &obj); err != nil {
		t.Fatal(err)
	}
	we := metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: obj.Bytes()}}
	if err := info.StreamSerializer.Serializer.Encode(&we, &ev); err != nil {
		t.Fatal(err)
	}
	if _, err := info.StreamSerializer.Framer.NewFrameWriter(&out).Write(ev.Bytes()); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func configMapDecoder(t *testing.T) *decoder[*corev1.ConfigMap] {
	t.Helper()
	k := &KindListerWatcher[*corev1.ConfigMap]{gvk: corev1.SchemeGroupVersion.WithKind("ConfigMap"),
		d: Discovery{Serializer: serializer.NewCodecFactory(clientgoscheme.Scheme).WithoutConversion()}}
	dec, ok := direct(k)
	if !ok {
		t.Fatal("ConfigMap is not decoded directly")
	}
	return dec
}

func TestDecodedWatch_anEventKeepsItsObjectWhenTheNextReusesTheFrame(t *testing.T) {
	leakcheck.Check(t)
	cm := func(name, value string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "7",
			Labels: map[string]string{"app": value}}, Data: map[string]string{"k": value},
			BinaryData: map[string][]byte{"b": []byte(value)}}
	}
	w := watchOf(configMapDecoder(t), slices.Concat(frame(t, watch.Added, cm("first", "aaaaaaaa")),
		frame(t, watch.Modified, cm("other", "bbbbbbbb"))))
	defer w.Stop()
	first, second := <-w.ResultChan(), <-w.ResultChan()
	got, ok := first.Object.(*corev1.ConfigMap)
	if !ok || !equality.Semantic.DeepEqual(got, cm("first", "aaaaaaaa")) {
		t.Errorf("first event's object after the second was read: %v", first.Object)
	}
	if got, ok := second.Object.(*corev1.ConfigMap); !ok || got.Name != "other" {
		t.Errorf("second event: %v", second.Object)
	}
}

func TestDecodedWatch_aFrameLargerThanTheLimitEndsTheWatchWithAnError(t *testing.T) {
	leakcheck.Check(t)
	w := watchOf(configMapDecoder(t), []byte{0xff, 0xff, 0xff, 0xff, 0x0a})
	defer w.Stop()
	ev := <-w.ResultChan()
	st, ok := ev.Object.(*metav1.Status)
	if ev.Type != watch.Error || !ok || !strings.Contains(st.Message, "larger than") {
		t.Fatalf("got %s %v, want an ERROR event naming the frame's size", ev.Type, ev.Object)
	}
	if _, open := <-w.ResultChan(); open {
		t.Error("the watch went on after a broken frame")
	}
}

func TestStartsList_isAListsFirstPageOrAWatchWithInitialEvents(t *testing.T) {
	for query, want := range map[string]bool{
		"limit=500":                                   true,
		"limit=500&continue=abc":                      false,
		"watch=true&resourceVersion=7":                false,
		"watch=1&allowWatchBookmarks=true":            false,
		"watch=true&sendInitialEvents=true":           true,
		"labelSelector=app%3Dweb&resourceVersion=0":   true,
		"watch=false&limit=1":                         true,
		"watch=true&sendInitialEvents=false&limit=10": false,
	} {
		q, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		if got := startsList(q); got != want {
			t.Errorf("startsList(%q) = %v, want %v", query, got, want)
		}
	}
}

func TestEventType_NamesTheKnownTypesWithoutAllocating(t *testing.T) {
	for _, want := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error, "SOMETHING"} {
		if got := eventType([]byte(want)); got != string(want) {
			t.Errorf("eventType(%q) = %q", want, got)
		}
	}
	if got := eventType([]byte("MODIFIED")); unsafe.StringData(got) != unsafe.StringData(string(watch.Modified)) {
		t.Error("eventType(MODIFIED) is a copy, not the constant") // a copy allocates once per event
	}
}

// A frame of a type no server sends ends the watch with an error event
// naming it, as client-go's decoder does; the objects before it arrive.
func TestDecodedWatch_endsAtAnEventOfUnknownType(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "7"}}
	var body bytes.Buffer
	body.Write(frame(t, watch.Added, cm))
	body.Write(frame(t, watch.EventType("X-"+strings.Repeat("z", 1000)), cm))
	body.Write(frame(t, watch.Modified, cm))
	w := watchOf(configMapDecoder(t), body.Bytes())
	defer w.Stop()
	if ev := <-w.ResultChan(); ev.Type != watch.Added {
		t.Fatalf("first event %v; want ADDED", ev.Type)
	}
	ev := <-w.ResultChan()
	st, ok := ev.Object.(*metav1.Status)
	if ev.Type != watch.Error || !ok || !strings.Contains(st.Message, "unknown type") || len(st.Message) > 300 {
		t.Fatalf("second event %v %+v; want ERROR naming the unknown type, shortened", ev.Type, ev.Object)
	}
	if ev, open := <-w.ResultChan(); open {
		t.Errorf("after the error: %v; want the watch ended", ev.Type)
	}
}

// A server answering a watch in JSON (its choice) gets the bound protobuf
// frames have: an event past 16 MiB fails the watch, unread; and an object
// whose JSON would decode into far more than its bytes (an array of "{},",
// each a struct) is refused before it is decoded: an undecodable item, in
// a list as in a watch (the reflector reports it, and the watch goes on).
func TestDecodedWatch_boundsAJSONEventsBytesAndWhatItWouldTakeDecoded(t *testing.T) {
	leakcheck.Check(t)
	event := func(object string) []byte {
		return []byte(`{"type":"ADDED","object":` + object + "}\n")
	}
	small := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ok","namespace":"ns","resourceVersion":"8"}}`
	big := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big","namespace":"ns","resourceVersion":"7"},"data":{"k":"` +
		strings.Repeat("a", maxFrame+1) + `"}}`
	dense := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dense","namespace":"ns","resourceVersion":"7",` +
		`"managedFields":[` + strings.Repeat(`{},`, 400_000) + `{}]}}`
	t.Run("more than 16 MiB", func(t *testing.T) {
		w := watchOf(configMapDecoder(t), append(event(big), event(small)...))
		defer w.Stop()
		ev := <-w.ResultChan()
		if st, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || !strings.Contains(st.Message, "larger than 16777216 bytes") {
			t.Fatalf("event %s %T %v; want an error event naming the bound", ev.Type, ev.Object, ev.Object)
		}
		if _, open := <-w.ResultChan(); open {
			t.Error("the watch went on after an event it could not read")
		}
	})
	t.Run("1.2 MB that would decode to hundreds", func(t *testing.T) {
		w := watchOf(configMapDecoder(t), append(event(dense), event(small)...))
		defer w.Stop()
		ev := <-w.ResultChan()
		if u, ok := ev.Object.(*undecodable); !ok || !strings.Contains(u.err.Error(), "would take about") {
			t.Fatalf("event %s %T %v; want an undecodable object refused by its estimate", ev.Type, ev.Object, ev.Object)
		}
		if ev := <-w.ResultChan(); ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != "ok" {
			t.Errorf("the next event is %s %v; want the small ConfigMap: the watch goes on", ev.Type, ev.Object)
		}
	})
	p, err := configMapDecoder(t).decodePage([]byte(`{"apiVersion":"v1","kind":"ConfigMapList","metadata":{"resourceVersion":"9"},` +
		`"items":[` + small + `,` + dense + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 2 {
		t.Fatalf("%d items, want 2", len(p.Items))
	}
	if cm, ok := p.Items[0].(*corev1.ConfigMap); !ok || cm.Name != "ok" {
		t.Errorf("the small item is %T %v", p.Items[0], p.Items[0])
	}
	if u, ok := p.Items[1].(*undecodable); !ok || !strings.Contains(u.err.Error(), "would take about") {
		t.Errorf("the dense item is %T %v; want it undecodable, refused by its estimate", p.Items[1], p.Items[1])
	}
}
