package apply

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/randfill"
)

// viaBytes is the reference jsonValue stands for: encoding/json's Marshal,
// then Unmarshal into an any.
func viaBytes(x any) (any, bool) {
	b, err := json.Marshal(x)
	if err != nil {
		return nil, false
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return nil, false
	}
	return out, true
}

// Odd types that exercise encoding/json's rules: promoted fields and their
// conflicts, nil embedded pointers, omitempty and omitzero, ",string",
// "-", invalid tag names, pointer-receiver marshalers, float32, non-string
// map keys, byte slices and arrays, interfaces.
type (
	inner struct {
		A string `json:"a,omitempty"`
		B int    `json:"b"`
		C string // untagged: conflicts with outer's C at a deeper level
	}
	other struct {
		B int    `json:"b"` // conflicts with inner.b at the same depth: neither is encoded
		D string `json:"d"`
	}
	ptrMarshaler struct{ N int }
	zeroer       struct{ N int }
	stringOpt    struct {
		N int `json:"n,string"`
	}
	odd struct {
		inner
		*other
		C         string                  `json:"c"`
		Skip      string                  `json:"-"`
		Dash      string                  `json:"-,"`
		Bad       string                  `json:"a\"b"`
		Z         zeroer                  `json:"z,omitzero"`
		ZP        *zeroer                 `json:"zp,omitzero"`
		T         time.Time               `json:"t,omitzero"`
		M         ptrMarshaler            `json:"m"`
		MP        []ptrMarshaler          `json:"mp"`
		MV        map[string]ptrMarshaler `json:"mv"`
		F32       float32                 `json:"f32"`
		F64       float64                 `json:"f64,omitempty"`
		U         uint64                  `json:"u"`
		IK        map[int]string          `json:"ik"`
		Bytes     []byte                  `json:"bytes"`
		Arr       [3]byte                 `json:"arr"`
		Any       any                     `json:"any"`
		Str       *stringOpt              `json:"str,omitempty"`
		Q         *resource.Quantity      `json:"q,omitempty"`
		IOS       intstr.IntOrString      `json:"ios"`
		unexposed int
	}
)

func (p *ptrMarshaler) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(fmt.Sprint("n=", p.N))), nil
}
func (z zeroer) IsZero() bool { return z.N < 10 }

// The values from the comparison of jsonValue with encoding/json: objects and
// apply configurations Kubernetes' types fill at random, and the odd types.
func samples(t *testing.T) []any {
	t.Helper()
	f := randfill.NewWithSeed(1).NilChance(0.3).NumElements(0, 3).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewMilliQuantity(c.Int63n(1e6), resource.DecimalSI)
		},
		func(v *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*v = intstr.FromInt32(c.Int31())
			} else {
				*v = intstr.FromString(c.String(5))
			}
		},
		func(tm *metav1.Time, c randfill.Continue) { *tm = metav1.Unix(c.Int63n(1e9), 0) },
		func(tm *metav1.MicroTime, c randfill.Continue) {
			*tm = metav1.NewMicroTime(time.Unix(c.Int63n(1e9), 0))
		},
		func(fields *metav1.FieldsV1, c randfill.Continue) { fields.Raw = []byte(`{"f:a":{}}`) },
		func(a *any, c randfill.Continue) {
			*a = []any{c.String(3), float64(c.Int31()), map[string]any{"x": c.Bool()}}
		},
	)
	var out []any
	for range 60 {
		var pod corev1.Pod
		var dep appsv1.Deployment
		var sec corev1.Secret
		var podAC corev1ac.PodApplyConfiguration
		var depAC appsv1ac.DeploymentApplyConfiguration
		var o odd
		f.Fill(&pod)
		f.Fill(&dep)
		f.Fill(&sec)
		f.Fill(&podAC)
		f.Fill(&depAC)
		f.Fill(&o)
		out = append(out, &pod, &dep, &sec, &podAC, &depAC, &o, o)
	}
	out = append(out, &odd{}, odd{other: &other{B: 1, D: "d"}, Z: zeroer{N: 11}, ZP: &zeroer{N: 3}, F64: 1.5,
		Str: &stringOpt{N: 4}, IK: map[int]string{2: "two"}, Any: &ptrMarshaler{N: 7}},
		corev1ac.Secret("s", "ns").WithData(map[string][]byte{"k": []byte("v")}).WithLabels(map[string]string{"l": "1"}))
	return out
}

