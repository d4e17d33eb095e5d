package listwatch

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/ctrlkit/ctrlkit/intern"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/projection"
)

// protoMessage is a type with generated protobuf decoding, as every type
// of Kubernetes' own API has.
type protoMessage interface{ Unmarshal([]byte) error }

// direct returns the decoder of Kind for T when T is one of Kubernetes' own
// types, which the API server sends in protobuf: each object is decoded by
// T's generated Unmarshal straight from the list page or watch frame, with
// none of the copies the REST client's decoding makes on the way (the
// watch event's raw object, the envelope's raw bytes), and, unless
// opts.KeepManagedFields, without its metadata.managedFields, which are
// cut from the bytes before decoding (an informer would strip them after).
// A JSON response (a server that does not send protobuf) is decoded by
// d.Serializer's JSON serializer, as the REST client would, and its
// managedFields dropped after. It reports
// false for any other T, which Kind reads through the REST client.
func direct[T object.Object](k *KindListerWatcher[T]) (*decoder[T], bool) {
	typ := reflect.TypeFor[T]()
	if typ.Kind() != reflect.Pointer || typ.Elem().Kind() != reflect.Struct || !clientgoscheme.Scheme.IsVersionRegistered(k.gvk.GroupVersion()) {
		return nil, false
	}
	if _, ok := reflect.Zero(typ).Interface().(protoMessage); !ok {
		return nil, false
	}
	if k.d.Serializer == nil {
		return nil, false // the REST client reports it at the first request
	}
	var js runtime.Decoder
	for _, info := range k.d.Serializer.SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeJSON {
			js = info.Serializer
		}
	}
	if js == nil {
		return nil, false
	}
	metaFirst := metadataIsField1(typ.Elem())
	k.interner.possible = metaFirst
	item := protobufItem(k, metaFirst)
	kind := k.gvk.Kind
	return &decoder[T]{k: k, item: item, as: "a " + kind,
		envelope: func(b []byte) (T, error) {
			env, err := projection.Unwrap(b)
			if err == nil && env.Kind != "" && env.Kind != kind {
				err = fmt.Errorf("the object is a %s, not a %s", env.Kind, kind)
			}
			if err != nil {
				var zero T
				return zero, err
			}
			return item(env.Raw)
		},
		fromJSON: jsonItem(k, js),
	}, true
}

// protobufItem decodes one object's protobuf encoding, interning its
// metadata as it goes when the interner is on; with metaFirst (metadata
// being field 1) the managed fields the options do not keep are cut from
// the bytes first when it is off.
func protobufItem[T object.Object](k *KindListerWatcher[T], metaFirst bool) func([]byte) (T, error) {
	elem, in, keep := reflect.TypeFor[T]().Elem(), &k.interner, k.opts.managedFields()
	strip := metaFirst && !keep.All
	return func(b []byte) (T, error) {
		obj := reflect.New(elem).Interface().(T)
		keep := keep.Now() // one set for all of this object's entries
		if in.on.Load() {
			if ok, err := in.unmarshal(b, any(obj).(protoMessage), intern.MetaOf(obj), keep); ok {
				return obj, err
			}
		}
		if strip {
			buf := scratch.Get().(*[]byte)
			defer scratch.Put(buf)
			b = withoutManagedFields(b, buf, keep)
		}
		err := any(obj).(protoMessage).Unmarshal(b)
		if err == nil {
			in.meta(obj) // laid out otherwise, or refused by the table: interned after
		}
		return obj, err
	}
}

// jsonItem decodes one object's JSON encoding with js, as the REST client
// would.
func jsonItem[T object.Object](k *KindListerWatcher[T], js runtime.Decoder) func([]byte) (T, error) {
	elem, in, keep := reflect.TypeFor[T]().Elem(), &k.interner, k.opts.managedFields()
	return func(b []byte) (T, error) {
		obj := reflect.New(elem).Interface().(T)
		keep := keep.Now()
		out, gvk, err := js.Decode(b, nil, any(obj).(runtime.Object))
		if err == nil && out != any(obj).(runtime.Object) {
			err = fmt.Errorf("the object is a %s, not a %s", gvk.Kind, k.gvk.Kind)
		}
		any(obj).(runtime.Object).GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{}) // as the REST client's decoding leaves it
		if m, ok := any(obj).(metav1.Object); ok && !keep.All {
			kept := slices.DeleteFunc(m.GetManagedFields(), func(e metav1.ManagedFieldsEntry) bool {
				return !keep.KeepsManager(e.Manager)
			})
			if len(kept) == 0 {
				kept = nil // as the REST client's decoding leaves an object without them
			}
			m.SetManagedFields(kept)
		}
		if err == nil {
			in.meta(obj)
		}
		return obj, err
	}
}

// metaInterner interns the metadata of the objects Kind decodes itself,
// once InternMetadata turned it on. List pages and watches decode on
// different goroutines, and a table is not safe for concurrent use: mu
// guards it.
type metaInterner struct {
	possible bool // T's metadata is its protobuf field 1 (set before Kind returns)
	on       atomic.Bool
	mu       sync.Mutex
	table    *intern.Table
}

