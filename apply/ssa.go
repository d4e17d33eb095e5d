package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/ctrlkit/ctrlkit/internal/logctx"
	"github.com/ctrlkit/ctrlkit/object"
)

// Applier is the server-side apply of a typed client: a client-go typed
// resource client (kube.CoreV1().Secrets(ns), whose C is
// *corev1ac.SecretApplyConfiguration) or ctrlkit's client.Client[T] (C is
// runtime.ApplyConfiguration).
type Applier[T any, C runtime.ApplyConfiguration] interface {
	Apply(ctx context.Context, cfg C, opts metav1.ApplyOptions) (T, error)
}

// Apply writes cfg with server-side apply through c, unless the copy of the
// object in cache already holds it (see Holds): then it sends nothing and
// returns the cached copy (read-only: it is the cache's) with Unchanged;
// else it returns the server's copy with Applied.
// A controller that applies its children's desired state on every
// reconcile thus writes only when something changed: its own write's watch
// event, or a restart over objects already in that state, costs no request.
//
// When the cache holds the object, the apply carries its UID as a
// precondition (metadata.uid, on a copy of cfg: cfg is not written): an
// object deleted since the cache saw it is not created again
// from a stale reconcile (a child of an owner deleted meanwhile, which the
// garbage collector would have to delete a second time), and one deleted
// and created anew is not written over. Either way nothing is written, and
// the error (a conflict, or an invalid uid for one created anew) says so
// and wraps the server's (errors.Is(err, ErrGone)); the reconcile's retry,
// or the watch event of the deletion, decides again on the cache's newer
// state. Without the object in cache, Apply creates or updates as a plain
// apply does.
//
// The cache must keep the field manager's entry of metadata.managedFields,
// which informers strip by default: list opts.FieldManager in the
// informers' KeepManagedFieldsOf (manager.Options.Informers), or call
// manager.Manager.KeepManagedFieldsOf with it where the controller is set
// up (a Setup(m) function that has no say in the Options). Without it
// Apply writes every time, as a plain apply does, and says so once per
// type and field manager, on the logger of ctx (in a reconcile, its
// controller's: controller.LoggerFrom; else log/slog's default), as soon as the
// cache holds an object at a version one of its applies answered with,
// without the entry (an object the manager has not applied yet holds no
// entry of its own, so it is no reason to warn). A stale cache costs at
// most a write that changes nothing, or a skipped write made up by the
// reconcile that the watch event of the newer object queues. A cfg of
// another kind than c writes (a ConfigMap's through a Secrets client) is
// an error, and nothing is sent.
func Apply[T Object, C runtime.ApplyConfiguration](ctx context.Context, c Applier[T, C], cache Getter[T], cfg runtime.ApplyConfiguration,
	opts metav1.ApplyOptions) (T, Result, error) {
	typed, ok := cfg.(C)
	if !ok {
		var zero T
		return zero, Unchanged, fmt.Errorf("apply: %T is not an apply configuration of what the client writes (it takes %T)", cfg, *new(C))
	}
	var uid types.UID
	name, named := appliedName(cfg)
	if cache != nil && len(opts.DryRun) == 0 && named {
		if cur, ok := cache.Get(name); ok {
			if Holds(cur, cfg, opts.FieldManager) {
				return cur, Unchanged, nil
			}
			if !setsPrecondition(cfg) { // else sent whatever the cache holds: nothing to warn of
				stripped.check(ctx, cur, opts.FieldManager)
			}
			uid = cur.GetUID()
		}
	}
	if uid != "" {
		if typed, ok = withUID(typed, uid); !ok {
			uid = ""
		}
	}
	obj, err := c.Apply(ctx, typed, opts)
	if err == nil && cache != nil && len(opts.DryRun) == 0 {
		stripped.sent(obj, opts.FieldManager)
	}
	if err != nil && uid != "" && uidRefused(err) {
		err = fmt.Errorf("apply: %s: %w: the cache holds uid %s, which the server no longer has (deleted, or deleted and "+
			"created anew); nothing written: %w", name, ErrGone, uid, err)
	}
	return obj, Applied, err
}

