package handler_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/object"
)

func cm(ns, name, rv string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv, Labels: labels}}
}

// recorder is a Handler that writes each call as a line.
type recorder struct{ calls []string }

func (r *recorder) OnAdd(obj *corev1.ConfigMap, initial bool) {
	r.calls = append(r.calls, fmt.Sprintf("add %s@%s initial=%v", obj.Name, obj.ResourceVersion, initial))
}
func (r *recorder) OnUpdate(old, new *corev1.ConfigMap) {
	r.calls = append(r.calls, fmt.Sprintf("update %s@%s->%s", new.Name, old.ResourceVersion, new.ResourceVersion))
}
func (r *recorder) OnDelete(d object.Deleted[*corev1.ConfigMap]) {
	rv := "-"
	if d.HasObj {
		rv = d.Obj.ResourceVersion
	}
	r.calls = append(r.calls, fmt.Sprintf("delete %s@%s unknown=%v", d.Name, rv, d.FinalStateUnknown))
}

type keys []string

func (k *keys) Add(key string) { *k = append(*k, key) }

func TestFuncs_nilFunctionsIgnoreTheirEvents(t *testing.T) {
	var adds int
	h := handler.Funcs[*corev1.ConfigMap]{AddFunc: func(*corev1.ConfigMap, bool) { adds++ }}
	h.OnAdd(cm("ns", "a", "1", nil), true)
	h.OnUpdate(cm("ns", "a", "1", nil), cm("ns", "a", "2", nil))
	h.OnDelete(object.Deleted[*corev1.ConfigMap]{Name: object.ObjectName{Namespace: "ns", Name: "a"}})
	if adds != 1 {
		t.Errorf("AddFunc called %d times, want 1", adds)
	}
}

func TestFiltering_turnsFilterCrossingsIntoAddsAndDeletes(t *testing.T) {
	on := map[string]string{"watch": "yes"}
	for _, tc := range []struct {
		name string
		call func(h handler.Handler[*corev1.ConfigMap])
		want []string
	}{
		{
			name: "an add that passes is forwarded",
			call: func(h handler.Handler[*corev1.ConfigMap]) { h.OnAdd(cm("ns", "a", "1", on), true) },
			want: []string{"add a@1 initial=true"},
		},
		{
			name: "an add that fails is dropped",
			call: func(h handler.Handler[*corev1.ConfigMap]) { h.OnAdd(cm("ns", "a", "1", nil), false) },
		},
		{
			name: "an update inside the filter stays an update",
			call: func(h handler.Handler[*corev1.ConfigMap]) { h.OnUpdate(cm("ns", "a", "1", on), cm("ns", "a", "2", on)) },
			want: []string{"update a@1->2"},
		},
		{
			name: "an object entering the filter is an add",
			call: func(h handler.Handler[*corev1.ConfigMap]) {
				h.OnUpdate(cm("ns", "a", "1", nil), cm("ns", "a", "2", on))
			},
			want: []string{"add a@2 initial=false"},
		},
		{
			name: "an object leaving the filter is a delete of the last state the handler accepted",
			call: func(h handler.Handler[*corev1.ConfigMap]) {
				h.OnUpdate(cm("ns", "a", "1", on), cm("ns", "a", "2", nil))
			},
			want: []string{"delete ns/a@1 unknown=false"},
		},
		{
			name: "an update outside the filter is dropped",
			call: func(h handler.Handler[*corev1.ConfigMap]) {
				h.OnUpdate(cm("ns", "a", "1", nil), cm("ns", "a", "2", nil))
			},
		},
		{
			name: "a delete of a filtered object is forwarded",
			call: func(h handler.Handler[*corev1.ConfigMap]) {
				h.OnDelete(object.Deleted[*corev1.ConfigMap]{Name: object.ObjectName{Namespace: "ns", Name: "a"}, Obj: cm("ns", "a", "3", on), HasObj: true})
			},
			want: []string{"delete ns/a@3 unknown=false"},
		},
		{
			name: "a delete of an object outside the filter is dropped",
			call: func(h handler.Handler[*corev1.ConfigMap]) {
				h.OnDelete(object.Deleted[*corev1.ConfigMap]{Name: object.ObjectName{Namespace: "ns", Name: "a"}, Obj: cm("ns", "a", "3", nil), HasObj: true})
			},
		},
		{
			name: "a tombstone without an object is forwarded",
			call: func(h handler.Handler[*corev1.ConfigMap]) {
				h.OnDelete(object.Deleted[*corev1.ConfigMap]{Name: object.ObjectName{Namespace: "ns", Name: "a"}, FinalStateUnknown: true})
			},
			want: []string{"delete ns/a@- unknown=true"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			tc.call(handler.Filtering[*corev1.ConfigMap]{
				Filter:  func(c *corev1.ConfigMap) bool { return c.Labels["watch"] == "yes" },
				Handler: r,
			})
			if !slices.Equal(r.calls, tc.want) {
				t.Errorf("calls = %q, want %q", r.calls, tc.want)
			}
		})
	}
}

func TestEnqueueKey_addsNamespaceSlashNameForEveryEvent(t *testing.T) {
	var q keys
	h := handler.EnqueueKey[*corev1.ConfigMap](&q, nil)
	h.OnAdd(cm("ns", "a", "1", nil), true)
	h.OnUpdate(cm("ns", "b", "1", nil), cm("ns", "b", "2", nil))
	h.OnDelete(object.Deleted[*corev1.ConfigMap]{Name: object.ObjectName{Namespace: "ns", Name: "c"}, FinalStateUnknown: true})
	h.OnDelete(object.Deleted[*corev1.ConfigMap]{Obj: cm("", "d", "1", nil), HasObj: true})
	if want := []string{"ns/a", "ns/b", "ns/c", "d"}; !slices.Equal(q, want) {
		t.Errorf("queued %q, want %q", q, want)
	}
}

func TestEnqueueKey_logsAndSkipsObjectsWithoutAValidKey(t *testing.T) {
	var q keys
	var buf bytes.Buffer
	h := handler.EnqueueKey[*corev1.ConfigMap](&q, slog.New(slog.NewTextHandler(&buf, nil)))
	h.OnAdd(cm("ns", "", "1", nil), false)
	h.OnDelete(object.Deleted[*corev1.ConfigMap]{})
	if len(q) != 0 {
		t.Errorf("queued %q, want nothing", q)
	}
	if n := strings.Count(buf.String(), "cannot enqueue"); n != 2 {
		t.Errorf("logged %d errors, want 2:\n%s", n, buf.String())
	}
}
