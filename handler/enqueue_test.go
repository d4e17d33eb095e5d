package handler_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

type names []object.ObjectName

func (n *names) Add(name object.ObjectName) { *n = append(*n, name) }

func TestEnqueueObject_queuesTypedNamesAndTombstonesByKey(t *testing.T) {
	var got names
	h := handler.EnqueueObject[*corev1.ConfigMap](&got)
	h.OnAdd(cm("ns", "a", "1", nil), true)
	h.OnUpdate(cm("ns", "a", "1", nil), cm("ns", "a", "2", nil))
	h.OnDelete(object.Deleted[*corev1.ConfigMap]{Name: object.ObjectName{Namespace: "ns", Name: "old"}, Obj: cm("ns", "renamed", "3", nil), HasObj: true})
	h.OnDelete(object.Deleted[*corev1.ConfigMap]{Obj: cm("ns", "b", "4", nil), HasObj: true})
	h.OnDelete(object.Deleted[*corev1.ConfigMap]{Name: object.ObjectName{Name: "cluster-scoped"}})
	h.OnDelete(object.Deleted[*corev1.ConfigMap]{})  // nothing to name
	want := "[ns/a ns/a ns/old ns/b cluster-scoped]" // an update queues its name once
	if fmt.Sprint(got) != want {
		t.Errorf("queued %v, want %s", got, want)
	}
}

func owned(ns, name string, owners ...metav1.OwnerReference) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: owners}}
}

func ref(apiVersion, kind, name string, controller bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, Controller: &controller}
}

func TestEnqueueOwner_queuesTheControllingOwnerOfTheGivenKindOnly(t *testing.T) {
	foo := schema.GroupKind{Group: "example.com", Kind: "Foo"}
	var got names
	h := handler.EnqueueOwner[*appsv1.Deployment](&got, foo)
	h.OnAdd(owned("ns", "d1", ref("example.com/v1", "Foo", "f1", true)), false)
	h.OnAdd(owned("ns", "d2", ref("example.com/v1", "Foo", "f2", false)), false) // not the controller
	h.OnAdd(owned("ns", "d3", ref("other.io/v1", "Foo", "f3", true)), false)     // another group
	h.OnAdd(owned("ns", "d4", ref("example.com/v1", "Bar", "b4", true)), false)  // another kind
	h.OnUpdate(owned("ns", "d5", ref("example.com/v2", "Foo", "old", true)),     // any version of the group
		owned("ns", "d5", ref("example.com/v1", "Foo", "new", true))) // ownership moved: both
	h.OnDelete(object.Deleted[*appsv1.Deployment]{Name: object.ObjectName{Namespace: "ns", Name: "d6"}, Obj: owned("ns", "d6", ref("example.com/v1", "Foo", "f6", true)), HasObj: true})
	h.OnDelete(object.Deleted[*appsv1.Deployment]{Name: object.ObjectName{Namespace: "ns", Name: "d7"}}) // no object: no owner to find
	want := "[ns/f1 ns/old ns/new ns/f6]"
	if fmt.Sprint(got) != want {
		t.Errorf("queued %v, want %s", got, want)
	}
}

func TestEnqueueMapped_mapsOldAndNewAndSkipsInvalidNames(t *testing.T) {
	var got names
	h := handler.EnqueueMapped(&got, func(c *corev1.ConfigMap) []object.ObjectName {
		return []object.ObjectName{{Namespace: c.Namespace, Name: c.Labels["owner"]}}
	})
	h.OnAdd(cm("ns", "a", "1", map[string]string{"owner": "x"}), false)
	h.OnAdd(cm("ns", "b", "1", nil), false) // maps to an empty name: skipped
	h.OnUpdate(cm("ns", "a", "1", map[string]string{"owner": "x"}), cm("ns", "a", "2", map[string]string{"owner": "y"}))
	if want := "[ns/x ns/x ns/y]"; fmt.Sprint(got) != want {
		t.Errorf("queued %v, want %s", got, want)
	}
}

// prioritized records each key with the priority it was added at ("" for
// Add).
type prioritized []string

func (p *prioritized) Add(k object.ObjectName) { *p = append(*p, k.String()) }

func (p *prioritized) AddWithPriority(k object.ObjectName, prio int) {
	*p = append(*p, fmt.Sprintf("%s@%d", k, prio))
}

func TestEnqueueHelpers_queueTheInitialListAndResyncsAtLowPriority(t *testing.T) {
	var got prioritized
	h := handler.EnqueueObject[*corev1.ConfigMap](&got)
	h.OnAdd(cm("ns", "listed", "1", nil), true)                                // initial list: low
	h.OnAdd(cm("ns", "new", "2", nil), false)                                  // a fresh add
	h.OnUpdate(cm("ns", "resynced", "3", nil), cm("ns", "resynced", "3", nil)) // resync: low
	h.OnUpdate(cm("ns", "changed", "3", nil), cm("ns", "changed", "4", nil))   // a real change
	h.OnDelete(object.Deleted[*corev1.ConfigMap]{Name: object.ObjectName{Namespace: "ns", Name: "gone"}})
	want := "[ns/listed@-100 ns/new ns/resynced@-100 ns/changed ns/gone]"
	if fmt.Sprint(got) != want {
		t.Errorf("queued %v, want %s", got, want)
	}

	var keys []string
	k := handler.EnqueueKey[*corev1.ConfigMap](keyAdder{&keys}, nil)
	k.OnAdd(cm("ns", "listed", "1", nil), true)
	k.OnAdd(cm("ns", "new", "2", nil), false)
	k.OnUpdate(cm("ns", "resynced", "3", nil), cm("ns", "resynced", "3", nil))
	if want := "[ns/listed@-100 ns/new ns/resynced@-100]"; fmt.Sprint(keys) != want {
		t.Errorf("EnqueueKey queued %v, want %s", keys, want)
	}
}

