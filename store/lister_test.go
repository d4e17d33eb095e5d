package store

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var podsResource = schema.GroupResource{Resource: "pods"}

func newTestLister(t *testing.T) *Lister[*corev1.Pod] {
	t.Helper()
	s := newTestIndexer(t)
	mustAdd(t, s,
		newPod("ns", "web-1", "1", "app=web", "tier=front"),
		newPod("ns", "web-2", "2", "app=web"),
		newPod("ns", "db", "3", "app=db"),
		newPod("other", "web-3", "4", "app=web"),
		newPod("", "node", "5", "app=web"),
	)
	return NewLister(NewReader(s), podsResource)
}

func TestLister_List(t *testing.T) {
	l := newTestLister(t)
	web := labels.SelectorFromSet(labels.Set{"app": "web"})
	for _, tc := range []struct {
		name string
		list func() []*corev1.Pod
		want []string
	}{
		{name: "a nil selector lists everything", list: func() []*corev1.Pod { return l.List(nil) },
			want: []string{"node", "ns/db", "ns/web-1", "ns/web-2", "other/web-3"}},
		{name: "the everything selector lists everything", list: func() []*corev1.Pod { return l.List(labels.Everything()) },
			want: []string{"node", "ns/db", "ns/web-1", "ns/web-2", "other/web-3"}},
		{name: "the nothing selector lists nothing", list: func() []*corev1.Pod { return l.List(labels.Nothing()) }},
		{name: "a selector filters by labels across namespaces", list: func() []*corev1.Pod { return l.List(web) },
			want: []string{"node", "ns/web-1", "ns/web-2", "other/web-3"}},
		{name: "a namespace lists only its objects", list: func() []*corev1.Pod { return l.Namespace("ns").List(nil) },
			want: []string{"ns/db", "ns/web-1", "ns/web-2"}},
		{name: "a namespace and a selector combine", list: func() []*corev1.Pod { return l.Namespace("ns").List(web) },
			want: []string{"ns/web-1", "ns/web-2"}},
		{name: "a set-based selector works in a namespace", list: func() []*corev1.Pod {
			sel, err := labels.Parse("app=web,tier notin (front)")
			if err != nil {
				t.Fatal(err)
			}
			return l.Namespace("ns").List(sel)
		}, want: []string{"ns/web-2"}},
		{name: "an unknown namespace lists nothing", list: func() []*corev1.Pod { return l.Namespace("nope").List(nil) }},
		{name: "the empty namespace lists every namespace", list: func() []*corev1.Pod { return l.Namespace("").List(web) },
			want: []string{"node", "ns/web-1", "ns/web-2", "other/web-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keys(tc.list()); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLister_Get(t *testing.T) {
	l := newTestLister(t)
	for _, tc := range []struct {
		name         string
		get          func() (*corev1.Pod, error)
		want         string
		wantNotFound bool
	}{
		{name: "a namespaced object is found by name", get: func() (*corev1.Pod, error) { return l.Namespace("ns").Get("db") }, want: "ns/db"},
		{name: "a cluster-scoped object is found by name", get: func() (*corev1.Pod, error) { return l.Get("node") }, want: "node"},
		{name: "a missing name is not found", get: func() (*corev1.Pod, error) { return l.Namespace("ns").Get("nope") }, wantNotFound: true},
		{name: "a name in another namespace is not found", get: func() (*corev1.Pod, error) { return l.Namespace("other").Get("db") }, wantNotFound: true},
		{name: "a namespaced object is not found as cluster-scoped", get: func() (*corev1.Pod, error) { return l.Get("db") }, wantNotFound: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.get()
			if tc.wantNotFound {
				if !apierrors.IsNotFound(err) || got != nil {
					t.Fatalf("got %v, %v; want nil and a NotFound error", got, err)
				}
				status := err.(apierrors.APIStatus).Status()
				if status.Details == nil || status.Details.Kind != "pods" {
					t.Errorf("NotFound details = %+v, want the resource pods", status.Details)
				}
				return
			}
			if err != nil || got == nil || keys([]*corev1.Pod{got})[0] != tc.want {
				t.Errorf("got %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}