func TestJSONValue_isWhatEncodingJSONGives(t *testing.T) {
	for i, x := range samples(t) {
		got, gotOK := jsonValue(reflect.ValueOf(x))
		want, wantOK := viaBytes(x)
		if gotOK != wantOK || !reflect.DeepEqual(got, want) {
			t.Fatalf("sample %d (%T): jsonValue = %v, %v\nencoding/json: %v, %v", i, x, got, gotOK, want, wantOK)
		}
	}
}

// randomOwned is a field set (FieldsV1, decoded) over v at random: some of
// its fields, list elements by key, value or index, and now and then a
// field v lacks.
func randomOwned(r *rand.Rand, v any) map[string]any {
	owned := map[string]any{}
	if r.IntN(8) == 0 {
		owned["f:absent"] = map[string]any{}
	}
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if r.IntN(3) > 0 {
				owned["f:"+k] = randomOwned(r, e)
			}
		}
	case []any:
		for i, e := range v {
			switch m, _ := e.(map[string]any); {
			case r.IntN(2) == 0:
			case m != nil && len(m) > 0:
				for k, kv := range m {
					key, _ := json.Marshal(map[string]any{k: kv})
					if elementOf(v, "k:"+string(key)) == i { // names this element, not an earlier one
						owned["k:"+string(key)] = randomOwned(r, e)
					} else {
						owned["i:"+strconv.Itoa(i)] = randomOwned(r, e)
					}
					break
				}
			case m == nil && elementOf(v, "v:"+mustJSON(e)) == i:
				owned["v:"+mustJSON(e)] = map[string]any{}
			default:
				owned["i:"+strconv.Itoa(i)] = map[string]any{}
			}
		}
	default:
		owned["."] = map[string]any{}
	}
	return owned
}

// matchApplied compares a value with a JSON value (as Holds does for a
// configuration that encodes itself) as projecting the value's JSON and
// comparing would.
func TestMatchApplied_isProjectOfTheWholeValueCompared(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var equal, differ int
	for i, x := range samples(t) {
		whole, ok := viaBytes(x)
		if !ok {
			continue
		}
		for range 20 {
			owned := randomOwned(r, whole)
			projected, ok := project(whole, owned)
			wants := []any{projected, mutated(r, projected), mutated(r, projected), nil, map[string]any{}}
			for _, want := range wants {
				got := matchApplied(reflect.ValueOf(x), owned, reflect.ValueOf(want), nested)
				if expect := ok && jsonEqual(projected, want); got != expect {
					ob, _ := json.Marshal(owned)
					t.Fatalf("sample %d (%T), owned %s, want %v:\nmatchApplied = %v, project then compare = %v (projected %v, %v)",
						i, x, ob, want, got, expect, projected, ok)
				} else if got {
					equal++
				} else {
					differ++
				}
			}
		}
	}
	if equal < 500 || differ < 500 {
		t.Fatalf("too few cases of each answer to tell: %d equal, %d not", equal, differ)
	}
}

