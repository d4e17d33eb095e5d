package snapshot

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Identity says what a snapshot is of. A snapshot is served only to a reader
// that wants exactly the same identity, field by field: data from another
// cluster, another resource, another selection or another Go type must never
// be taken for the cache.
type Identity struct {
	// Cluster identifies the cluster, e.g. the UID of its kube-system
	// namespace, which survives a change of address. Required.
	Cluster string
	// Server is the API server's URL.
	Server string
	// Group, Version and Resource name the resource listed and watched
	// (Group is empty for the core group). Version and Resource are required.
	Group, Version, Resource string
	// Namespace is the namespace watched; empty for all namespaces.
	Namespace string
	// LabelSelector and FieldSelector are the selectors of the list and watch.
	LabelSelector, FieldSelector string
	// Shards describes the shard ranges watched, in any form the caller
	// chooses (it is compared as an opaque string).
	Shards string
	// Type is the name of the Go type of the objects, e.g. "*v1.ConfigMap".
	// Empty means Write's or Read's T (reflect.Type.String).
	Type string
	// Fingerprint is the schema fingerprint of the Go type (see Fingerprint).
	// Empty means Fingerprint of Write's or Read's T.
	Fingerprint string
}

// fields lists the identity's fields in the order the header stores them,
// each with its name as a MismatchError reports it.
func (id *Identity) fields() []namedField {
	return []namedField{
		{"Cluster", &id.Cluster}, {"Server", &id.Server},
		{"Group", &id.Group}, {"Version", &id.Version}, {"Resource", &id.Resource},
		{"Namespace", &id.Namespace},
		{"LabelSelector", &id.LabelSelector}, {"FieldSelector", &id.FieldSelector},
		{"Shards", &id.Shards},
		{"Type", &id.Type}, {"Fingerprint", &id.Fingerprint},
	}
}

type namedField struct {
	name string
	v    *string
}

// withType fills an empty Type and Fingerprint from t.
func (id Identity) withType(t reflect.Type) Identity {
	if id.Type == "" {
		id.Type = t.String()
	}
	if id.Fingerprint == "" {
		id.Fingerprint = Fingerprint(t)
	}
	return id
}

// validate reports the first required field that is empty.
func (id Identity) validate() error {
	for _, f := range []namedField{{"Cluster", &id.Cluster}, {"Version", &id.Version}, {"Resource", &id.Resource}} {
		if *f.v == "" {
			return fmt.Errorf("snapshot: identity has no %s", f.name)
		}
	}
	return nil
}

// mismatch compares the identity a snapshot has with the one wanted and
// returns a *MismatchError for the first field that differs, or nil.
func mismatch(have, want Identity) error {
	hf, wf := have.fields(), want.fields()
	for i := range hf {
		if *hf[i].v != *wf[i].v {
			return &MismatchError{Field: hf[i].name, Snapshot: *hf[i].v, Want: *wf[i].v}
		}
	}
	return nil
}

// MismatchError reports a snapshot of another identity: Field (an Identity
// field's name, e.g. "Namespace") holds Snapshot in the file and Want in the
// identity asked for. It matches ErrMismatch with errors.Is.
type MismatchError struct {
	Field, Snapshot, Want string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("snapshot: identity mismatch: %s is %q in the snapshot, want %q", e.Field, e.Snapshot, e.Want)
}

// Is reports whether target is ErrMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// Fingerprint returns a schema fingerprint of t: a hash of its structure,
// walked recursively: kinds, element, key and field types, array lengths,
// and for each exported or embedded struct field its name and its json and
// protobuf tags, plus whether a type encodes itself (json.Marshaler,
// encoding.TextMarshaler). A type that gained, lost, renamed or retyped a
// field, or changed a tag, gets another fingerprint; names of types and
// comments do not count, and unexported fields (which encoders do not see)
// do not count unless embedded. Recursive types are handled.
func Fingerprint(t reflect.Type) string {
	var b strings.Builder
	b.WriteString("fingerprint/1 ")
	describe(&b, t, map[reflect.Type]int{})
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:16])
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// describe writes t's structure to b; seen numbers the named types met so
// far, so that a type met again (a recursive type) is written as a reference.
func describe(b *strings.Builder, t reflect.Type, seen map[reflect.Type]int) {
	if t.Name() != "" {
		if n, ok := seen[t]; ok {
			b.WriteString("@" + strconv.Itoa(n))
			return
		}
		seen[t] = len(seen)
	}
	b.WriteString(t.Kind().String())
	if t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler) {
		b.WriteString("+json")
	}
	if t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
		b.WriteString("+text")
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice:
		b.WriteString("(")
		describe(b, t.Elem(), seen)
		b.WriteString(")")
	case reflect.Array:
		b.WriteString("[" + strconv.Itoa(t.Len()) + "](")
		describe(b, t.Elem(), seen)
		b.WriteString(")")
	case reflect.Map:
		b.WriteString("(")
		describe(b, t.Key(), seen)
		b.WriteString(")(")
		describe(b, t.Elem(), seen)
		b.WriteString(")")
	case reflect.Struct:
		b.WriteString("{")
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && !f.Anonymous {
				continue
			}
			fmt.Fprintf(b, "%q %t json:%q protobuf:%q ", f.Name, f.Anonymous, f.Tag.Get("json"), f.Tag.Get("protobuf"))
			describe(b, f.Type, seen)
			b.WriteString(";")
		}
		b.WriteString("}")
	}
}
