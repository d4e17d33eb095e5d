package snapshot_test

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/snapshot"
)

type specV1 struct {
	Name  string            `json:"name"`
	Count int32             `json:"count,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
	Inner struct {
		Ports []int32 `json:"ports"`
	} `json:"inner"`
}

// specV1Commented is specV1 with other comments and another type name only.
type specV1Commented struct {
	// Name is the name.
	Name string `json:"name"`
	// Count counts.
	Count int32             `json:"count,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"` // tags
	Inner struct {
		// Ports are the ports.
		Ports []int32 `json:"ports"`
	} `json:"inner"`
}

type specAddedField struct {
	Name  string            `json:"name"`
	Count int32             `json:"count,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
	Inner struct {
		Ports []int32 `json:"ports"`
		Host  string  `json:"host"`
	} `json:"inner"`
}

type specRenamedField struct {
	Name   string            `json:"name"`
	Amount int32             `json:"count,omitempty"`
	Tags   map[string]string `json:"tags,omitempty"`
	Inner  struct {
		Ports []int32 `json:"ports"`
	} `json:"inner"`
}

type specRetypedField struct {
	Name  string            `json:"name"`
	Count int64             `json:"count,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
	Inner struct {
		Ports []int32 `json:"ports"`
	} `json:"inner"`
}

type specRetaggedField struct {
	Name  string            `json:"name"`
	Count int32             `json:"replicas,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
	Inner struct {
		Ports []int32 `json:"ports"`
	} `json:"inner"`
}

type specPointerField struct {
	Name  string            `json:"name"`
	Count *int32            `json:"count,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
	Inner struct {
		Ports []int32 `json:"ports"`
	} `json:"inner"`
}

type tree struct {
	Value    string  `json:"value"`
	Children []*tree `json:"children"`
}

func TestFingerprint(t *testing.T) {
	base := snapshot.Fingerprint(reflect.TypeFor[specV1]())
	if len(base) != 32 {
		t.Fatalf("Fingerprint = %q; want 32 hex digits", base)
	}
	if got := snapshot.Fingerprint(reflect.TypeFor[specV1Commented]()); got != base {
		t.Errorf("a type that differs only in comments and name got another fingerprint")
	}
	for _, tc := range []struct {
		name string
		t    reflect.Type
	}{
		{"a field added in a nested struct", reflect.TypeFor[specAddedField]()},
		{"a field renamed", reflect.TypeFor[specRenamedField]()},
		{"a field retyped", reflect.TypeFor[specRetypedField]()},
		{"a field's json tag changed", reflect.TypeFor[specRetaggedField]()},
		{"a field made a pointer", reflect.TypeFor[specPointerField]()},
		{"a pointer to the type", reflect.TypeFor[*specV1]()},
	} {
		if got := snapshot.Fingerprint(tc.t); got == base {
			t.Errorf("%s: same fingerprint as the original", tc.name)
		}
	}
	cm, secret := snapshot.Fingerprint(reflect.TypeFor[*corev1.ConfigMap]()), snapshot.Fingerprint(reflect.TypeFor[*corev1.Secret]())
	if cm == secret || cm != snapshot.Fingerprint(reflect.TypeFor[*corev1.ConfigMap]()) {
		t.Errorf("ConfigMap %s, Secret %s: want distinct and stable fingerprints", cm, secret)
	}
	if snapshot.Fingerprint(reflect.TypeFor[tree]()) == "" { // a recursive type terminates
		t.Error("no fingerprint for a recursive type")
	}
	if snapshot.Fingerprint(reflect.TypeFor[*corev1.Pod]()) == snapshot.Fingerprint(reflect.TypeFor[*corev1.Node]()) {
		t.Error("Pod and Node share a fingerprint")
	}
}
