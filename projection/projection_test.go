package projection_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/ctrlkit/ctrlkit/projection"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
)

// PodView is what a typical Pod controller reads.
type PodView struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        PodMeta `json:"metadata"`
	Spec            struct {
		NodeName string `json:"nodeName,omitempty"`
	} `json:"spec"`
	Status struct {
		Phase      corev1.PodPhase       `json:"phase,omitempty"`
		Conditions []corev1.PodCondition `json:"conditions,omitempty"`
	} `json:"status"`
}

// PodMeta is the part of metav1.ObjectMeta PodView keeps.
type PodMeta struct {
	Name              string                  `json:"name,omitempty"`
	Namespace         string                  `json:"namespace,omitempty"`
	UID               types.UID               `json:"uid,omitempty"`
	ResourceVersion   string                  `json:"resourceVersion,omitempty"`
	Generation        int64                   `json:"generation,omitempty"`
	DeletionTimestamp *metav1.Time            `json:"deletionTimestamp,omitempty"`
	Labels            map[string]string       `json:"labels,omitempty"`
	Annotations       map[string]string       `json:"annotations,omitempty"`
	OwnerReferences   []metav1.OwnerReference `json:"ownerReferences,omitempty"`
}

// wideView reaches into F's inline structs (Probe's handler, Volume's
// source), custom encodings (Quantity, IntOrString, Time) and embeds
// ObjectMeta whole.
type wideView struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Containers []struct {
			Name           string                      `json:"name"`
			Image          string                      `json:"image"`
			Args           []string                    `json:"args"`
			Ports          []corev1.ContainerPort      `json:"ports"`
			Resources      corev1.ResourceRequirements `json:"resources"`
			ReadinessProbe *struct {
				HTTPGet       *corev1.HTTPGetAction `json:"httpGet"`
				PeriodSeconds int32                 `json:"periodSeconds"`
			} `json:"readinessProbe"`
		} `json:"containers"`
		Volumes []struct {
			Name      string                        `json:"name"`
			ConfigMap *corev1.ConfigMapVolumeSource `json:"configMap"`
			Projected *corev1.ProjectedVolumeSource `json:"projected"`
		} `json:"volumes"`
		Tolerations                   []corev1.Toleration `json:"tolerations"`
		TerminationGracePeriodSeconds *int64              `json:"terminationGracePeriodSeconds"`
	} `json:"spec"`
	Status corev1.PodStatus `json:"status"`
}

func mustPlan[P, F any](t testing.TB) *projection.Plan[P] {
	t.Helper()
	plan, err := projection.New[P, F]()
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// viaJSON is the expected projection: the full object through JSON into P.
func viaJSON[P any](t *testing.T, pod *corev1.Pod) P {
	t.Helper()
	b, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	out := reflect.New(reflect.TypeFor[P]().Elem()).Interface().(P)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPlan_DecodeEqualsTheFullObjectThroughJSON(t *testing.T) {
	viewPlan := mustPlan[*PodView, *corev1.Pod](t)
	widePlan := mustPlan[*wideView, *corev1.Pod](t)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
	}{
		{"a running pod", testPod(7, false)},
		{"a pod being deleted", testPod(123, true)},
		{"an empty pod", &corev1.Pod{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := marshal(t, tc.pod)
			view, err := viewPlan.Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			want := viaJSON[*PodView](t, tc.pod)
			want.TypeMeta = metav1.TypeMeta{} // protobuf sends it in the envelope
			if !reflect.DeepEqual(view, want) {
				t.Errorf("PodView:\n got %+v\nwant %+v", view, want)
			}
			wide, err := widePlan.Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			wantWide := viaJSON[*wideView](t, tc.pod)
			wantWide.TypeMeta = metav1.TypeMeta{}
			if !equalJSON(t, wide, wantWide) {
				t.Errorf("wideView:\n got %+v\nwant %+v", wide, wantWide)
			}
		})
	}
}

// equalJSON compares by JSON: Quantity caches its string form differently
// when parsed from JSON and from protobuf.
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

func TestPlan_theFullTypeAsItsOwnProjectionDecodesAsUnmarshalDoes(t *testing.T) {
	plan := mustPlan[*corev1.Pod, *corev1.Pod](t)
	for _, pod := range []*corev1.Pod{testPod(1, false), testPod(2, true)} {
		raw := marshal(t, pod)
		got, err := plan.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		var want corev1.Pod
		if err := want.Unmarshal(raw); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, &want) {
			t.Errorf("Decode differs from corev1.Pod.Unmarshal:\n got %+v\nwant %+v", got, &want)
		}
	}
}

