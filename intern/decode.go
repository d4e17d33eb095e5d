package intern

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// bytesString returns the table's copy of the string b holds, taking a
// slot (with a new string) on a miss: a hit allocates nothing.
func (t *Table) bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	first, second := t.pair(hash(b))
	// Comparisons of string(b) allocate nothing; a switch on it would copy
	// b when longer than 32 bytes.
	if string(b) == *first {
		return *first
	}
	if string(b) == *second {
		return *second
	}
	s := string(b)
	*second, *first = *first, s
	t.took()
	return s
}

// shortBytes is bytesString for values interned only when short.
func (t *Table) shortBytes(b []byte) string {
	if len(b) > maxValue {
		return string(b)
	}
	return t.bytesString(b)
}

var errWireType = errors.New("wrong wire type")

// ManagedFields says which entries of metadata.managedFields a decoder
// keeps: none (the zero value: informers strip them, as they are large and
// rarely read), all, or those of the field managers in Of (a controller's
// own, which apply.Holds reads to tell an apply that changes nothing).
// Entries it does not keep are skipped before they are decoded.
type ManagedFields struct {
	All bool     // every entry
	Of  []string // else the entries whose manager is one of these
	// Added, when not nil, holds more field managers whose entries are
	// kept, which may be added while decoders read it: decode each object
	// with Now's, so that all of its entries are judged by one set.
	Added *FieldManagers
	added []string // Added's names when Now was called
}

// Now returns k with the names Added has now, fixed: for decoding one
// object.
func (k ManagedFields) Now() ManagedFields {
	if k.Added != nil {
		if p := k.Added.names.Load(); p != nil {
			k.added = *p // never changed in place: Add stores a new slice
		}
		k.Added = nil
	}
	return k
}

// None reports whether k keeps no entry at all (as things stand: a set
// Added to may keep some later).
func (k ManagedFields) None() bool {
	k = k.Now()
	return !k.All && len(k.Of) == 0 && len(k.added) == 0
}

// KeepsManager reports whether k keeps the entries of the field manager
// called name.
func (k ManagedFields) KeepsManager(name string) bool {
	k = k.Now()
	return k.All || slices.Contains(k.Of, name) || slices.Contains(k.added, name)
}

// Keeps reports whether k keeps the managedFields entry whose protobuf
// encoding is entry: with All, or when its manager (field 1) is in Of or
// Added. An entry that does not parse is kept when k may keep any, for
// the decoder to report it.
func (k ManagedFields) Keeps(entry []byte) bool {
	k = k.Now()
	if k.All || k.None() {
		return k.All
	}
	manager, ok := ManagerOf(entry)
	if !ok {
		return true
	}
	for _, names := range [2][]string{k.Of, k.added} { // (string(manager) compared, not converted: no allocation)
		for _, name := range names {
			if string(manager) == name {
				return true
			}
		}
	}
	return false
}

// FieldManagers is a set of field manager names that may grow while it is
// read: the field managers whose managedFields entries a manager's
// informers keep, added to as controllers are set up
// (manager.Manager.KeepManagedFieldsOf). Reads take no lock. The zero
// value is an empty set; a nil *FieldManagers is an empty set too.
type FieldManagers struct {
	mu    sync.Mutex // serialises Add
	names atomic.Pointer[[]string]
}

// Add adds names to the set.
func (s *FieldManagers) Add(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var now []string
	if p := s.names.Load(); p != nil {
		now = *p
	}
	next := slices.Clone(now)
	for _, name := range names {
		if name != "" && !slices.Contains(next, name) {
			next = append(next, name)
		}
	}
	s.names.Store(&next)
}

// Has reports whether name is in the set.
func (s *FieldManagers) Has(name string) bool {
	if s == nil {
		return false
	}
	p := s.names.Load()
	return p != nil && slices.Contains(*p, name)
}

// Empty reports whether the set has no name.
func (s *FieldManagers) Empty() bool {
	if s == nil {
		return true
	}
	p := s.names.Load()
	return p == nil || len(*p) == 0
}

