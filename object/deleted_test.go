package object_test

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/object"
)

func TestDeletionHandlingMetaNamespaceKeyFunc(t *testing.T) {
	for _, tc := range []struct {
		name    string
		d       object.Deleted[*corev1.Pod]
		want    string
		wantErr error
	}{
		{
			name: "the tombstone key wins over the object",
			d:    object.Deleted[*corev1.Pod]{Name: object.ObjectName{Namespace: "ns", Name: "old"}, Obj: pod("ns", "new"), HasObj: true, FinalStateUnknown: true},
			want: "ns/old",
		},
		{name: "a key without an object is enough", d: object.Deleted[*corev1.Pod]{Name: object.ObjectName{Namespace: "ns", Name: "a"}}, want: "ns/a"},
		{
			name: "without a key the object is keyed",
			d:    object.Deleted[*corev1.Pod]{Obj: pod("ns", "a"), HasObj: true},
			want: "ns/a",
		},
		{name: "neither key nor object is an error", d: object.Deleted[*corev1.Pod]{}, wantErr: object.ErrNoKey},
		{
			name:    "an object with an empty name is an error",
			d:       object.Deleted[*corev1.Pod]{Obj: pod("ns", ""), HasObj: true},
			wantErr: object.ErrEmptyName,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := object.DeletionHandlingMetaNamespaceKeyFunc(tc.d)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("key = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCompareResourceVersions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		a, b    string
		wantCmp int
		wantOK  bool
	}{
		{name: "numbers compare as numbers, not strings", a: "9", b: "10", wantCmp: -1, wantOK: true},
		{name: "equal versions compare equal", a: "42", b: "42", wantCmp: 0, wantOK: true},
		{name: "the newer version compares greater", a: "100", b: "99", wantCmp: 1, wantOK: true},
		{name: "the largest etcd revision still parses", a: "18446744073709551615", b: "1", wantCmp: 1, wantOK: true},
		{name: "an empty version cannot be ordered", a: "", b: "1"},
		{name: "an opaque version cannot be ordered", a: "abc", b: "1"},
		{name: "a negative number cannot be ordered", a: "-1", b: "1"},
		{name: "a number beyond 64 bits cannot be ordered", a: "18446744073709551616", b: "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmp, ok := object.CompareResourceVersions(tc.a, tc.b)
			if cmp != tc.wantCmp || ok != tc.wantOK {
				t.Errorf("CompareResourceVersions(%q, %q) = %d, %v; want %d, %v", tc.a, tc.b, cmp, ok, tc.wantCmp, tc.wantOK)
			}
		})
	}
}
