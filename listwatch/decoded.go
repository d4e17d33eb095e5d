package listwatch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/internal/jsoncost"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/projection"
)

// Projected lists and watches the kind of the full type F (its group,
// version and kind gvk, resolved by discovery as Kind does) and decodes
// every object straight from the wire into the projection P, a type
// holding only the fields a controller reads (see package projection):
// the full object is never built. Kubernetes' own types are read in
// protobuf, others in JSON. P embeds metav1.TypeMeta and metav1.ObjectMeta
// and has a DeepCopyObject (controller-gen's object:root), like any API
// type: watch events carry it and the reflector reads its metadata.
// A P that does not fit F (a field F lacks, a type mismatch) is an error
// here, not at the first event.
func Projected[P object.Object, F any](d Discovery, gvk schema.GroupVersionKind, opts KindOptions) (*KindListerWatcher[P], error) {
	var skip []projection.Option
	if keep := opts.managedFields(); keep.None() {
		skip = append(skip, projection.SkipManagedFields())
	}
	plan, err := projection.New[P, F](skip...)
	if err != nil {
		return nil, err
	}
	var zero P
	if _, ok := any(zero).(runtime.Object); !ok {
		return nil, fmt.Errorf("listwatch: projection %T is not a runtime.Object (embed metav1.TypeMeta and generate DeepCopyObject)", zero)
	}
	if _, ok := any(zero).(metav1.Object); !ok {
		return nil, fmt.Errorf("listwatch: projection %T has no metav1.Object methods (embed metav1.ObjectMeta): "+
			"the reflector reads names, resource versions and watch-list bookmarks through them", zero)
	}
	k := &KindListerWatcher[P]{d: d, gvk: gvk, opts: opts}
	dec := &decoder[P]{k: k, item: plan.Decode, envelope: plan.DecodeEnvelope, fromJSON: plan.DecodeJSON, as: "a projection"}
	k.lw = New[P](dec.list, dec.watch, opts.Options)
	return k, nil
}

// decoder lists and watches a kind with its own decoding in place of the
// REST client's: list pages, watch frames and envelopes are read where
// they lie in the body, and only each object's bytes are decoded, by item
// (protobuf, an object inside a list), envelope (protobuf, an object in
// its own envelope, as in a watch event) or fromJSON. Every decoding
// function copies what it keeps: a body's buffer is reused.
type decoder[P object.Object] struct {
	k        *KindListerWatcher[P]
	item     func([]byte) (P, error)
	envelope func([]byte) (P, error)
	fromJSON func([]byte) (P, error)
	as       string // what the objects are decoded as, for errors: "a projection"

	mu   sync.Mutex
	page []byte // a list page's body buffer, kept for the list's next page
}

// maxKeptPage bounds the page buffer a decoder keeps between the pages of
// a list.
const maxKeptPage = 32 << 20

// readPage reads a list page's body into the buffer the pages of one list
// share (every decoding function copies what it keeps), instead of a new
// one grown by doubling for each page: on a 100,000-object list that was
// half of what a sync allocated.
func (d *decoder[P]) readPage(rc io.ReadCloser) ([]byte, error) {
	defer rc.Close()
	d.mu.Lock()
	buf := d.page
	d.page = nil
	d.mu.Unlock()
	b := bytes.NewBuffer(buf[:0])
	_, err := b.ReadFrom(rc)
	return b.Bytes(), err
}

// keepPage keeps buf for the list's next page; after a list's last page
// it is dropped, so that an informer between lists holds none (but for a
// list given up halfway, whose buffer waits for the next list).
func (d *decoder[P]) keepPage(buf []byte, more bool) {
	if !more || cap(buf) > maxKeptPage {
		return
	}
	d.mu.Lock()
	d.page = buf[:0]
	d.mu.Unlock()
}

// page is one decoded list page, shaped as the list object New reads: its
// items are projections, or undecodable for those that did not decode.
type page[P object.Object] struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

// undecodable stands for an object that did not decode as the projection:
// the reflector skips it, counted, and goes on.
type undecodable struct {
	metav1.TypeMeta
	err error
}

func (u *undecodable) Undecodable() error             { return u.err }
func (u *undecodable) DeepCopyObject() runtime.Object { return u }

// item is obj as a list item, or an undecodable one.
func item[P object.Object](obj P, err error) runtime.Object {
	if err != nil {
		return &undecodable{err: err}
	}
	return any(obj).(runtime.Object)
}

// DeepCopyObject returns a shallow copy: a page is read once, never
// shared or changed.
func (p *page[P]) DeepCopyObject() runtime.Object { c := *p; return &c }

