package object_test

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ctrlkit/ctrlkit/object"
)

// The constraint is small enough that the API's own types satisfy it.
var (
	_ object.Labeled = (*corev1.Pod)(nil)
	_ object.Labeled = (*unstructured.Unstructured)(nil)
	_ object.Labeled = (*metav1.PartialObjectMetadata)(nil)
)

func pod(ns, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func TestMetaNamespaceKeyFunc(t *testing.T) {
	for _, tc := range []struct {
		name    string
		obj     object.Object
		want    string
		wantErr error
	}{
		{name: "a namespaced object is keyed namespace slash name", obj: pod("ns", "a"), want: "ns/a"},
		{name: "a cluster-scoped object is keyed by its name", obj: pod("", "node-1"), want: "node-1"},
		{name: "an empty name is an error", obj: pod("ns", ""), wantErr: object.ErrEmptyName},
		{name: "an empty name without namespace is an error", obj: pod("", ""), wantErr: object.ErrEmptyName},
		{name: "a slash in the name is an error", obj: pod("ns", "a/b"), wantErr: object.ErrInvalidKey},
		{name: "a slash in the namespace is an error", obj: pod("n/s", "a"), wantErr: object.ErrInvalidKey},
		{
			name: "unstructured objects are keyed the same way",
			obj: func() object.Object {
				u := &unstructured.Unstructured{}
				u.SetNamespace("ns")
				u.SetName("u")
				return u
			}(),
			want: "ns/u",
		},
		{
			name: "metadata-only objects are keyed the same way",
			obj:  &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "m"}},
			want: "m",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := object.MetaNamespaceKeyFunc(tc.obj)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("key = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSplitMetaNamespaceKey(t *testing.T) {
	for _, tc := range []struct {
		name, key, wantNS, wantName string
		wantErr                     bool
	}{
		{name: "two parts are namespace and name", key: "ns/a", wantNS: "ns", wantName: "a"},
		{name: "one part is a cluster-scoped name", key: "a", wantName: "a"},
		{name: "three parts are an error", key: "a/b/c", wantErr: true},
		{name: "an empty key is an error", key: "", wantErr: true},
		{name: "an empty namespace part is an error", key: "/a", wantErr: true},
		{name: "an empty name part is an error", key: "ns/", wantErr: true},
		{name: "a lone slash is an error", key: "/", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, name, err := object.SplitMetaNamespaceKey(tc.key)
			if tc.wantErr {
				if !errors.Is(err, object.ErrInvalidKey) {
					t.Fatalf("err = %v, want ErrInvalidKey", err)
				}
				if ns != "" || name != "" {
					t.Errorf("got %q, %q with the error, want empty parts", ns, name)
				}
				return
			}
			if err != nil || ns != tc.wantNS || name != tc.wantName {
				t.Errorf("got (%q, %q, %v), want (%q, %q, nil)", ns, name, err, tc.wantNS, tc.wantName)
			}
		})
	}
}

func TestObjectName_roundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   object.ObjectName
		key  string
	}{
		{name: "a namespaced name round-trips", in: object.ObjectName{Namespace: "ns", Name: "a"}, key: "ns/a"},
		{name: "a cluster-scoped name round-trips", in: object.ObjectName{Name: "a"}, key: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.in.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := tc.in.String(); got != tc.key {
				t.Fatalf("String = %q, want %q", got, tc.key)
			}
			back, err := object.ParseObjectName(tc.key)
			if err != nil || back != tc.in {
				t.Errorf("ParseObjectName(%q) = %+v, %v; want %+v", tc.key, back, err, tc.in)
			}
		})
	}
}

// FuzzObjectName checks that every valid name survives String then Parse,
// and that Parse accepts exactly what String produces from valid names.
func FuzzObjectName(f *testing.F) {
	for _, s := range []string{"a", "ns/a", "/", "a/", "/a", "a/b/c", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		n, err := object.ParseObjectName(key)
		if err != nil {
			return
		}
		if verr := n.Validate(); verr != nil {
			t.Fatalf("ParseObjectName(%q) = %+v, which does not validate: %v", key, n, verr)
		}
		if n.String() != key {
			t.Fatalf("ParseObjectName(%q).String() = %q", key, n.String())
		}
	})
}