// mutated is a copy of the JSON value v with one change at random (a
// value replaced, a field or element dropped or added), or v itself now
// and then.
func mutated(r *rand.Rand, v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v)+1)
		var keys []string
		for k, e := range v {
			out[k] = e
			keys = append(keys, k)
		}
		slices.Sort(keys)
		switch n := r.IntN(len(keys) + 2); {
		case n < len(keys):
			out[keys[n]] = mutated(r, v[keys[n]])
		case n == len(keys) && len(keys) > 0:
			delete(out, keys[r.IntN(len(keys))])
		default:
			out["added"] = "x"
		}
		return out
	case []any:
		out := slices.Clone(v)
		switch n := r.IntN(len(v) + 2); {
		case n < len(v):
			out[n] = mutated(r, v[n])
		case n == len(v) && len(v) > 0:
			out = out[:len(out)-1]
		default:
			out = append(out, "x")
		}
		return out
	case string:
		if r.IntN(8) == 0 {
			return v
		}
		return v + "!"
	case float64:
		return v + 1
	case bool:
		return !v
	}
	return "was null"
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// BenchmarkHolds judges the mirror example's apply against the Secret it
// wrote, as on every reconcile: once equal, once with a changed value.
func BenchmarkHolds(b *testing.B) {
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", UID: "u1"}}
	cfg := func(v string) *corev1ac.SecretApplyConfiguration {
		return corev1ac.Secret("cm", "ns").WithLabels(map[string]string{"mirrored": "true"}).
			WithData(map[string][]byte{"a": []byte(v), "b": []byte("2")}).
			WithOwnerReferences(ControllerReference(owner, corev1.SchemeGroupVersion.WithKind("ConfigMap")))
	}
	cur := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", UID: "u2", ResourceVersion: "12",
			Labels: map[string]string{"mirrored": "true"}, CreationTimestamp: metav1.Unix(1, 0),
			OwnerReferences: []metav1.OwnerReference{*mustOwnerRef(owner)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "mirror", Operation: metav1.ManagedFieldsOperationApply,
				APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(
					`{"f:data":{"f:a":{},"f:b":{}},"f:metadata":{"f:labels":{"f:mirrored":{}},"f:ownerReferences":{"k:{\"uid\":\"u1\"}":{}}}}`)}}}},
		Data: map[string][]byte{"a": []byte("1"), "b": []byte("2")}, Type: corev1.SecretTypeOpaque,
	}
	for _, bc := range []struct {
		name  string
		value string
		want  bool
	}{{"holds", "1", true}, {"changed", "9", false}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if Holds(cur, cfg(bc.value), "mirror") != bc.want {
					b.Fatalf("Holds != %v", bc.want)
				}
			}
		})
	}
}

func mustOwnerRef(owner *corev1.ConfigMap) *metav1.OwnerReference {
	ref := ControllerReference(owner, corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	return &metav1.OwnerReference{APIVersion: *ref.APIVersion, Kind: *ref.Kind, Name: *ref.Name, UID: *ref.UID,
		Controller: ref.Controller, BlockOwnerDeletion: ref.BlockOwnerDeletion}
}

// fullOwned is the field set that owns every field of the JSON value v:
// what an apply of v records. Lists' elements are named by index, or now
// and then by their "name" key.
func fullOwned(r *rand.Rand, v any) map[string]any {
	switch v := v.(type) {
	case map[string]any:
		owned := map[string]any{}
		for k, e := range v {
			owned["f:"+k] = fullOwned(r, e)
		}
		return owned
	case []any:
		owned := map[string]any{}
		for i, e := range v {
			if m, ok := e.(map[string]any); ok && m["name"] != nil && r.IntN(2) == 0 && elementOf(v, "k:"+mustJSON(map[string]any{"name": m["name"]})) == i {
				owned["k:"+mustJSON(map[string]any{"name": m["name"]})] = fullOwned(r, e)
			} else {
				owned["i:"+strconv.Itoa(i)] = fullOwned(r, e)
			}
		}
		return owned
	}
	return map[string]any{}
}

// Holds walks the apply configuration beside the cached object; it answers
// as the JSON values do, for the objects an apply of the configuration
// writes (cur is cfg decoded into the typed object, owning every field),
// those objects changed at random, and field sets at random.
func TestHolds_walkingTheConfigurationAnswersAsItsJSONValue(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var holds, not int
	for i, x := range samples(t) {
		var cur metav1.Object
		switch x.(type) {
		case *corev1ac.PodApplyConfiguration:
			cur = &corev1.Pod{}
		case *appsv1ac.DeploymentApplyConfiguration:
			cur = &appsv1.Deployment{}
		case *corev1ac.SecretApplyConfiguration:
			cur = &corev1.Secret{}
		default:
			continue
		}
		cfg := x.(runtime.ApplyConfiguration)
		raw, err := json.Marshal(cfg)
		if err != nil || json.Unmarshal(raw, cur) != nil {
			continue
		}
		desired, apiVersion, ok := desiredFields(cfg)
		if !ok {
			continue
		}
		whole, _ := jsonValue(reflect.ValueOf(cur))
		for round := range 16 {
			obj := cur
			var owned map[string]any
			switch round % 4 {
			case 0, 1:
				owned = fullOwned(r, desired)
			case 2:
				owned = randomOwned(r, whole)
			case 3:
				owned = fullOwned(r, mutated(r, desired))
			}
			if round%3 == 2 {
				b, _ := json.Marshal(mutated(r, whole))
				changed := reflect.New(reflect.TypeOf(cur).Elem()).Interface().(metav1.Object)
				if json.Unmarshal(b, changed) != nil {
					continue
				}
				obj = changed
			}
			fields, _ := json.Marshal(owned)
			withEntry := reflect.ValueOf(obj).Elem().Addr().Interface().(metav1.Object)
			withEntry.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationApply,
				APIVersion: apiVersion, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: fields}}})
			want := holdsByProjection(withEntry, cfg, owned) // the JSON values compared
			if got := Holds(withEntry, cfg, "m"); got != want {
				t.Fatalf("sample %d (%T) round %d, owned %s: Holds = %v, by JSON values %v\ncfg %s", i, x, round, fields, got, want, raw)
			} else if got {
				holds++
			} else {
				not++
			}
			withEntry.SetManagedFields(nil)
		}
	}
	if holds < 30 || not < 30 {
		t.Fatalf("too few cases of each answer to tell: %d hold, %d not", holds, not)
	}
}