func (d *decoder[P]) list(ctx context.Context, opts metav1.ListOptions) (*page[P], error) {
	req, err := d.k.request(ctx, &opts)
	if err != nil {
		return nil, err
	}
	rc, err := req.Stream(ctx) // an error carries the server's Status, as the REST client's Get reports it
	if err != nil {
		return nil, err
	}
	body, err := d.readPage(rc)
	if err != nil {
		return nil, fmt.Errorf("listwatch: reading a list of %s: %w", d.k.gvk.Kind, err)
	}
	out, err := d.decodePage(body)
	if err == nil {
		d.keepPage(body, out.Continue != "")
	}
	return out, err
}

// decodePage decodes a list page's body, protobuf or JSON.
func (d *decoder[P]) decodePage(body []byte) (*page[P], error) {
	if isProtobuf(body) {
		env, err := projection.Unwrap(body)
		if err != nil {
			return nil, err
		}
		out := &page[P]{}
		if err := listFields(env.Raw, &out.ListMeta, func(raw []byte) {
			out.Items = append(out.Items, item(d.item(raw)))
		}); err != nil {
			return nil, fmt.Errorf("listwatch: decoding a list of %s: %w", d.k.gvk.Kind, err)
		}
		return out, nil
	}
	var l struct {
		Metadata metav1.ListMeta   `json:"metadata"`
		Items    []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("listwatch: decoding a list of %s: %w", d.k.gvk.Kind, err)
	}
	out := &page[P]{ListMeta: l.Metadata, Items: make([]runtime.Object, 0, len(l.Items))}
	for _, raw := range l.Items {
		out.Items = append(out.Items, item(d.decodeJSON(raw)))
	}
	return out, nil
}

// listFields reads a list's protobuf encoding: its metadata (field 1, a
// ListMeta) into meta, each item's bytes (field 2) to each.
func listFields(b []byte, meta *metav1.ListMeta, each func([]byte)) error {
	return eachField(b, func(num protowire.Number, wt protowire.Type, v []byte) error {
		switch {
		case wt != protowire.BytesType:
		case num == 1:
			return meta.Unmarshal(v)
		case num == 2:
			each(v)
		}
		return nil
	})
}

func (d *decoder[P]) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	req, err := d.k.request(ctx, &opts)
	if err != nil {
		return nil, err
	}
	body, err := req.Throttle(nil).Stream(ctx) // a watch waits on no client-side rate limiter, as the REST client's Watch
	if err != nil {
		return nil, err
	}
	// The decoder runs up to watchAhead events ahead of the reflector, so a
	// burst is not handed over one rendezvous at a time.
	w := &decodedWatch[P]{d: d, body: body, r: bufio.NewReaderSize(body, 16<<10),
		out: make(chan watch.Event, watchAhead), done: make(chan struct{})}
	go w.run()
	return w, nil
}

// watchAhead is how many decoded events a watch holds for its reader.
const watchAhead = 64

// isProtobuf reports whether a response body is Kubernetes protobuf.
func isProtobuf(body []byte) bool { return bytes.HasPrefix(body, []byte("k8s\x00")) }

// decodedWatch decodes a watch stream, protobuf frames or JSON, into
// events carrying the decoder's objects.
type decodedWatch[P object.Object] struct {
	d     *decoder[P]
	body  io.ReadCloser
	r     *bufio.Reader
	frame []byte // the last protobuf frame read; reused
	out   chan watch.Event
	done  chan struct{}
	stop  sync.Once
}

func (w *decodedWatch[P]) ResultChan() <-chan watch.Event { return w.out }

func (w *decodedWatch[P]) Stop() {
	w.stop.Do(func() {
		close(w.done)
		w.body.Close()
	})
}

// run reads events until the stream ends or Stop; a frame that does not
// decode ends the watch with an error event (the reflector watches again
// or relists).
func (w *decodedWatch[P]) run() {
	defer close(w.out)
	defer w.body.Close()
	first, err := w.r.Peek(1)
	if err != nil {
		return
	}
	next := w.nextProtobuf
	if first[0] == '{' {
		lim := &eventBytes{r: w.r}
		next = w.nextJSON(json.NewDecoder(lim), lim)
	}
	for {
		select {
		case <-w.done: // stopped: decode nothing more for the buffer
			return
		default:
		}
		ev, err := next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			select {
			case <-w.done:
				return
			default:
			}
			ev = watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure,
				Message: "listwatch: a watch event did not decode as " + w.d.as + ": " + err.Error(), Reason: metav1.StatusReasonInternalError}}
		}
		select {
		case w.out <- ev:
		case <-w.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// maxFrame bounds a watch frame, as the REST client's stream decoder does:
// a length beyond it is a broken stream, not an object to allocate for. A
// JSON watch event is bounded alike (eventBytes).
const maxFrame = 16 << 20

// maxDecodedJSON bounds what one object's JSON may take decoded, as
// jsoncost estimates it: a server's few bytes of "{}," or "null," decode
// into structs of hundreds of bytes each, so bounding bytes alone does not
// bound the heap. An ordinary object estimates far below it; one of over a
// hundred thousand list entries (a 3 MiB array of small numbers) does not.
const maxDecodedJSON = 4 * maxFrame

// decodeJSON decodes one object's JSON with fromJSON, unless its estimated
// decoded size is over maxDecodedJSON.
func (d *decoder[P]) decodeJSON(raw []byte) (P, error) {
	if jsoncost.MaxEstimate(len(raw)) <= maxDecodedJSON {
		return d.fromJSON(raw) // too small to be over: not read twice (about 0.8 µs a Pod's JSON)
	}
	if est := jsoncost.Estimate(raw); est > maxDecodedJSON {
		var zero P
		return zero, fmt.Errorf("an object of %d bytes of JSON would take about %d decoded, more than %d: "+
			"too many objects and elements for its size", len(raw), est, maxDecodedJSON)
	}
	return d.fromJSON(raw)
}

// eventBytes bounds the bytes a JSON watch decoder reads for one event:
// reset to maxFrame before each, a read past it fails the event (and the
// watch), where the decoder would otherwise buffer an event without end.
type eventBytes struct {
	r    io.Reader
	left int64
}

func (e *eventBytes) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, fmt.Errorf("a JSON watch event larger than %d bytes", maxFrame)
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	return n, err
}