// ErrGone is wrapped by Apply's error when the object the cache holds is
// no longer the server's: its UID precondition failed, and nothing was
// written.
var ErrGone = errors.New("the cached object is gone")

// withUID returns a copy of cfg whose metadata.uid is uid, or cfg and not
// ok when cfg has no metadata.uid to set (a type other than client-go's
// generated apply configurations) or sets one itself. cfg is not written:
// it may be shared (one configuration applied by several workers, or to
// several clusters). The copy is shallow, but for the metadata: the
// request only reads it.
func withUID[C runtime.ApplyConfiguration](cfg C, uid types.UID) (C, bool) {
	v := reflect.ValueOf(cfg)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return cfg, false
	}
	meta := v.Elem().FieldByName("ObjectMetaApplyConfiguration")
	if !meta.IsValid() || meta.Type() != reflect.TypeFor[*metav1ac.ObjectMetaApplyConfiguration]() || meta.IsNil() {
		return cfg, false
	}
	m := *meta.Interface().(*metav1ac.ObjectMetaApplyConfiguration)
	if m.UID != nil {
		return cfg, false
	}
	m.UID = &uid
	cp := reflect.New(v.Elem().Type())
	cp.Elem().Set(v.Elem())
	cp.Elem().FieldByName("ObjectMetaApplyConfiguration").Set(reflect.ValueOf(&m))
	out, ok := cp.Interface().(C)
	if !ok {
		return cfg, false
	}
	return out, true
}

// uidRefused reports whether err is the server refusing an apply's UID
// precondition: a conflict that is not the field managers' (no object of
// that UID), or metadata.uid invalid (an object of another UID: the field
// is immutable).
func uidRefused(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	var causes []metav1.StatusCause
	if d := status.Status().Details; d != nil {
		causes = d.Causes
	}
	switch {
	case apierrors.IsConflict(err):
		return !slices.ContainsFunc(causes, func(c metav1.StatusCause) bool { return c.Type == metav1.CauseTypeFieldManagerConflict })
	case apierrors.IsInvalid(err):
		return slices.ContainsFunc(causes, func(c metav1.StatusCause) bool { return c.Field == "metadata.uid" })
	}
	return false
}

// stripped tells whether the cache drops the field manager's entry of
// managedFields, which leaves Holds nothing to compare, so that every apply
// is sent: it remembers the resource versions the last applies answered
// with (their answers carry the manager's entry), and a cached object at
// one of those versions without the entry is proof that the cache dropped
// it. A cached object with the entry proves the opposite. Either way the
// question is settled for the type and field manager, and nothing more is
// recorded. An object the manager has not applied yet holds no entry of
// its own either way, so it proves nothing.
var stripped strippedFields

type strippedFields struct{ m sync.Map } // warnKey -> *sentVersions

type warnKey struct {
	typ          reflect.Type
	fieldManager string
}

// sentVersions are the resource versions of a type and field manager's
// last applies, until settled.
type sentVersions struct {
	settled atomic.Bool
	mu      sync.Mutex
	rvs     [16]string
	next    int
}

func (s *strippedFields) versions(obj metav1.Object, fieldManager string) *sentVersions {
	k := warnKey{reflect.TypeOf(obj), fieldManager}
	if v, ok := s.m.Load(k); ok {
		return v.(*sentVersions)
	}
	v, _ := s.m.LoadOrStore(k, &sentVersions{})
	return v.(*sentVersions)
}

// sent records the version an apply answered with, when the answer holds
// the field manager's entry.
func (s *strippedFields) sent(obj metav1.Object, fieldManager string) {
	if rv := reflect.ValueOf(obj); !rv.IsValid() || rv.Kind() == reflect.Pointer && rv.IsNil() {
		return
	}
	v := s.versions(obj, fieldManager)
	if v.settled.Load() || !hasEntry(obj, fieldManager) {
		return
	}
	v.mu.Lock()
	v.rvs[v.next] = obj.GetResourceVersion()
	v.next = (v.next + 1) % len(v.rvs)
	v.mu.Unlock()
}