// Maps of bytes (a Secret's data) are compared in place as their JSON
// would be: nil is null, beside "" for an empty value; a value the
// configuration sets that the field set does not own, or one owned it does
// not set, is a difference.
func TestMatchApplied_mapsOfBytesCompareAsTheirJSON(t *testing.T) {
	leaf := map[string]any(nil)
	for _, tc := range []struct {
		name  string
		v, c  map[string][]byte
		owned map[string]any
		want  bool
	}{
		{"equal", map[string][]byte{"a": []byte("x")}, map[string][]byte{"a": []byte("x")}, map[string]any{"f:a": leaf}, true},
		{"another value", map[string][]byte{"a": []byte("x")}, map[string][]byte{"a": []byte("y")}, map[string]any{"f:a": leaf}, false},
		{"null beside empty", map[string][]byte{"a": {}}, map[string][]byte{"a": nil}, map[string]any{"f:a": leaf}, false},
		{"null beside null", map[string][]byte{"a": nil}, map[string][]byte{"a": nil}, map[string]any{"f:a": leaf}, true},
		{"another's entry in the object", map[string][]byte{"a": []byte("x"), "b": []byte("z")}, map[string][]byte{"a": []byte("x")}, map[string]any{"f:a": leaf}, true},
		{"an entry set but not owned", map[string][]byte{"a": []byte("x"), "b": []byte("z")}, map[string][]byte{"a": []byte("x"), "b": []byte("z")}, map[string]any{"f:a": leaf}, false},
		{"an entry owned but not set", map[string][]byte{"a": []byte("x"), "b": []byte("z")}, map[string][]byte{"a": []byte("x")}, map[string]any{"f:a": leaf, "f:b": leaf}, false},
		{"owned but gone from the object", map[string][]byte{}, map[string][]byte{"a": []byte("x")}, map[string]any{"f:a": leaf}, false},
	} {
		got := matchApplied(reflect.ValueOf(tc.v), tc.owned, reflect.ValueOf(tc.c), nested)
		whole, _ := jsonValue(reflect.ValueOf(tc.v))
		want, _ := jsonValue(reflect.ValueOf(tc.c))
		projected, ok := project(whole, tc.owned)
		if reference := ok && jsonEqual(projected, want); got != tc.want || reference != tc.want {
			t.Errorf("%s: matchApplied = %v, project then compare = %v, want %v", tc.name, got, reference, tc.want)
		}
	}
}