// nextProtobuf reads one length-prefixed frame: a WatchEvent, without an
// envelope (type 1, object 2: a RawExtension whose raw 1 is the object
// in its own envelope).
func (w *decodedWatch[P]) nextProtobuf() (watch.Event, error) {
	var size [4]byte
	if _, err := io.ReadFull(w.r, size[:]); err != nil {
		return watch.Event{}, io.EOF // the stream ended (or was stopped)
	}
	n := int64(binary.BigEndian.Uint32(size[:]))
	if n > maxFrame {
		return watch.Event{}, fmt.Errorf("a watch frame of %d bytes is larger than %d", n, maxFrame)
	}
	if int64(cap(w.frame)) < n {
		w.frame = make([]byte, n)
	}
	frame := w.frame[:n]
	if _, err := io.ReadFull(w.r, frame); err != nil {
		return watch.Event{}, io.EOF
	}
	typ, raw, err := watchEventFields(frame) // a frame has no envelope; the object inside has its own
	if err != nil {
		return watch.Event{}, err
	}
	return w.event(typ, raw, true)
}

// watchEventFields reads a WatchEvent's type and its object's raw bytes.
func watchEventFields(b []byte) (typ string, raw []byte, err error) {
	err = eachField(b, func(num protowire.Number, wt protowire.Type, v []byte) error {
		switch {
		case wt != protowire.BytesType:
		case num == 1:
			typ = eventType(v)
		case num == 2: // RawExtension{raw = 1}
			return eachField(v, func(num protowire.Number, wt protowire.Type, v []byte) error {
				if num == 1 && wt == protowire.BytesType {
					raw = v
				}
				return nil
			})
		}
		return nil
	})
	return typ, raw, err
}

// eventType returns the watch event type v names; the known ones without
// allocating.
func eventType(v []byte) string {
	for _, t := range [...]watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error} {
		if string(t) == string(v) {
			return string(t)
		}
	}
	return string(v)
}

// nextJSON returns a reader of JSON watch events, each read within
// maxFrame bytes through lim.
func (w *decodedWatch[P]) nextJSON(dec *json.Decoder, lim *eventBytes) func() (watch.Event, error) {
	return func() (watch.Event, error) {
		lim.left = maxFrame
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return watch.Event{}, io.EOF
			}
			select {
			case <-w.done:
				return watch.Event{}, io.EOF
			default:
			}
			return watch.Event{}, err
		}
		return w.event(ev.Type, ev.Object, false)
	}
}

// event decodes an event's object: a Status for ERROR, the decoder's
// object for ADDED, MODIFIED, DELETED and BOOKMARK; another type is an
// error (the watch ends, and is made again).
func (w *decodedWatch[P]) event(typ string, raw []byte, protobuf bool) (watch.Event, error) {
	if watch.EventType(typ) == watch.Error {
		st := &metav1.Status{}
		var err error
		if protobuf {
			var env projection.Envelope
			if env, err = projection.Unwrap(raw); err == nil {
				err = st.Unmarshal(env.Raw)
			}
		} else {
			err = json.Unmarshal(raw, st)
		}
		return watch.Event{Type: watch.Error, Object: st}, err
	}
	switch watch.EventType(typ) {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
	default: // as client-go's decoder: a server that sends one is broken, or not a server
		return watch.Event{}, fmt.Errorf("a watch event of unknown type %.64q", typ)
	}
	var obj P
	var err error
	if protobuf {
		obj, err = w.d.envelope(raw)
	} else {
		obj, err = w.d.decodeJSON(raw)
	}
	return watch.Event{Type: watch.EventType(typ), Object: item(obj, err)}, nil
}