// ManagerOf returns the manager (field 1) of entry, the protobuf encoding
// of a managedFields entry, without decoding the rest; "" when it has
// none. ok is false when entry does not parse.
func ManagerOf(entry []byte) (manager []byte, ok bool) {
	for len(entry) > 0 {
		num, wt, n := protowire.ConsumeTag(entry)
		if n < 0 {
			return nil, false
		}
		entry = entry[n:]
		if num == 1 && wt == protowire.BytesType {
			v, n := protowire.ConsumeBytes(entry)
			if n < 0 {
				return nil, false
			}
			manager = v // the last one, as the generated decoder does
			entry = entry[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, wt, entry); n < 0 {
			return nil, false
		}
		entry = entry[n:]
	}
	return manager, true
}

// UnmarshalLeadingMeta decodes the metadata of b, the protobuf encoding of
// a Kubernetes object whose metadata is its field 1 (as Kubernetes' own
// types have it), into m (which should be zero) with UnmarshalMeta, and
// returns the object's other fields for the type's generated decoder. ok is
// false, with m left zero, when b is not laid out as encoders write an
// object (the metadata first, and only once) or the metadata does not
// decode here: the caller then decodes b whole as usual, which decodes it
// or reports what is wrong.
func (t *Table) UnmarshalLeadingMeta(b []byte, m *metav1.ObjectMeta, keep ManagedFields) (rest []byte, ok bool) {
	num, wt, n := protowire.ConsumeTag(b)
	if n < 0 || num != 1 || wt != protowire.BytesType {
		return nil, false
	}
	meta, mn := protowire.ConsumeBytes(b[n:])
	if mn < 0 {
		return nil, false
	}
	rest = b[n+mn:]
	for r := rest; len(r) > 0; {
		num, _, fn := protowire.ConsumeField(r)
		if fn < 0 || num == 1 {
			return nil, false
		}
		r = r[fn:]
	}
	if err := t.UnmarshalMeta(meta, m, keep); err != nil {
		*m = metav1.ObjectMeta{}
		return nil, false
	}
	return rest, true
}

// UnmarshalMeta decodes b, the protobuf encoding of object metadata, into
// m (which should be zero), interning what Meta interns as it decodes: a
// namespace, generateName, label, annotation key or short value, or
// finalizer the table holds is not allocated at all (owner references are
// decoded, then interned), and each label and annotation goes into its map
// once (Meta, after a decoder, assigns each entry again). Of
// managedFields it decodes the entries keep names, and skips the others
// unread.
//
// What it decodes is what the generated ObjectMeta.Unmarshal followed by
// Meta gives. It is stricter: input the generated decoder reads one way
// and that no encoder writes (a map entry whose key is not
// length-delimited) is an error here; a caller falls back to the generated
// decoder on any error, which then decodes or reports it as usual. An error
// leaves m partly filled. Labels and annotations are not shared whole
// (ShareMaps): only their strings are interned.
func (t *Table) UnmarshalMeta(b []byte, m *metav1.ObjectMeta, keep ManagedFields) error {
	var own ownStrings
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch wt {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, wt, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		want := protowire.BytesType
		if num == 7 || num == 10 {
			want = protowire.VarintType
		}
		if num >= 1 && num <= 17 && num != 15 && num != 16 && wt != want {
			return fmt.Errorf("metadata field %d: %w %d", num, errWireType, wt)
		}
		if err := t.metaField(m, &own, num, v, x, keep); err != nil {
			return fmt.Errorf("metadata field %d: %w", num, err)
		}
	}
	own.set(m)
	return nil
}

// ownStrings holds, while metadata decodes, the bytes of the strings that
// are the object's own (its name, selfLink, UID and resource version):
// never shared with another object, they are allocated together, one
// string for the four, once the metadata is decoded. An object read from
// the wire then costs one allocation for them instead of three (selfLink
// is rarely set), and the collector one object to mark and sweep. A
// caller that keeps one of them past its object keeps the other three's
// few bytes too.
type ownStrings struct{ name, selfLink, uid, resourceVersion []byte }

// set stores the strings in m, which UnmarshalMeta's caller gave it zero:
// absent ones stay empty.
func (o *ownStrings) set(m *metav1.ObjectMeta) {
	var p packer
	if p.grow(len(o.name) + len(o.selfLink) + len(o.uid) + len(o.resourceVersion)) {
		m.Name, m.SelfLink = p.bytes(o.name), p.bytes(o.selfLink)
		m.UID, m.ResourceVersion = types.UID(p.bytes(o.uid)), p.bytes(o.resourceVersion)
	}
}

// packOwn allocates the own strings of m, which its decoder allocated one
// by one, again as one string (see ownStrings); unless they are one
// already, or at most one of them is set.
func packOwn(m *metav1.ObjectMeta) {
	if adjacent(m.Name, m.SelfLink, string(m.UID), m.ResourceVersion) {
		return
	}
	var p packer
	if p.grow(len(m.Name) + len(m.SelfLink) + len(m.UID) + len(m.ResourceVersion)) {
		m.Name, m.SelfLink = p.string(m.Name), p.string(m.SelfLink)
		m.UID, m.ResourceVersion = types.UID(p.string(string(m.UID))), p.string(m.ResourceVersion)
	}
}

// adjacent reports whether the non-empty ones of parts follow each other
// in memory, in this order (true for one or none): as packer leaves them.
func adjacent(parts ...string) bool {
	var end uintptr // where the last non-empty part ends; 0 before the first
	for _, s := range parts {
		if s == "" {
			continue
		}
		start := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		if end != 0 && start != end {
			return false
		}
		end = start + uintptr(len(s))
	}
	return true
}

// packer copies strings into one string and hands out its parts.
type packer struct{ all strings.Builder }

// grow makes room for n bytes; it reports false, allocating nothing, for 0.
func (p *packer) grow(n int) bool {
	p.all.Grow(n)
	return n > 0
}

// bytes is string for b's bytes, which it copies at once: the view of
// them as a string it passes on is never kept.
func (p *packer) bytes(b []byte) string { return p.string(unsafe.String(unsafe.SliceData(b), len(b))) }

// string appends s and returns the packed copy of it ("" for "").
func (p *packer) string(s string) string {
	if s == "" {
		return ""
	}
	start := p.all.Len()
	p.all.WriteString(s)
	return p.all.String()[start:]
}

// metaField sets field num of m from its value: v if length-delimited, x
// if a varint (UnmarshalMeta checked the wire type); the object's own
// strings go to own, for UnmarshalMeta to allocate together.
func (t *Table) metaField(m *metav1.ObjectMeta, own *ownStrings, num protowire.Number, v []byte, x uint64, keep ManagedFields) error {
	var err error
	switch num {
	case 1:
		own.name = v
	case 2:
		m.GenerateName = t.bytesString(v)
	case 3:
		m.Namespace = t.bytesString(v)
	case 4:
		own.selfLink = v
	case 5:
		own.uid = v
	case 6:
		own.resourceVersion = v
	case 7:
		m.Generation = int64(x)
	case 8:
		err = m.CreationTimestamp.Unmarshal(v)
	case 9:
		if m.DeletionTimestamp == nil {
			m.DeletionTimestamp = new(metav1.Time)
		}
		err = m.DeletionTimestamp.Unmarshal(v)
	case 10:
		s := int64(x)
		m.DeletionGracePeriodSeconds = &s
	case 11:
		m.Labels, err = t.mapEntry(m.Labels, v, t.bytesString)
	case 12:
		m.Annotations, err = t.mapEntry(m.Annotations, v, t.shortBytes)
	case 13:
		var r metav1.OwnerReference
		if err = r.Unmarshal(v); err == nil {
			r.APIVersion, r.Kind, r.Name = t.String(r.APIVersion), t.String(r.Kind), t.String(r.Name)
			r.UID = of(t, r.UID)
			m.OwnerReferences = append(m.OwnerReferences, r)
		}
	case 14:
		m.Finalizers = append(m.Finalizers, t.bytesString(v))
	case 17:
		if keep.Keeps(v) {
			var e metav1.ManagedFieldsEntry
			if err = e.Unmarshal(v); err == nil {
				m.ManagedFields = append(m.ManagedFields, e)
			}
		}
	}
	return err
}

// mapEntry adds the map entry b (key field 1, value field 2, each "" when
// absent) to m, made when nil, with its key interned and its value through
// value.
func (t *Table) mapEntry(m map[string]string, b []byte, value func([]byte) string) (map[string]string, error) {
	var key, val []byte
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return m, protowire.ParseError(n)
		}
		b = b[n:]
		if (num == 1 || num == 2) && wt != protowire.BytesType {
			return m, fmt.Errorf("map entry field %d: %w %d", num, errWireType, wt)
		}
		if wt == protowire.BytesType {
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			switch num {
			case 1:
				key = v
			case 2:
				val = v
			}
		} else {
			n = protowire.ConsumeFieldValue(num, wt, b)
		}
		if n < 0 {
			return m, protowire.ParseError(n)
		}
		b = b[n:]
	}
	if m == nil {
		m = make(map[string]string)
	}
	m[t.bytesString(key)] = value(val)
	return m, nil
}