// check settles the question with cur, a cached object Holds found
// changed, and warns once, on the logger of ctx (a reconcile's: its
// controller's), when the cache drops the entry.
func (s *strippedFields) check(ctx context.Context, cur metav1.Object, fieldManager string) {
	v := s.versions(cur, fieldManager)
	if v.settled.Load() {
		return
	}
	if hasEntry(cur, fieldManager) {
		v.settled.Store(true)
		return
	}
	rv := cur.GetResourceVersion()
	v.mu.Lock()
	ours := rv != "" && slices.Contains(v.rvs[:], rv)
	v.mu.Unlock()
	if !ours || v.settled.Swap(true) {
		return
	}
	logctx.From(ctx).Warn("apply: the cache drops this field manager's entry of managedFields, so every apply is sent; list the "+
		"field manager in informer.FactoryOptions.KeepManagedFieldsOf (manager.Options.Informers), or call "+
		"manager.Manager.KeepManagedFieldsOf with it where the controller is set up, to skip applies that change nothing", "type", fmt.Sprintf("%T", cur), "fieldManager", fieldManager)
}

// hasEntry reports whether obj's managedFields hold an entry of fieldManager.
func hasEntry(obj metav1.Object, fieldManager string) bool {
	return slices.ContainsFunc(obj.GetManagedFields(), func(e metav1.ManagedFieldsEntry) bool { return e.Manager == fieldManager })
}

// appliedName is the name and namespace cfg gives its object.
func appliedName(cfg runtime.ApplyConfiguration) (object.ObjectName, bool) {
	var n object.ObjectName
	named, ok := cfg.(interface{ GetName() *string })
	if !ok || named.GetName() == nil {
		return n, false
	}
	n.Name = *named.GetName()
	if ns, ok := cfg.(interface{ GetNamespace() *string }); ok && ns.GetNamespace() != nil {
		n.Namespace = *ns.GetNamespace()
	}
	return n, true
}

// Holds reports whether applying cfg as fieldManager (server-side apply,
// forced or not) would leave cur as it is: cur has an Apply entry of
// fieldManager in its managedFields, for cfg's API version, and the fields
// that entry owns are exactly the fields cfg sets, each with cfg's value.
// A field cfg sets that another manager owns, or that fieldManager owns
// and cfg no longer sets (the apply would remove it), or a value that
// differs, makes it false; so does anything it cannot judge (no managed
// fields, a cfg that does not encode, a precondition such as a
// resourceVersion or uid in cfg). A false answer costs one apply; a true
// one is only given when the apply would write nothing. A field the server
// never returns (a Secret's stringData, which it moves into data) is never
// found in cur, so a cfg setting one never holds: set data instead.
func Holds(cur metav1.Object, cfg runtime.ApplyConfiguration, fieldManager string) bool {
	if v := reflect.ValueOf(cur); fieldManager == "" || !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return false
	}
	c, walked := walkedObject(reflect.ValueOf(cfg))
	walked = walked && c.Kind() == reflect.Struct
	var desired map[string]any
	var apiVersion string
	var ok bool
	if walked { // the usual case: a generated apply configuration, compared as it is
		if apiVersion, ok = stringField(c, "apiVersion"); !ok || preconditioned(c) {
			return false
		}
	} else if desired, apiVersion, ok = desiredFields(cfg); !ok {
		return false
	}
	var raw []byte
	for _, e := range cur.GetManagedFields() {
		if e.Manager == fieldManager && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "" &&
			e.APIVersion == apiVersion && e.FieldsType == "FieldsV1" && e.FieldsV1 != nil {
			raw = e.FieldsV1.Raw
			break
		}
	}
	if raw == nil {
		return false
	}
	arena := fieldSetArenas.Get().(*fieldSetArena)
	defer arena.release() // owned is read only below
	owned, ok := parseFieldSetInto(raw, arena)
	if !ok || owned == nil {
		return false
	}
	switch {
	case namesIdentity(owned): // rare
		return holdsByProjection(cur, cfg, owned)
	case walked:
		return matchApplied(reflect.ValueOf(cur), owned, c, top)
	}
	return matchApplied(reflect.ValueOf(cur), owned, reflect.ValueOf(desired), top)
}