// keyAdder is a PriorityAdder of string keys.
type keyAdder struct{ keys *[]string }

func (a keyAdder) Add(k string) { *a.keys = append(*a.keys, k) }

func (a keyAdder) AddWithPriority(k string, prio int) {
	*a.keys = append(*a.keys, fmt.Sprintf("%s@%d", k, prio))
}

// reservingAdder is a keyAdder that is also a Reserver and never blocks.
type reservingAdder struct {
	keyAdder
	reserved *[]int
}

func (a reservingAdder) Reserve(n int) { *a.reserved = append(*a.reserved, n) }
func (a reservingAdder) NeverBlocks()  {}

// plainReserver is a keyAdder that is a Reserver but may block.
type plainReserver struct {
	keyAdder
	reserved *[]int
}

func (a plainReserver) Reserve(n int) { *a.reserved = append(*a.reserved, n) }

func TestEnqueueKey_passesTheInformersHintToAQueueThatTakesIt(t *testing.T) {
	var keys []string
	var reserved []int
	h, ok := handler.EnqueueKey[*corev1.ConfigMap](reservingAdder{keyAdder{&keys}, &reserved}, nil).(handler.Enqueuer[*corev1.ConfigMap])
	if !ok {
		t.Fatal("EnqueueKey's handler into a NonBlockingAdder is not an Enqueuer")
	}
	h.ExpectKeys(1000)
	if fmt.Sprint(reserved) != "[1000]" || len(keys) != 0 {
		t.Errorf("ExpectKeys(1000): reserved %v, queued %v; want [1000] and nothing queued", reserved, keys)
	}
	// Into a queue that may block, the handler is no Enqueuer: the
	// informer never hands it the hint.
	if _, ok := handler.EnqueueKey[*corev1.ConfigMap](plainReserver{keyAdder{&keys}, &reserved}, nil).(handler.Enqueuer[*corev1.ConfigMap]); ok {
		t.Error("EnqueueKey's handler into a queue that may block is an Enqueuer")
	}
	// Mapped keys are not one per object: no hint passed on.
	m := handler.EnqueueMapped[*corev1.ConfigMap](reservingObjects{&reserved}, func(*corev1.ConfigMap) []object.ObjectName { return nil })
	m.(handler.Enqueuer[*corev1.ConfigMap]).ExpectKeys(7)
	if fmt.Sprint(reserved) != "[1000]" {
		t.Errorf("EnqueueMapped passed the hint on: reserved %v, want [1000]", reserved)
	}
	// Queues and controllers take the hint.
	var _ handler.Reserver = (*workqueue.Queue[string])(nil)
	var _ handler.Reserver = (*controller.Controller[string])(nil)
}

// reservingObjects is a Reserver of object names that never blocks.
type reservingObjects struct{ reserved *[]int }

func (a reservingObjects) Add(object.ObjectName) {}
func (a reservingObjects) Reserve(n int)         { *a.reserved = append(*a.reserved, n) }
func (a reservingObjects) NeverBlocks()          {}

// An informer's event is named by its key, cut in place: the name's parts
// are slices of the key string (the string a store keeps, which its
// Reader then finds without building the key). An event whose Key is not
// a valid key is named by its object, as one built by hand.
func TestNames_cutsAnInformersKeyInPlace(t *testing.T) {
	names := handler.Names[*corev1.ConfigMap]()
	key := strings.Clone("ns/a")
	for _, e := range []handler.Event[*corev1.ConfigMap]{
		{Type: handler.AddEvent, Key: key, Obj: cm("ns", "a", "1", nil)},
		{Type: handler.DeleteEvent, Key: key, Deleted: object.Deleted[*corev1.ConfigMap]{Name: object.ObjectName{Namespace: "ns", Name: "a"}}},
	} {
		got := names(nil, &e)
		if len(got) != 1 || got[0] != (object.ObjectName{Namespace: "ns", Name: "a"}) ||
			unsafe.StringData(got[0].Namespace) != unsafe.StringData(key) || unsafe.StringData(got[0].Name) != unsafe.StringData(key[3:]) {
			t.Errorf("a %v event of key %q named %v, not cut from its key", e.Type, key, got)
		}
	}
	bad := handler.Event[*corev1.ConfigMap]{Type: handler.UpdateEvent, Key: "ns/a/b", Obj: cm("ns", "a", "2", nil), Old: cm("ns", "a", "1", nil)}
	if got := names(nil, &bad); !slices.Equal(got, []object.ObjectName{{Namespace: "ns", Name: "a"}}) {
		t.Errorf("an event with the invalid key %q named %v, want its object's name", bad.Key, got)
	}
}