// unmarshal decodes b into obj, with the metadata (into m) interned as it
// decodes, when b is laid out as encoders write an object: the metadata its
// first field, and only once. ok is false, with obj untouched, when it is
// not or the metadata does not decode here; the generated decoder then
// decodes it (or reports what is wrong) as usual.
func (in *metaInterner) unmarshal(b []byte, obj protoMessage, m *metav1.ObjectMeta, keep intern.ManagedFields) (ok bool, err error) {
	if m == nil {
		return false, nil
	}
	in.mu.Lock()
	rest, ok := in.table.UnmarshalLeadingMeta(b, m, keep)
	in.mu.Unlock()
	if !ok {
		return false, nil
	}
	return true, obj.Unmarshal(rest)
}

// meta interns the metadata of obj (an object the table did not decode),
// if interning is on.
func (in *metaInterner) meta(obj any) {
	if !in.on.Load() {
		return
	}
	m := intern.MetaOf(obj)
	if m == nil {
		return
	}
	in.mu.Lock()
	in.table.Meta(m)
	in.mu.Unlock()
}

// scratch holds buffers for withoutManagedFields.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

// metadataIsField1 reports whether the struct t has its ObjectMeta as
// protobuf field 1, as Kubernetes' types do.
func metadataIsField1(t reflect.Type) bool {
	f, ok := t.FieldByName("ObjectMeta")
	return ok && strings.HasPrefix(f.Tag.Get("protobuf"), "bytes,1,")
}

// withoutManagedFields returns obj, an object's protobuf encoding, without
// the entries of metadata.managedFields (field 17 of ObjectMeta, field 1
// of the object) keep does not keep, built in *buf; obj itself when it
// has none to cut or does not parse (Unmarshal then reports what is wrong,
// or the entries are stripped after decoding). Encoders write fields in
// order, so managedFields are one run at the end of the metadata: the copy
// is of the bytes around that run, and of the entries kept in it.
func withoutManagedFields(obj []byte, buf *[]byte, keep intern.ManagedFields) []byte {
	num, wt, meta, start, n := nextField(obj, 0)
	for num != 1 || wt != protowire.BytesType {
		if n <= 0 {
			return obj
		}
		num, wt, meta, start, n = nextField(obj, start+n)
	}
	// meta is [metaStart, start+n) in obj: find the run of field 17 in it,
	// and the length of the entries kept.
	metaStart := start + n - len(meta)
	from, to, kept := -1, -1, 0
	for off := 0; off < len(meta); {
		f, _, v, at, m := nextField(meta, off)
		if m <= 0 {
			return obj
		}
		switch {
		case f == 17 && to != -1:
			return obj // a second run: not as an encoder writes; leave it to the informer's strip
		case f == 17:
			if from == -1 {
				from = at
			}
			if keep.Keeps(v) {
				kept += m
			}
		case from != -1 && to == -1:
			to = at
		}
		off = at + m
	}
	if from == -1 {
		return obj
	}
	if to == -1 {
		to = len(meta)
	}
	if kept == to-from {
		return obj // every entry kept
	}
	b := append((*buf)[:0], obj[:start]...)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(meta)-(to-from)+kept))
	b = append(b, obj[metaStart:metaStart+from]...)
	for off := from; kept > 0 && off < to; {
		_, _, v, at, m := nextField(meta, off)
		if keep.Keeps(v) {
			b = append(b, meta[at:at+m]...)
		}
		off = at + m
	}
	b = append(b, obj[metaStart+to:]...)
	*buf = b
	return b
}

// nextField reads the field of b at off: its number and wire type, its
// value when it is length-delimited, where it starts and its whole length;
// n is 0 at the end of b and negative where b does not parse.
func nextField(b []byte, off int) (num protowire.Number, wt protowire.Type, value []byte, at, n int) {
	if off >= len(b) {
		return 0, 0, nil, off, 0
	}
	num, wt, t := protowire.ConsumeTag(b[off:])
	if t < 0 {
		return 0, 0, nil, off, -1
	}
	var m int
	switch wt {
	case protowire.BytesType:
		value, m = protowire.ConsumeBytes(b[off+t:])
	case protowire.VarintType:
		_, m = protowire.ConsumeVarint(b[off+t:])
	default:
		m = protowire.ConsumeFieldValue(num, wt, b[off+t:])
	}
	if m < 0 {
		return 0, 0, nil, off, -1
	}
	return num, wt, value, off, t + m
}

// errMalformed is a protobuf message that does not parse.
var errMalformed = errors.New("malformed protobuf")

// eachField calls fn with each field of the message b (value as in
// nextField) until fn returns an error, which it returns; errMalformed
// where b does not parse.
func eachField(b []byte, fn func(num protowire.Number, wt protowire.Type, value []byte) error) error {
	for off := 0; off < len(b); {
		num, wt, v, at, n := nextField(b, off)
		if n <= 0 {
			return errMalformed
		}
		if err := fn(num, wt, v); err != nil {
			return err
		}
		off = at + n
	}
	return nil
}