// holdsByProjection is Holds on JSON values, for a field set that names
// what the comparisons in place leave out (see namesIdentity): cfg as JSON
// without what names the object, against the part of cur that owned
// names, likewise.
func holdsByProjection(cur metav1.Object, cfg runtime.ApplyConfiguration, owned map[string]any) bool {
	desired, _, ok := desiredFields(cfg)
	if !ok {
		return false
	}
	whole, ok := jsonValue(reflect.ValueOf(cur))
	if !ok {
		return false
	}
	got, ok := project(whole, owned)
	if !ok {
		return false
	}
	have, _ := got.(map[string]any)
	dropIdentity(have)
	return jsonEqual(have, desired)
}

// namesIdentity reports whether the field set owned names a field that
// dropIdentity drops (or the object or its metadata whole), which
// matchApplied would compare.
func namesIdentity(owned map[string]any) bool {
	names := func(m map[string]any, lv level) bool {
		for k := range m {
			if name, ok := strings.CutPrefix(k, "f:"); ok && lv.identity(name) {
				return true
			}
		}
		return false
	}
	if isLeaf(owned) || names(owned, top) {
		return true
	}
	md, ok := owned["f:metadata"]
	if !ok {
		return false
	}
	sub, _ := md.(map[string]any)
	return isLeaf(sub) || names(sub, metadata)
}

// isLeaf reports whether a field set owns its node whole.
func isLeaf(owned map[string]any) bool {
	return len(owned) == 0 || (len(owned) == 1 && owned["."] != nil)
}

// desiredFields is cfg as JSON without the fields that name the object
// (apiVersion, kind, metadata's name and namespace), which managed fields
// do not record, and cfg's API version. It is not ok when cfg does not
// encode, or sets a field that is a precondition rather than state.
func desiredFields(cfg runtime.ApplyConfiguration) (map[string]any, string, bool) {
	if v := reflect.ValueOf(cfg); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return nil, "", false
	}
	v, ok := jsonValue(reflect.ValueOf(cfg))
	m, isMap := v.(map[string]any)
	if !ok || !isMap {
		return nil, "", false
	}
	apiVersion, _ := m["apiVersion"].(string)
	if md, ok := m["metadata"].(map[string]any); ok {
		for _, k := range preconditions {
			if _, set := md[k]; set {
				return nil, "", false
			}
		}
	}
	dropIdentity(m)
	return m, apiVersion, apiVersion != ""
}

// preconditions are the metadata fields of a configuration that are
// preconditions of the apply rather than state: Holds does not judge one
// that sets any.
var preconditions = []string{"resourceVersion", "uid", "generateName", "deletionTimestamp", "generation"}

// stringField is the string field name of the object c, if it sets one.
func stringField(c reflect.Value, name string) (string, bool) {
	f, ok := fieldOf(c, name)
	if f = deref(f); !ok || f.Kind() != reflect.String || selfEncoding(f) || f.String() == "" {
		return "", false
	}
	return f.String(), true
}

// preconditioned reports whether the configuration's object c sets a
// metadata field that is a precondition rather than state (desiredFields
// refuses those too).
func preconditioned(c reflect.Value) bool {
	md, ok := fieldOf(c, "metadata")
	if !ok {
		return false
	}
	if md, ok = walkedObject(md); !ok {
		return false
	}
	for _, k := range preconditions {
		if _, set := fieldOf(md, k); set {
			return true
		}
	}
	return false
}

