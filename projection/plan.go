package projection

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Plan is what New compiled for a projection P against a full type: for
// each field of P, where F puts it on the wire. A Plan is immutable and safe
// for concurrent use.
type Plan[P any] struct {
	root  *message
	elem  reflect.Type // the struct P points to
	fName string       // F's type name, the kind DecodeEnvelope expects
	json  *jsonObject
	// kind and apiVersion are the offsets of P's TypeMeta fields, filled by
	// DecodeEnvelope (protobuf carries them in the envelope, not the
	// object); -1 when P has none.
	kind, apiVersion int
	// jsonOnly: F has no protobuf encoding (a custom resource); only
	// DecodeJSON decodes.
	jsonOnly bool
}

// ErrNoProtobuf is the error of a protobuf decode with a plan whose full
// type has no protobuf encoding, such as a custom resource's Go type.
var ErrNoProtobuf = errors.New("projection: the full type has no protobuf encoding (a custom resource?): decode JSON")

// New compiles the plan of projection P (a pointer to a struct) against the
// full type F (a pointer to a struct generated with protobuf tags, such as
// *corev1.Pod). Each exported field of P is matched by its json name (the Go
// name when untagged or when json:"-" hides a field protobuf sends; other
// json:"-" fields are ignored) to F's field, and must have the same Go kind,
// pointers aside. kind and apiVersion (an embedded metav1.TypeMeta) are not
// in an object's protobuf: DecodeEnvelope fills the top level's, nested
// ones stay empty, as in F. A full type without protobuf tags (a custom
// resource's Go type) gives a plan that decodes JSON only, its fields
// checked by name and kind all the same. Types whose protobuf encoding
// is custom (metav1.Time, metav1.MicroTime, resource.Quantity, ...) must be
// used as F declares them. The error names the path of every field that
// does not match, and why.
func New[P, F any](opts ...Option) (*Plan[P], error) {
	pt, ft := reflect.TypeFor[P](), reflect.TypeFor[F]()
	if pt.Kind() != reflect.Pointer || pt.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("projection: P is %s, want a pointer to a struct", pt)
	}
	if ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	if ft.Kind() != reflect.Struct {
		return nil, fmt.Errorf("projection: F is %s, want a pointer to a struct", ft)
	}
	c := compiler{memo: map[[2]reflect.Type]*message{}, jsonOnly: !onWire(ft)}
	for _, o := range opts {
		o(&c)
	}
	plan := &Plan[P]{elem: pt.Elem(), fName: ft.Name(), kind: -1, apiVersion: -1, jsonOnly: c.jsonOnly}
	plan.root = c.message(pt.Elem(), ft, pt.Elem().Name(), plan)
	plan.json = jsonPlan(pt.Elem(), pt.Elem().Name(), map[reflect.Type]*jsonObject{})
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("projection: %s", strings.Join(c.errs, "; "))
	}
	return plan, nil
}

// onWire reports whether the struct f has a protobuf encoding: a field of
// its own with a protobuf tag (Kubernetes' generated types have them;
// custom resources' types do not).
func onWire(f reflect.Type) bool {
	for i := range f.NumField() {
		if t := f.Field(i).Tag.Get("protobuf"); t != "" && t != "-" {
			return true
		}
	}
	return false
}

// kind is how one value is decoded.
type kind uint8

const (
	kString kind = iota
	kBytes
	kBool
	kInt32
	kInt64
	kUint32
	kUint64
	kFloat32
	kFloat64
	kMessage   // a struct, by its sub-plan
	kTime      // metav1.Time: a Timestamp, seconds only, in local time
	kUnmarshal // a type with custom encoding, by its own Unmarshal method
)

// shape is how a field holds its values.
type shape uint8

const (
	single   shape = iota
	list           // a slice, one wire record per element (or packed scalars)
	mapping        // a map, one entry message per element (key 1, value 2)
	embedded       // F's inline struct: its own message, decoded into the same P struct
)