// envelope encodes pod as the API server sends it.
func envelope(t testing.TB, pod *corev1.Pod) []byte {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(scheme, scheme).Encode(pod, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestUnwrap_ReusesTheTypeStrings checks that envelopes of one type (a
// list's or a watch stream's) share their apiVersion and kind strings and
// cost no allocation, also with another type's envelopes read in between,
// and that each type still reads right.
func TestUnwrap_ReusesTheTypeStrings(t *testing.T) {
	body := envelope(t, testPod(1, false))
	first, err := projection.Unwrap(body)
	if err != nil {
		t.Fatal(err)
	}
	second, _ := projection.Unwrap(bytes.Clone(body))
	if unsafe.StringData(first.Kind) != unsafe.StringData(second.Kind) || unsafe.StringData(first.APIVersion) != unsafe.StringData(second.APIVersion) {
		t.Error("two envelopes of one type read into strings of their own")
	}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = projection.Unwrap(body) }); allocs != 0 {
		t.Errorf("Unwrap allocates %v times for a repeated type; want 0", allocs)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(scheme, scheme).Encode(&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "c"}}, &buf); err != nil {
		t.Fatal(err)
	}
	if env, err := projection.Unwrap(buf.Bytes()); err != nil || env.Kind != "ConfigMap" || env.APIVersion != "v1" {
		t.Errorf("Unwrap of a ConfigMap after Pods = %q %q, %v", env.Kind, env.APIVersion, err)
	}
	if env, _ := projection.Unwrap(body); env.Kind != "Pod" {
		t.Errorf("Unwrap of a Pod after a ConfigMap: kind %q", env.Kind)
	}
	cm := buf.Bytes()
	// "v1", "Pod" and "ConfigMap" hash to three slots of the package's
	// table (no test here runs in parallel with this one).
	if allocs := testing.AllocsPerRun(100, func() { // two streams interleaved
		_, _ = projection.Unwrap(body)
		_, _ = projection.Unwrap(cm)
	}); allocs != 0 {
		t.Errorf("Unwrap allocates %v times for a Pod and a ConfigMap in turn; want 0", allocs)
	}
}

func TestPlan_DecodeEnvelopeFillsTypeMetaFromTheEnvelope(t *testing.T) {
	pod := testPod(3, false)
	body := envelope(t, pod)
	env, err := projection.Unwrap(body)
	if err != nil {
		t.Fatal(err)
	}
	if env.Kind != "Pod" || env.APIVersion != "v1" || !bytes.Equal(env.Raw, marshal(t, pod)) {
		t.Errorf("Unwrap = %q %q, %d raw bytes; want Pod v1 and the Pod's encoding", env.Kind, env.APIVersion, len(env.Raw))
	}
	view, err := mustPlan[*PodView, *corev1.Pod](t).DecodeEnvelope(body)
	if err != nil {
		t.Fatal(err)
	}
	if want := viaJSON[*PodView](t, pod); !reflect.DeepEqual(view, want) {
		t.Errorf("got %+v\nwant %+v", view, want)
	}
	if _, err := projection.Unwrap(marshal(t, pod)); !errors.Is(err, projection.ErrNotProtobuf) {
		t.Errorf("Unwrap without the magic: %v, want ErrNotProtobuf", err)
	}
}