// setsPrecondition reports whether cfg, a generated apply configuration,
// sets a precondition of its own (a resourceVersion or uid), which Holds
// never judges.
func setsPrecondition(cfg runtime.ApplyConfiguration) bool {
	c, ok := walkedObject(reflect.ValueOf(cfg))
	return ok && c.Kind() == reflect.Struct && preconditioned(c)
}

// dropIdentity deletes from m the fields that name the object
// (level.identity: apiVersion and kind; metadata's name, namespace and
// creationTimestamp), and metadata when nothing else is left in it.
func dropIdentity(m map[string]any) {
	if m == nil {
		return
	}
	dropNames(m, top)
	if md, ok := m["metadata"].(map[string]any); ok {
		dropNames(md, metadata) // creationTimestamp too: typed objects encode a zero one as null
		if len(md) == 0 {
			delete(m, "metadata")
		}
	}
}

// dropNames deletes from m the fields that name the object at lv.
func dropNames(m map[string]any, lv level) {
	for k := range m {
		if lv.identity(k) {
			delete(m, k)
		}
	}
}

// project returns the part of v that the field set owned names (the
// FieldsV1 format: "f:name" a field, "k:{...}" a list element by its keys,
// "v:value" a set element, "i:N" an element by index, "." the node
// itself). An owned field missing from v makes it not ok: the apply would
// set it again.
func project(v any, owned map[string]any) (any, bool) {
	if isLeaf(owned) {
		return v, true // a leaf, or an atomic value: owned whole
	}
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(owned))
		for k, sub := range owned {
			if k == "." {
				continue
			}
			name, ok := strings.CutPrefix(k, "f:")
			child, present := v[name]
			if !ok || !present {
				return nil, false
			}
			subset, _ := sub.(map[string]any)
			if out[name], ok = project(child, subset); !ok {
				return nil, false
			}
		}
		return out, true
	case []any:
		return projectList(v, owned)
	}
	return nil, false
}

// projectList returns the elements of list that owned names, in the
// list's order, each projected on its own field set.
func projectList(list []any, owned map[string]any) (any, bool) {
	picked := make([]bool, len(list))
	subsets := make([]map[string]any, len(list))
	for k, sub := range owned {
		if k == "." {
			continue
		}
		i := elementOf(list, k)
		if i < 0 {
			return nil, false
		}
		picked[i] = true
		subsets[i], _ = sub.(map[string]any)
	}
	out := make([]any, 0, len(owned))
	for i, e := range list {
		if !picked[i] {
			continue
		}
		p, ok := project(e, subsets[i])
		if !ok {
			return nil, false
		}
		out = append(out, p)
	}
	return out, true
}

// elementOf finds the element of list that the path element k names, or
// -1, also when two elements have k's key or value (see elementAt).
func elementOf(list []any, k string) int {
	switch {
	case strings.HasPrefix(k, "k:"):
		var keys map[string]any
		if json.Unmarshal([]byte(k[2:]), &keys) != nil {
			return -1
		}
		at := -1
		for i, e := range list {
			m, ok := e.(map[string]any)
			if ok && hasKeys(m, keys) {
				if at >= 0 {
					return -1 // two: see elementAt
				}
				at = i
			}
		}
		return at
	case strings.HasPrefix(k, "v:"):
		var want any
		if json.Unmarshal([]byte(k[2:]), &want) != nil {
			return -1
		}
		at := -1
		for i, e := range list {
			if reflect.DeepEqual(e, want) {
				if at >= 0 {
					return -1
				}
				at = i
			}
		}
		return at
	case strings.HasPrefix(k, "i:"):
		if i, err := strconv.Atoi(k[2:]); err == nil && i >= 0 && i < len(list) {
			return i
		}
	}
	return -1
}

// hasKeys reports whether m has every field of keys with its value.
func hasKeys(m, keys map[string]any) bool {
	for k, v := range keys {
		if !reflect.DeepEqual(m[k], v) {
			return false
		}
	}
	return true
}