// value describes one decoded value of P.
type value struct {
	kind kind
	wire wireType
	ptr  bool         // P holds *T; T is allocated when the field is seen
	typ  reflect.Type // T
	sub  *message     // kMessage
}

// field is one field of P with its place on the wire.
type field struct {
	num   uint32
	path  string
	off   uintptr // in the struct the enclosing message decodes into
	shape shape
	typ   reflect.Type // P's slice or map type
	val   value        // the element, the map value or the single value
	fast  bool         // map[string]string
}

// message is the plan of one protobuf message: the fields to decode by
// number; every other number is skipped.
type message struct {
	path   string
	fields []*field // indexed by field number; nil: skipped
}

func (m *message) lookup(num uint64) *field {
	if num < uint64(len(m.fields)) {
		return m.fields[num]
	}
	return nil
}

func (m *message) add(f *field) {
	if int(f.num) >= len(m.fields) {
		m.fields = slices.Grow(m.fields, int(f.num)+1-len(m.fields))[:f.num+1]
	}
	m.fields[f.num] = f
}

type compiler struct {
	memo map[[2]reflect.Type]*message
	errs []string
	// jsonOnly compiles against a type with no protobuf encoding (a
	// custom resource's): fields are checked by json name and kind, and
	// get numbers of their own that no wire carries.
	jsonOnly bool
	fake     uint32
	// skipManaged leaves metav1.ObjectMeta's managedFields out of the plan.
	skipManaged bool
}

// Option changes how New compiles a plan.
type Option func(*compiler)

// SkipManagedFields leaves metadata.managedFields out of the plan even when
// P declares them (it embeds metav1.ObjectMeta): they are skipped on the
// wire like any field P lacks. They are the larger part of a typical
// object's metadata, and informers drop them anyway unless told to keep
// them.
func SkipManagedFields() Option { return func(c *compiler) { c.skipManaged = true } }

var objectMetaType = reflect.TypeFor[metav1.ObjectMeta]()

func (c *compiler) fail(path, format string, args ...any) {
	c.errs = append(c.errs, path+": "+fmt.Sprintf(format, args...))
}

// pField is a field of P, inline embedded structs flattened.
type pField struct {
	name string
	off  uintptr
	typ  reflect.Type
}

// fField is a field of F: the protobuf tags of the inline structs it sits
// in (hops), its own tag, and whether it is on the wire at all.
type fField struct {
	typ    reflect.Type
	tag    reflect.StructTag
	hops   []hop
	onWire bool
}

type hop struct {
	num  uint32
	name string
}

// message compiles P's struct p against F's struct f. Plans are memoized by
// the pair of types, so recursive types compile.
func (c *compiler) message(p, f reflect.Type, path string, root interface{ typeMeta(string, uintptr) }) *message {
	key := [2]reflect.Type{p, f}
	if m, ok := c.memo[key]; ok {
		return m
	}
	m := &message{path: path}
	c.memo[key] = m
	fs := map[string]fField{}
	fFields(f, nil, true, fs)
	for _, pf := range pFields(p, 0, nil) {
		if c.skipManaged && pf.name == "managedFields" && f == objectMetaType {
			continue
		}
		fp := path + "." + pf.name
		ff, ok := fs[pf.name]
		if ok && !ff.onWire && c.jsonOnly && !(pf.name == "kind" || pf.name == "apiVersion") {
			c.fake++
			ff.tag, ff.onWire = reflect.StructTag(fmt.Sprintf(`protobuf:"bytes,%d,opt"`, c.fake)), true
		}
		switch {
		case !ok:
			c.fail(fp, "%s has no field %q (json names: %s)", f.Name(), pf.name, strings.Join(sortedKeys(fs), ", "))
			continue
		case !ff.onWire && pf.typ.Kind() == reflect.String && (pf.name == "kind" || pf.name == "apiVersion"):
			if root != nil { // the envelope's; a nested object's stays empty, as in F
				root.typeMeta(pf.name, pf.off)
			}
			continue
		case !ff.onWire:
			c.fail(fp, "%s.%s is not encoded in protobuf", f.Name(), pf.name)
			continue
		}
		fld := c.field(pf, ff, fp)
		if fld == nil {
			continue
		}
		at := m
		for _, h := range ff.hops {
			at = at.inline(h, path)
		}
		at.add(fld)
	}
	return m
}

