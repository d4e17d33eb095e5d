package intern_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/intern"
)

// fullMeta is object metadata with every field set.
func fullMeta() metav1.ObjectMeta {
	yes, grace := true, int64(30)
	created := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	deleted := metav1.NewTime(time.Date(2026, 1, 3, 3, 4, 5, 0, time.UTC))
	return metav1.ObjectMeta{
		Name: "web-7d9f8c6b5-x2x4q", GenerateName: "web-7d9f8c6b5-", Namespace: "shop", SelfLink: "/api/v1/x",
		UID: "4f3c2b1a-0000-4000-8000-000000000001", ResourceVersion: "12345", Generation: 7,
		CreationTimestamp: created, DeletionTimestamp: &deleted, DeletionGracePeriodSeconds: &grace,
		Labels:      map[string]string{"app": "web", "pod-template-hash": "7d9f8c6b5", "": "empty key", "empty": ""},
		Annotations: map[string]string{"owner": "team-a", "checksum": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f8c6b5",
			UID: "0c1d2e3f", Controller: &yes, BlockOwnerDeletion: &yes}, {APIVersion: "v1", Kind: "Node", Name: "n1", UID: "9"}},
		Finalizers: []string{"example.com/a", "example.com/b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: "v1", Time: &created, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}},
			{Manager: "mirror", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", Time: &created,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:a":{}}}`)}}},
	}
}

// generated decodes b as the generated decoder does and interns it as an
// informer's transform does.
func generated(b []byte) (metav1.ObjectMeta, error) {
	var m metav1.ObjectMeta
	err := m.Unmarshal(b)
	if err == nil {
		intern.NewTable(0).Meta(&m)
	}
	return m, err
}

func marshal(t testing.TB, m metav1.ObjectMeta) []byte {
	t.Helper()
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTable_UnmarshalMetaDecodesAsTheGeneratedDecoder(t *testing.T) {
	full := marshal(t, fullMeta())
	unknown := protowire.AppendString(protowire.AppendTag(append([]byte(nil), full...), 99, protowire.BytesType), "x")
	unknown = protowire.AppendVarint(protowire.AppendTag(unknown, 15, protowire.VarintType), 1)
	for name, b := range map[string][]byte{
		"every field":                 full,
		"empty":                       nil,
		"unknown fields":              unknown,
		"twice (fields merge/repeat)": append(append([]byte(nil), full...), full...),
	} {
		t.Run(name, func(t *testing.T) {
			want, err := generated(b)
			if err != nil {
				t.Fatal(err)
			}
			var got metav1.ObjectMeta
			if err := intern.NewTable(0).UnmarshalMeta(b, &got, intern.ManagedFields{All: true}); err != nil {
				t.Fatalf("UnmarshalMeta: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("UnmarshalMeta:\n got %+v\nwant %+v", got, want)
			}
			var skipped metav1.ObjectMeta
			if err := intern.NewTable(0).UnmarshalMeta(b, &skipped, intern.ManagedFields{}); err != nil {
				t.Fatalf("UnmarshalMeta skipping managedFields: %v", err)
			}
			var ofOthers, ofMirror metav1.ObjectMeta
			if err := intern.NewTable(0).UnmarshalMeta(b, &ofOthers, intern.ManagedFields{Of: []string{"helm", "flux"}}); err != nil {
				t.Fatalf("UnmarshalMeta keeping helm's and flux's managedFields: %v", err)
			}
			if err := intern.NewTable(0).UnmarshalMeta(b, &ofMirror, intern.ManagedFields{Of: []string{"helm", "mirror"}}); err != nil {
				t.Fatalf("UnmarshalMeta keeping mirror's managedFields: %v", err)
			}
			mirrors := slices.DeleteFunc(slices.Clone(want.ManagedFields), func(e metav1.ManagedFieldsEntry) bool { return e.Manager != "mirror" })
			if len(b) > 0 && len(mirrors) == 0 {
				t.Fatal("the metadata has no entry of mirror's to keep")
			}
			want.ManagedFields = nil
			if !reflect.DeepEqual(skipped, want) {
				t.Fatalf("UnmarshalMeta skipping managedFields:\n got %+v\nwant %+v", skipped, want)
			}
			if !reflect.DeepEqual(ofOthers, want) {
				t.Fatalf("UnmarshalMeta keeping the managedFields of managers that wrote none:\n got %+v\nwant %+v", ofOthers, want)
			}
			want.ManagedFields = mirrors
			if !reflect.DeepEqual(ofMirror, want) {
				t.Fatalf("UnmarshalMeta keeping mirror's managedFields:\n got %+v\nwant %+v", ofMirror, want)
			}
		})
	}
}

func TestTable_UnmarshalMetaInternsWhatMetaInterns(t *testing.T) {
	tab := intern.NewTable(0)
	b := marshal(t, fullMeta())
	var x, y metav1.ObjectMeta
	for _, m := range []*metav1.ObjectMeta{&x, &y} {
		if err := tab.UnmarshalMeta(b, m, intern.ManagedFields{}); err != nil {
			t.Fatal(err)
		}
	}
	same := func(what, a, b string, want bool) {
		t.Helper()
		if got := unsafe.StringData(a) == unsafe.StringData(b); got != want {
			t.Errorf("%s %q: one string in both objects = %v, want %v", what, a, got, want)
		}
	}
	same("namespace", x.Namespace, y.Namespace, true)
	same("generateName", x.GenerateName, y.GenerateName, true)
	same("label value", x.Labels["app"], y.Labels["app"], true)
	same("short annotation value", x.Annotations["owner"], y.Annotations["owner"], true)
	same("long annotation value", x.Annotations["checksum"], y.Annotations["checksum"], false)
	same("owner name", x.OwnerReferences[0].Name, y.OwnerReferences[0].Name, true)
	same("owner UID", string(x.OwnerReferences[0].UID), string(y.OwnerReferences[0].UID), true)
	same("finalizer", x.Finalizers[1], y.Finalizers[1], true)
	same("name", x.Name, y.Name, false)
	same("resourceVersion", x.ResourceVersion, y.ResourceVersion, false)
}

// Whatever UnmarshalMeta accepts, the generated decoder accepts and decodes
// to the same metadata (what it refuses, its caller hands to the generated
// decoder).
func FuzzTable_UnmarshalMeta(f *testing.F) {
	full := marshal(f, fullMeta())
	f.Add(full)
	f.Add(full[:len(full)/2])
	f.Add([]byte{0x5a, 0x02, 0x08, 0x01})             // a label entry whose key is a varint
	f.Add([]byte{0x3a, 0x01, 0x00})                   // generation, length-delimited
	f.Add([]byte{0x0c})                               // an end group
	f.Add([]byte{0x5a, 0x04, 0x0a, 0x00, 0x1a, 0x00}) // a label entry with an unknown field
	f.Fuzz(func(t *testing.T, b []byte) {
		var got metav1.ObjectMeta
		if err := intern.NewTable(0).UnmarshalMeta(b, &got, intern.ManagedFields{All: true}); err != nil {
			return
		}
		want, err := generated(b)
		if err != nil {
			t.Fatalf("UnmarshalMeta accepted what the generated decoder refuses (%v)", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("UnmarshalMeta:\n got %+v\nwant %+v", got, want)
		}
	})
}

// What the table already holds costs no allocation, however long (a switch
// on a converted []byte copies it past 32 bytes; comparisons do not).
func TestTable_UnmarshalMetaAllocatesNothingForWhatTheTableHolds(t *testing.T) {
	_, n := decodeAgain(t, metav1.ObjectMeta{Namespace: strings.Repeat("n", 63), GenerateName: strings.Repeat("g", 40) + "-"})
	if n != 0 {
		t.Errorf("decoding metadata whose strings the table holds allocated %v times, want 0", n)
	}
}

// decodeAgain decodes in's encoding once with a new table, which takes its
// strings in, and then again and again: it returns what the last decode
// gave and the allocations of one decode after the first.
func decodeAgain(t *testing.T, in metav1.ObjectMeta) (metav1.ObjectMeta, float64) {
	t.Helper()
	tab := intern.NewTable(0)
	b := marshal(t, in)
	var m metav1.ObjectMeta
	decode := func() {
		m = metav1.ObjectMeta{}
		if err := tab.UnmarshalMeta(b, &m, intern.ManagedFields{}); err != nil {
			t.Fatal(err)
		}
	}
	decode()
	return m, testing.AllocsPerRun(100, decode)
}

// An object's own strings (name, UID, resource version) are allocated
// together: one allocation for the three, each its own value.
func TestTable_UnmarshalMetaAllocatesAnObjectsOwnStringsOnce(t *testing.T) {
	m, n := decodeAgain(t, metav1.ObjectMeta{Name: "web-7d9f8c-x2x4q", Namespace: "shop", UID: "4f3c2b1a-0000-4000-8000-000000000042",
		ResourceVersion: "123456"})
	if m.Name != "web-7d9f8c-x2x4q" || m.UID != "4f3c2b1a-0000-4000-8000-000000000042" || m.ResourceVersion != "123456" || m.SelfLink != "" {
		t.Fatalf("decoded name %q, UID %q, resource version %q, selfLink %q", m.Name, m.UID, m.ResourceVersion, m.SelfLink)
	}
	if n != 1 {
		t.Errorf("decoding a name, a UID and a resource version allocated %v times, want 1", n)
	}
}

// Meta, given an object a decoder built string by string, allocates its
// own strings again as one, as UnmarshalMeta does: each keeps its value.
func TestTable_MetaAllocatesAnObjectsOwnStringsAgainAsOne(t *testing.T) {
	tab := intern.NewTable(0)
	m := metav1.ObjectMeta{Name: strings.Clone("web-7d9f8c-x2x4q"), Namespace: "shop",
		UID: types.UID(strings.Clone("4f3c2b1a-0000-4000-8000-000000000042")), ResourceVersion: strings.Clone("123456")}
	tab.Meta(&m)
	if m.Name != "web-7d9f8c-x2x4q" || m.UID != "4f3c2b1a-0000-4000-8000-000000000042" || m.ResourceVersion != "123456" || m.SelfLink != "" {
		t.Fatalf("after Meta: name %q, UID %q, resource version %q, selfLink %q", m.Name, m.UID, m.ResourceVersion, m.SelfLink)
	}
	name, uid, rv := unsafe.StringData(m.Name), unsafe.StringData(string(m.UID)), unsafe.StringData(m.ResourceVersion)
	if uid != (*byte)(unsafe.Add(unsafe.Pointer(name), len(m.Name))) || rv != (*byte)(unsafe.Add(unsafe.Pointer(uid), len(m.UID))) {
		t.Errorf("name, UID and resource version are not one string's parts: at %p, %p and %p", name, uid, rv)
	}
	if n := testing.AllocsPerRun(100, func() { tab.Meta(&m) }); n != 0 {
		t.Errorf("Meta of metadata it interned allocated %v times, want 0 (the own strings are one already)", n)
	}
	lone := metav1.ObjectMeta{Name: strings.Clone("web-7d9f8c-x2x4q")}
	if n := testing.AllocsPerRun(100, func() { tab.Meta(&lone) }); n != 0 {
		t.Errorf("Meta of metadata with a name alone allocated %v times, want 0", n)
	}
}

// UnmarshalLeadingMeta decodes an object's metadata (field 1) and hands
// back the other fields; an object laid out otherwise is left to the
// generated decoder, with the metadata untouched.
func TestTable_UnmarshalLeadingMetaSplitsAnObjectAsEncodersWriteIt(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: fullMeta(), Spec: corev1.PodSpec{NodeName: "n1",
		Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1.2.3"}}}}
	b, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var want corev1.Pod
	if err := want.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	intern.NewTable(0).Meta(&want.ObjectMeta)

	var got corev1.Pod
	rest, ok := intern.NewTable(0).UnmarshalLeadingMeta(b, &got.ObjectMeta, intern.ManagedFields{All: true})
	if !ok {
		t.Fatal("a marshalled Pod was not split")
	}
	if err := got.Unmarshal(rest); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, &want) {
		t.Fatalf("split decode:\n%+v\nwant\n%+v", &got, &want)
	}

	metaField := protowire.AppendTag(nil, 1, protowire.BytesType)
	meta := marshal(t, fullMeta())
	metaField = protowire.AppendBytes(metaField, meta)
	spec := b[len(metaField):]                                                              // the Pod's other fields
	badMeta := protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 1) // namespace as a varint
	for name, in := range map[string][]byte{
		"metadata last":       append(append([]byte(nil), spec...), metaField...),
		"metadata twice":      append(append(append([]byte(nil), metaField...), spec...), metaField...),
		"not a message":       {0xff},
		"truncated metadata":  metaField[:len(metaField)-3],
		"metadata as varint":  protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 7),
		"metadata not parsed": protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), badMeta),
	} {
		var m metav1.ObjectMeta
		if rest, ok := intern.NewTable(0).UnmarshalLeadingMeta(in, &m, intern.ManagedFields{All: true}); ok || rest != nil || !reflect.DeepEqual(m, metav1.ObjectMeta{}) {
			t.Errorf("%s: ok %v, %d bytes back, metadata %+v; want not split and untouched", name, ok, len(rest), m)
		}
	}
}

// Field managers added to a set while decoders read it are kept from then
// on; an object decodes with the set as it was when its decoding began
// (Now), so all of its entries are judged alike.
func TestManagedFields_addedWhileRead(t *testing.T) {
	entry := func(manager string) []byte {
		b, err := (&metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationApply}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var set intern.FieldManagers
	keep := intern.ManagedFields{Of: []string{"static"}, Added: &set}
	if keep.None() || !keep.Keeps(entry("static")) || keep.Keeps(entry("mirror")) || keep.KeepsManager("mirror") {
		t.Fatal("before any Add: want the static manager's entries only")
	}
	if !(intern.ManagedFields{Added: &set}).None() || !(intern.ManagedFields{}).None() {
		t.Error("an empty set keeps something")
	}
	before := keep.Now()
	set.Add("mirror", "", "mirror")
	if !keep.Keeps(entry("mirror")) || !keep.KeepsManager("mirror") || (intern.ManagedFields{Added: &set}).None() {
		t.Error("a manager added is not kept")
	}
	if before.Keeps(entry("mirror")) || before.KeepsManager("mirror") {
		t.Error("a decoding begun before the Add changed its mind")
	}
	if now := keep.Now(); !now.Keeps(entry("mirror")) || !now.Keeps(entry("static")) || now.Keeps(entry("other")) {
		t.Error("Now after the Add does not keep what the set holds")
	}
	var none *intern.FieldManagers
	if none.Has("x") || !none.Empty() {
		t.Error("a nil set is not empty")
	}
}