func TestPlan_DecodeReportsBadInputWithThePath(t *testing.T) {
	plan := mustPlan[*PodView, *corev1.Pod](t)
	raw := marshal(t, testPod(5, false))
	for _, tc := range []struct {
		name string
		in   []byte
		want []string
	}{
		{"truncated in the metadata", raw[:20], []string{"PodView.metadata", "truncated"}},
		{"a varint longer than ten bytes", []byte{0x78, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, []string{"overflows"}},
		{"metadata sent as a varint", []byte{0x08, 0x01}, []string{"PodView.metadata", "wire type 0, want 2"}},
		{"a skipped field truncated", []byte{0x7a, 0x05, 0x01}, []string{"PodView: field 15", "truncated"}},
		{"a name in the metadata as a varint", []byte{0x0a, 0x02, 0x08, 0x01}, []string{"PodView.metadata.name", "wire type"}},
		{"an undefined wire type", []byte{0x7b}, []string{"PodView: field 15", "wire type 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plan.Decode(tc.in)
			if err == nil {
				t.Fatal("Decode succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// badPhase has a phase of the wrong kind.
type badPhase struct {
	Status struct {
		Phase int32 `json:"phase"`
	} `json:"status"`
}

type misspelt struct {
	Status struct {
		Phaze string `json:"phaze"`
	} `json:"status"`
}

type ownTime struct {
	Metadata struct {
		CreationTimestamp struct {
			Seconds int64 `json:"seconds"`
		} `json:"creationTimestamp"`
	} `json:"metadata"`
}

type labelsAsSlice struct {
	Metadata struct {
		Labels []string `json:"labels"`
	} `json:"metadata"`
}

type kindAsInt struct {
	Kind int32 `json:"kind"`
}

func TestNew_reportsFieldsThatDoNotMatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func() error
		want string
	}{
		{"a field F lacks", func() error { _, err := projection.New[*misspelt, *corev1.Pod](); return err },
			`projection: misspelt.status.phaze: PodStatus has no field "phaze" (json names: allocatedResources, conditions,`},
		{"a field of another kind", func() error { _, err := projection.New[*badPhase, *corev1.Pod](); return err },
			"badPhase.status.phase: is int32 (kind int32), but v1.PodPhase is kind string"},
		{"a custom encoding replaced", func() error { _, err := projection.New[*ownTime, *corev1.Pod](); return err },
			"ownTime.metadata.creationTimestamp: is struct { Seconds int64 \"json:\\\"seconds\\\"\" }, but F's v1.Time has its own protobuf encoding"},
		{"a map as a slice", func() error { _, err := projection.New[*labelsAsSlice, *corev1.Pod](); return err },
			"labelsAsSlice.metadata.labels: is a slice, but F's field is map[string]string"},
		{"a field not on the wire", func() error { _, err := projection.New[*kindAsInt, *corev1.Pod](); return err },
			"kindAsInt.kind: Pod.kind is not encoded in protobuf"},
		{"P not a pointer", func() error { _, err := projection.New[PodView, *corev1.Pod](); return err },
			"projection: P is projection_test.PodView, want a pointer to a struct"},
		{"F not a struct", func() error { _, err := projection.New[*PodView, *string](); return err },
			"projection: F is string, want a pointer to a struct"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.new()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

func TestNew_reportsEveryMismatchAtOnce(t *testing.T) {
	type both struct {
		Status struct {
			Phaze string `json:"phaze"`
			Phase int64  `json:"phase"`
		} `json:"status"`
	}
	_, err := projection.New[*both, *corev1.Pod]()
	if err == nil || !strings.Contains(err.Error(), "status.phaze") || !strings.Contains(err.Error(), "status.phase") {
		t.Errorf("New: %v, want both fields named", err)
	}
}

// TestPlan_skippedFieldsCostNoAllocations decodes PodView from a Pod and
// from the same Pod with much more that PodView lacks (fifty containers,
// big managed fields): the allocations are the same, from protobuf and from
// JSON.
func TestPlan_skippedFieldsCostNoAllocations(t *testing.T) {
	plan := mustPlan[*PodView, *corev1.Pod](t)
	small := testPod(9, false)
	small.Spec.Containers, small.Spec.Volumes, small.ManagedFields, small.Status.ContainerStatuses = nil, nil, nil, nil
	big := testPod(9, false)
	for range 50 {
		big.Spec.Containers = append(big.Spec.Containers, big.Spec.Containers[0])
	}
	big.ManagedFields[0].FieldsV1.Raw = []byte(`{"f:spec":"` + strings.Repeat("x", 64<<10) + `"}`)
	smallRaw, bigRaw := marshal(t, small), marshal(t, big)
	if len(bigRaw) < 20*len(smallRaw) {
		t.Fatalf("the big Pod is %d bytes, the small one %d: not a test of skipping", len(bigRaw), len(smallRaw))
	}
	allocs := func(raw []byte) float64 {
		return testing.AllocsPerRun(100, func() {
			if _, err := plan.Decode(raw); err != nil {
				t.Fatal(err)
			}
		})
	}
	a, b := allocs(smallRaw), allocs(bigRaw)
	if a != b {
		t.Errorf("decoding PodView allocates %v times from the small Pod, %v from the big one", a, b)
	}
	t.Logf("%v allocations per PodView; small Pod %d bytes, big %d", a, len(smallRaw), len(bigRaw))

	jsonAllocs := func(pod *corev1.Pod) float64 {
		js, err := json.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		return testing.AllocsPerRun(100, func() {
			if _, err := plan.DecodeJSON(js); err != nil {
				t.Fatal(err)
			}
		})
	}
	if a, b := jsonAllocs(small), jsonAllocs(big); a != b {
		t.Errorf("DecodeJSON allocates %v times from the small Pod, %v from the big one", a, b)
	}
}

func TestPlan_DecodeListDecodesEveryItemAndTheListMetadata(t *testing.T) {
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "812", Continue: "next-page"}}
	for i := range 3 {
		list.Items = append(list.Items, *testPod(i, i == 1))
	}
	raw, err := list.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	plan := mustPlan[*PodView, *corev1.Pod](t)
	got, err := plan.DecodeList(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != "812" || got.Continue != "next-page" || len(got.Items) != 3 {
		t.Fatalf("DecodeList = rv %q, continue %q, %d items; want 812, next-page, 3", got.ResourceVersion, got.Continue, len(got.Items))
	}
	for i := range list.Items {
		want := viaJSON[*PodView](t, &list.Items[i])
		want.TypeMeta = metav1.TypeMeta{}
		if !reflect.DeepEqual(got.Items[i], want) {
			t.Errorf("item %d:\n got %+v\nwant %+v", i, got.Items[i], want)
		}
	}
	if _, err := plan.DecodeList(raw[:len(raw)-10]); err == nil || !strings.Contains(err.Error(), "PodViewList") {
		t.Errorf("DecodeList of a truncated list: %v, want an error naming PodViewList", err)
	}
}

func TestPlan_DecodeEnvelopeRefusesAnotherKind(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	if err := protobuf.NewSerializer(scheme, scheme).Encode(cm, &buf); err != nil {
		t.Fatal(err)
	}
	_, err := mustPlan[*PodView, *corev1.Pod](t).DecodeEnvelope(buf.Bytes())
	if err == nil || !strings.Contains(err.Error(), "holds a ConfigMap, the plan decodes a Pod") {
		t.Errorf("DecodeEnvelope of a ConfigMap: %v", err)
	}
}

func TestPlan_DecodeJSONEqualsEncodingJSON(t *testing.T) {
	viewPlan := mustPlan[*PodView, *corev1.Pod](t)
	widePlan := mustPlan[*wideView, *corev1.Pod](t)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
	}{
		{"a running pod", testPod(7, false)},
		{"a pod being deleted", testPod(123, true)},
		{"an empty pod", &corev1.Pod{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js, err := json.MarshalIndent(tc.pod, "", "  ") // spaces too
			if err != nil {
				t.Fatal(err)
			}
			view, err := viewPlan.DecodeJSON(js)
			if err != nil {
				t.Fatal(err)
			}
			var want PodView
			if err := json.Unmarshal(js, &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(view, &want) {
				t.Errorf("PodView:\n got %+v\nwant %+v", view, &want)
			}
			wide, err := widePlan.DecodeJSON(js)
			if err != nil {
				t.Fatal(err)
			}
			var wantWide wideView
			if err := json.Unmarshal(js, &wantWide); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(wide, &wantWide) {
				t.Errorf("wideView:\n got %+v\nwant %+v", wide, &wantWide)
			}
		})
	}
}

func TestPlan_DecodeJSONReportsBadInputWithThePath(t *testing.T) {
	plan := mustPlan[*PodView, *corev1.Pod](t)
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"empty", "", []string{"PodView", "truncated"}},
		{"not an object", `[1]`, []string{"PodView", "where an object starts"}},
		{"truncated in a skipped member", `{"spec":{"containers":[{"name":"a`, []string{"PodView.spec", "truncated"}},
		{"a kept member of the wrong type", `{"metadata":{"labels":["a"]}}`, []string{"PodView.metadata.labels", "cannot unmarshal array"}},
		{"data after the object", `{} {}`, []string{"PodView", "data after the object"}},
		{"no colon", `{"status" 1}`, []string{"PodView", "no colon"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plan.DecodeJSON([]byte(tc.in))
			if err == nil {
				t.Fatal("DecodeJSON succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// metaView embeds the whole ObjectMeta, as informers' projections do.
type metaView struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
}

func TestSkipManagedFields_leavesThemOutAndCostsLess(t *testing.T) {
	pod := testPod(7, false)
	pod.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{},"f:phase":{}}}`)}},
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:app":{}},"f:ownerReferences":{}}}`)}},
	}
	raw := marshal(t, pod)
	keep := mustPlan[*metaView, *corev1.Pod](t)
	skip, err := projection.New[*metaView, *corev1.Pod](projection.SkipManagedFields())
	if err != nil {
		t.Fatal(err)
	}
	kept, err := keep.Decode(raw)
	if err != nil || len(kept.ManagedFields) != 2 {
		t.Fatalf("without the option: %d managedFields (%v), want 2", len(kept.ManagedFields), err)
	}
	skipped, err := skip.Decode(raw)
	if err != nil || skipped.ManagedFields != nil {
		t.Fatalf("with SkipManagedFields: %v (%v), want none", skipped.ManagedFields, err)
	}
	kept.ManagedFields = nil
	if !reflect.DeepEqual(kept, skipped) {
		t.Errorf("the rest differs:\n with %+v\n without %+v", kept, skipped)
	}
	with := testing.AllocsPerRun(100, func() { _, _ = keep.Decode(raw) })
	without := testing.AllocsPerRun(100, func() { _, _ = skip.Decode(raw) })
	if without >= with {
		t.Errorf("allocations with managedFields %v, skipped %v: want fewer when skipped", with, without)
	}
}

// TestUnwrap_KeepsNoLongTypeString checks that a type string longer than
// any real apiVersion or kind is read right and not kept by the table.
func TestUnwrap_KeepsNoLongTypeString(t *testing.T) {
	kind := strings.Repeat("K", 1000)
	scheme := runtime.NewScheme()
	gv := schema.GroupVersion{Group: "example.com", Version: "v1"}
	scheme.AddKnownTypeWithName(gv.WithKind(kind), &corev1.ConfigMap{})
	var buf bytes.Buffer
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: kind, APIVersion: gv.String()}}
	if err := protobuf.NewSerializer(scheme, scheme).Encode(cm, &buf); err != nil {
		t.Fatal(err)
	}
	first, err := projection.Unwrap(buf.Bytes())
	if err != nil || first.Kind != kind {
		t.Fatalf("Unwrap = kind of %d bytes, %v; want %d", len(first.Kind), err, len(kind))
	}
	second, _ := projection.Unwrap(buf.Bytes())
	if unsafe.StringData(first.Kind) == unsafe.StringData(second.Kind) {
		t.Error("a 1000-byte kind was kept by the table")
	}
}