// inline returns the sub-plan of F's inline struct sent as field h.
func (m *message) inline(h hop, path string) *message {
	if f := m.lookup(uint64(h.num)); f != nil {
		return f.val.sub
	}
	sub := &message{path: path + "(" + h.name + ")"}
	m.add(&field{num: h.num, path: sub.path, shape: embedded, val: value{kind: kMessage, wire: wireBytes, sub: sub}})
	return sub
}

func (p *Plan[P]) typeMeta(name string, off uintptr) {
	if name == "kind" {
		p.kind = int(off)
	} else {
		p.apiVersion = int(off)
	}
}

// field compiles one field of P against F's field of the same json name.
func (c *compiler) field(pf pField, ff fField, path string) *field {
	num, ok := parseTag(ff.tag.Get("protobuf"))
	if !ok {
		c.fail(path, "unreadable protobuf tag %q", ff.tag.Get("protobuf"))
		return nil
	}
	fld := &field{num: num, path: path, off: pf.off, typ: pf.typ}
	pt, ft := pf.typ, ff.typ
	switch {
	case pt.Kind() == reflect.Map:
		if ft.Kind() != reflect.Map {
			c.fail(path, "is a map, but F's field is %s", ft)
			return nil
		}
		if pt.Key().Kind() != reflect.String || ft.Key().Kind() != reflect.String {
			c.fail(path, "map keys must be strings (have %s, F has %s)", pt.Key(), ft.Key())
			return nil
		}
		fld.shape, fld.fast = mapping, pt == reflect.TypeFor[map[string]string]()
		fld.val, ok = c.value(pt.Elem(), ft.Elem(), path)
	case pt.Kind() == reflect.Slice && pt.Elem().Kind() != reflect.Uint8:
		if ft.Kind() != reflect.Slice || ft.Elem().Kind() == reflect.Uint8 {
			c.fail(path, "is a slice, but F's field is %s", ft)
			return nil
		}
		fld.shape = list
		fld.val, ok = c.value(pt.Elem(), ft.Elem(), path)
	default:
		fld.val, ok = c.value(pt, ft, path)
	}
	if !ok {
		return nil
	}
	return fld
}

var (
	timeType      = reflect.TypeFor[metav1.Time]()
	unmarshalType = reflect.TypeFor[interface{ Unmarshal([]byte) error }]()
)

// value compiles one value: P's type p against F's type f. The wire type
// follows from the Go kind, as in the generated code: the wire kinds in
// k8s.io/api's struct tags are not reliable (SecretVolumeSource's int32
// defaultMode is tagged "bytes"), and maps carry no key or value tags.
func (c *compiler) value(p, f reflect.Type, path string) (value, bool) {
	v := value{wire: wireBytes, typ: p}
	if p.Kind() == reflect.Pointer {
		v.ptr, p, v.typ = true, p.Elem(), p.Elem()
	}
	if f.Kind() == reflect.Pointer {
		f = f.Elem()
	}
	if p.Kind() != f.Kind() {
		c.fail(path, "is %s (kind %s), but %s is kind %s", p, p.Kind(), f, f.Kind())
		return v, false
	}
	switch p.Kind() {
	case reflect.String:
		v.kind = kString
	case reflect.Slice:
		if p.Elem().Kind() != reflect.Uint8 || f.Elem().Kind() != reflect.Uint8 {
			c.fail(path, "nested slices are not supported (%s)", p)
			return v, false
		}
		v.kind = kBytes
	case reflect.Bool, reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64:
		v.kind, v.wire = map[reflect.Kind]kind{reflect.Bool: kBool, reflect.Int32: kInt32, reflect.Int64: kInt64,
			reflect.Uint32: kUint32, reflect.Uint64: kUint64}[p.Kind()], wireVarint
	case reflect.Float64:
		v.kind, v.wire = kFloat64, wireFixed64
	case reflect.Float32:
		v.kind, v.wire = kFloat32, wireFixed32
	case reflect.Struct:
		return c.structValue(v, p, f, path)
	default:
		c.fail(path, "kind %s is not supported", p.Kind())
		return v, false
	}
	return v, true
}

