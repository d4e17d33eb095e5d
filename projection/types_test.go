package projection_test

import (
	"flag"
	"reflect"
	"testing"
	"time"

	"github.com/ctrlkit/ctrlkit/projection"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/randfill"
)

var seedFlag = flag.Int64("seed", 0, "seed of the randomized tests (0: the clock)")

// protoObject is a generated type with its protobuf methods.
type protoObject interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// TestPlan_anyGeneratedTypeAsItsOwnProjectionDecodesAsUnmarshalDoes fills
// generated types at random (every field, custom encodings included: Time,
// MicroTime, Quantity, IntOrString, FieldsV1, RawExtension), encodes them
// and checks that the full type's own plan decodes exactly what the
// generated Unmarshal does.
func TestPlan_anyGeneratedTypeAsItsOwnProjectionDecodesAsUnmarshalDoes(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (run again with -seed %[1]d)", seed)
	filler := randfill.NewWithSeed(seed).NilChance(0.2).NumElements(1, 2).MaxDepth(8).Funcs(
		func(tm *metav1.Time, c randfill.Continue) { *tm = metav1.Unix(int64(c.Uint64()%4e9), 0) },
		func(tm *metav1.MicroTime, c randfill.Continue) {
			*tm = metav1.NewMicroTime(metav1.Unix(int64(c.Uint64()%4e9), int64(c.Uint64()%1e9)).Time)
		},
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewQuantity(int64(c.Uint64()%1e6), resource.DecimalSI)
		},
	)
	check := func(t *testing.T, obj protoObject, decode func([]byte) (any, error)) {
		t.Helper()
		for range 20 {
			filler.Fill(obj)
			raw, err := obj.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			got, err := decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			want := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(protoObject)
			if err := want.Unmarshal(raw); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Decode differs from %T.Unmarshal: %s", obj, firstDiff("", reflect.ValueOf(got), reflect.ValueOf(want)))
			}
		}
	}
	t.Run("Pod", func(t *testing.T) { check(t, &corev1.Pod{}, decoder[*corev1.Pod](t)) })
	t.Run("Node", func(t *testing.T) { check(t, &corev1.Node{}, decoder[*corev1.Node](t)) })
	t.Run("Service", func(t *testing.T) { check(t, &corev1.Service{}, decoder[*corev1.Service](t)) })
	t.Run("Secret", func(t *testing.T) { check(t, &corev1.Secret{}, decoder[*corev1.Secret](t)) })
	t.Run("Event", func(t *testing.T) { check(t, &corev1.Event{}, decoder[*corev1.Event](t)) })
	t.Run("Deployment", func(t *testing.T) { check(t, &appsv1.Deployment{}, decoder[*appsv1.Deployment](t)) })
	t.Run("StatefulSet", func(t *testing.T) { check(t, &appsv1.StatefulSet{}, decoder[*appsv1.StatefulSet](t)) })
	t.Run("Job", func(t *testing.T) { check(t, &batchv1.Job{}, decoder[*batchv1.Job](t)) })
	t.Run("ClusterRole", func(t *testing.T) { check(t, &rbacv1.ClusterRole{}, decoder[*rbacv1.ClusterRole](t)) })
}

func decoder[P any](t *testing.T) func([]byte) (any, error) {
	plan, err := projection.New[P, P]()
	if err != nil {
		t.Fatal(err)
	}
	return func(raw []byte) (any, error) { return plan.Decode(raw) }
}