func (c *compiler) structValue(v value, p, f reflect.Type, path string) (value, bool) {
	custom := customEncoding(f)
	switch {
	case (p == timeType || f == timeType || custom) && p != f:
		c.fail(path, "is %s, but F's %s has its own protobuf encoding: use that type", p, f)
		return v, false
	case p == timeType:
		v.kind = kTime
	case custom:
		v.kind = kUnmarshal
	default:
		v.kind, v.sub = kMessage, c.message(p, f, path, nil)
	}
	return v, true
}

// customEncoding reports whether F's struct type f is encoded by hand: it
// has an Unmarshal method but no field with a protobuf tag (metav1.Time,
// metav1.MicroTime, resource.Quantity).
func customEncoding(f reflect.Type) bool {
	if !reflect.PointerTo(f).Implements(unmarshalType) {
		return false
	}
	for i := range f.NumField() {
		if protobufTag(f.Field(i)) {
			return false
		}
	}
	return true
}

// jsonName is a struct field's json name ("" for an untagged embedded
// struct, which encoding/json inlines) and whether it is matched at all. A
// field hidden from JSON but sent in protobuf (metav1.FieldsV1's Raw) goes
// by its Go name.
func jsonName(sf reflect.StructField) (string, bool) {
	if !sf.IsExported() {
		return "", false
	}
	tag := sf.Tag.Get("json")
	if tag == "-" && protobufTag(sf) {
		return sf.Name, true
	} else if tag == "-" {
		return "", false
	}
	name, _, _ := strings.Cut(tag, ",")
	if name == "" && !(sf.Anonymous && sf.Type.Kind() == reflect.Struct) {
		name = sf.Name
	}
	return name, true
}

// pFields lists P's fields by json name, inline embedded structs flattened.
func pFields(t reflect.Type, base uintptr, out []pField) []pField {
	for i := range t.NumField() {
		sf := t.Field(i)
		name, ok := jsonName(sf)
		switch {
		case !ok:
		case name == "":
			out = pFields(sf.Type, base+sf.Offset, out)
		default:
			out = append(out, pField{name: name, off: base + sf.Offset, typ: sf.Type})
		}
	}
	return out
}

// fFields collects F's fields by json name into out. An inline struct with a
// protobuf tag (corev1.Volume's VolumeSource) is a message of its own on the
// wire: a hop; one without (TypeMeta) is not on the wire.
func fFields(t reflect.Type, hops []hop, onWire bool, out map[string]fField) {
	for i := range t.NumField() {
		sf := t.Field(i)
		name, ok := jsonName(sf)
		pb, tagged := sf.Tag.Get("protobuf"), protobufTag(sf)
		switch {
		case !ok:
		case name == "" && tagged:
			num, _ := parseTag(pb)
			fFields(sf.Type, append(slices.Clip(hops), hop{num: num, name: sf.Name}), onWire, out)
		case name == "":
			fFields(sf.Type, hops, false, out)
		default:
			out[name] = fField{typ: sf.Type, tag: sf.Tag, hops: hops, onWire: onWire && tagged}
		}
	}
}

// protobufTag reports whether a field is sent in protobuf: it has a
// protobuf tag other than "-".
func protobufTag(sf reflect.StructField) bool {
	pb, ok := sf.Tag.Lookup("protobuf")
	return ok && pb != "-"
}

// parseTag reads the field number of a protobuf struct tag such as
// "bytes,1,opt,name=metadata".
func parseTag(tag string) (uint32, bool) {
	_, rest, _ := strings.Cut(tag, ",")
	numText, _, _ := strings.Cut(rest, ",")
	num, err := strconv.ParseUint(numText, 10, 29)
	return uint32(num), err == nil && num > 0
}

func sortedKeys(m map[string]fField) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
