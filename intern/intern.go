// Package intern makes cached objects share the strings that repeat across
// them: namespaces, label and annotation keys and short values, owner
// kinds, names and UIDs, images, container and volume names, condition
// types, and so on. A decoder allocates every string of every object anew,
// so a cache of 50,000 Pods otherwise holds 50,000 copies of each label key
// and of each image name.
//
// A Table is a small, fixed-size, lossy interner: a string is looked up by
// its hash in a pair of adjacent slots (a two-way set, one cache line); a
// hit returns the slot's copy, a miss takes the pair's first slot and moves
// what it held to the second (so of three strings whose hashes pick one
// pair, the one least recently taken in is evicted).
// It costs a hash and at most two comparisons per string, allocates nothing
// but when it grows, and pins at most its size in strings, however many
// objects pass through; strings that do not repeat only take slots from
// ones that do. A table starts small and doubles, up to its size, each time
// as many strings have missed as it has slots: an informer of a handful of
// objects (one of many, or one per cluster of a fleet) costs a few
// kilobytes, a large one gets the whole table. It is not safe for
// concurrent use: the informer keeps one per informer, used by its
// reflector's goroutine, and a warm start's snapshot decoder one per
// goroutine that decodes. String is the process-wide, concurrency-safe form
// (the standard library's unique package), for code outside an informer.
//
// Only fields that repeat in real clusters are interned; names and UIDs of
// the objects themselves, IPs and container IDs are left alone. Container
// resource lists (requests, limits) that are equal are shared whole (and,
// with Table.ShareMaps, label, annotation and node-selector maps), one map
// for every Pod of a workload: cached objects are read-only, and here
// more so than anywhere: modifying one cached Pod's resources in place
// would change others.
//
// The informer interns every object it caches unless
// informer.Options.DisableInterning is set. Objects are changed in place:
// intern only an object nothing else reads yet, as a transform does.
package intern

import (
	"math/bits"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxValue is the longest annotation value, env value or argument
// interned: longer ones (certificates, JSON blobs, checksums) rarely repeat.
const maxValue = 48

// String returns the canonical copy of s: equal strings interned anywhere
// in the process share one backing array. Safe for concurrent use.
func String(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// DefaultTableSize is NewTable's size when given 0: enough for the distinct
// repeated strings of a few thousand workloads.
const DefaultTableSize = 1 << 13

// Table is a lossy interner of fixed size; see the package documentation.
// The zero value is not usable: use NewTable.
type Table struct {
	slots []string
	mask  uint64
	limit int // the most slots: the size asked for
	// misses counts the strings that took a slot since the table last
	// grew; at len(slots) it doubles.
	misses int
	// lists holds resource lists (container requests and limits) to share
	// whole: a map of two quantities costs ~600 bytes, and every Pod of a
	// workload repeats the same ones.
	lists []corev1.ResourceList
	// maps, when not nil (ShareMaps), holds label, annotation and
	// node-selector maps to share whole: a small map costs ~300 bytes, and
	// every Pod of a workload carries the same labels and annotations,
	// stamped from its template.
	maps []map[string]string
}

// ShareMaps makes t share equal label, annotation and node-selector maps
// whole between the objects it interns, besides their strings: about 300
// bytes saved per map, for every Pod of a workload. It is off by default
// because of what it does to a bug elsewhere: a reconcile that writes into
// a cached object's labels (instead of into a DeepCopy) then changes the
// labels of every object sharing the map, and races with every reader of
// any of them, which Go may stop with "concurrent map read and map
// write". Turn it on for large caches of read-only consumers, with the
// mutation detector on in tests (informer.FactoryOptions.DetectMutations);
// a factory's informers of projections have it on.
func (t *Table) ShareMaps() {
	if t.maps == nil {
		t.maps = make([]map[string]string, len(t.lists))
	}
}

// NewTable returns a table of size slots, rounded up to a power of two of
// at least 2 (0: DefaultTableSize).
func NewTable(size int) *Table {
	if size <= 0 {
		size = DefaultTableSize
	}
	limit := 2
	for limit < size {
		limit <<= 1
	}
	n := min(limit, startSlots)
	return &Table{slots: make([]string, n), mask: uint64(n - 1), limit: limit,
		lists: make([]corev1.ResourceList, max(n/8, 1))}
}

// startSlots is the size a table starts at (unless asked for less).
const startSlots = 256

// took counts a string that took a slot, and grows the table when as many
// have as it has slots. Call it after the slot is written: growing moves
// every slot.
func (t *Table) took() {
	t.misses++
	if t.misses < len(t.slots) || len(t.slots) >= t.limit {
		return
	}
	old := t.slots
	n := 2 * len(old)
	t.slots, t.mask, t.misses = make([]string, n), uint64(n-1), 0
	for i := 0; i < len(old); i += 2 { // the first of each pair last, so it stays first
		for _, s := range [2]string{old[i+1], old[i]} {
			if s != "" {
				first, second := t.pair(hash(s))
				*second, *first = *first, s
			}
		}
	}
	// Shared lists and maps start over in their larger arrays: what is
	// already shared stays shared, the next ones find new slots.
	t.lists = make([]corev1.ResourceList, max(n/8, 1))
	if t.maps != nil {
		t.maps = make([]map[string]string, len(t.lists))
	}
}

// String returns the table's copy of s, taking a slot on a miss.
func (t *Table) String(s string) string {
	if s == "" {
		return ""
	}
	first, second := t.pair(hash(s))
	switch s {
	case *first:
		return *first
	case *second:
		return *second
	}
	*second, *first = *first, s
	t.took()
	return s
}

// pair returns the two slots of the strings whose hash is h. Both slots
// of a pair belong to the same strings, so a string moved from the first
// to the second is still found.
func (t *Table) pair(h uint64) (first, second *string) {
	i := t.pairOf(h)
	return &t.slots[i], &t.slots[i+1]
}

// pairOf is the index of the first slot of the pair of hash h.
func (t *Table) pairOf(h uint64) uint64 { return h & t.mask &^ 1 }

// hash is a fixed 64-bit hash of a string's bytes, or a byte slice's,
// read eight bytes at a time, each word folded in with a 64x64-bit multiply
// whose halves are xored (as wyhash does): a third of FNV-1a's time on the
// 3- to 60-byte strings interned here, which FNV reads a byte per
// multiply. It is fixed, so which strings share a slot does not change
// from run to run; strings made to collide cost sharing, never a value.
func hash[S ~string | ~[]byte](s S) uint64 {
	const k0, k1 = 0xa0761d6478bd642f, 0xe7037ed1a0b428db
	n := len(s)
	h := uint64(n) ^ k0
	var a, b uint64
	switch {
	case n >= 8:
		for i := 0; i+8 < n; i += 8 {
			h = mix(h^word64(s, i), k1)
		}
		a = word64(s, n-8) // the last eight (overlapping the loop's last word unless n is a multiple of 8)
	case n >= 4:
		a, b = word32(s, 0), word32(s, n-4)
	case n > 0:
		a = uint64(s[0])<<16 | uint64(s[n>>1])<<8 | uint64(s[n-1])
	}
	return mix(mix(h^a, k1^b), k0) // the last mix spreads what the first left in its high bits
}

// mix folds a and b into 64 bits: the two halves of their product, xored.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// word64 is the little-endian word at s[i:i+8] (one load once compiled).
func word64[S ~string | ~[]byte](s S, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

// word32 is the little-endian word at s[i:i+4].
func word32[S ~string | ~[]byte](s S, i int) uint64 {
	_ = s[i+3]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24
}

// of interns a string-kinded value (a typed constant like corev1.Protocol).
func of[S ~string](t *Table, s S) S { return S(t.String(string(s))) }

// short interns s when it is short enough to be likely to repeat.
func (t *Table) short(s string) string {
	if len(s) > maxValue {
		return s
	}
	return t.String(s)
}

// Object interns the repeated strings of obj in place: the object metadata
// of any API object, and the spec and status of the types it knows (Pods,
// the largest and most numerous objects most controllers cache). Other
// types get their metadata interned.
func (t *Table) Object(obj any) {
	if m := MetaOf(obj); m != nil {
		t.Meta(m)
	}
	t.Body(obj)
}

// MetaOf returns the object metadata of obj (a typed API object, which
// embeds metav1.ObjectMeta), nil if it has none.
func MetaOf(obj any) *metav1.ObjectMeta {
	if o, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if m, ok := o.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return m
		}
	}
	return nil
}

// Body interns what Object does except the object metadata: for a decoder
// that interned the metadata as it decoded (UnmarshalMeta).
func (t *Table) Body(obj any) {
	switch o := obj.(type) {
	case *corev1.Pod:
		t.podSpec(&o.Spec)
		t.podStatus(&o.Status)
	case *corev1.ConfigMap:
		for k, v := range o.Data {
			o.Data[t.String(k)] = v // values are the payload: left alone
		}
	case *corev1.Secret:
		o.Type = of(t, o.Type)
	}
}

// Meta interns the repeated strings of object metadata: namespace,
// generateName, labels, annotation keys and short values, owner references
// and finalizers; and it allocates the object's own strings (name,
// selfLink, UID, resource version) again as one, as UnmarshalMeta does,
// one object for the collector instead of three. managedFields, if kept,
// are left alone.
func (t *Table) Meta(m *metav1.ObjectMeta) {
	packOwn(m)
	m.Namespace = t.String(m.Namespace)
	m.GenerateName = t.String(m.GenerateName)
	m.Labels = t.sharedMap(m.Labels, t.String)
	m.Annotations = t.sharedMap(m.Annotations, t.short)
	for i := range m.OwnerReferences {
		r := &m.OwnerReferences[i]
		r.APIVersion, r.Kind, r.Name = t.String(r.APIVersion), t.String(r.Kind), t.String(r.Name)
		r.UID = of(t, r.UID) // shared by every object one owner owns
	}
	for i, f := range m.Finalizers {
		m.Finalizers[i] = t.String(f)
	}
}

// stringMap interns m's keys and its values with value, in place (assigning
// to an existing key also replaces the map's copy of the key).
func (t *Table) stringMap(m map[string]string, value func(string) string) {
	for k, v := range m {
		m[t.String(k)] = value(v)
	}
}

// sharedMap returns the table's copy of a map equal to m, taking m's slot
// (its keys and values interned with value) on a miss; without ShareMaps
// it only interns m. A map with a value
// longer than maxValue (a certificate, a JSON blob) is only interned: it
// rarely repeats, and hashing it would cost more than it saves.
func (t *Table) sharedMap(m map[string]string, value func(string) string) map[string]string {
	if len(m) == 0 || t.maps == nil {
		t.stringMap(m, value)
		return m
	}
	var h uint64
	for k, v := range m { // order-independent: the sum of the entries' hashes
		if len(v) > maxValue {
			t.stringMap(m, value)
			return m
		}
		h += hash(k) ^ hash(v)*0x9e3779b97f4a7c15
	}
	slot := &t.maps[h%uint64(len(t.maps))]
	if sameMap(*slot, m) {
		return *slot
	}
	t.stringMap(m, value)
	*slot = m
	return m
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if w, ok := a[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// resourceList returns the table's copy of an equal resource list, taking
// l's slot (with its names interned) on a miss. Equal means the same names
// with quantities of the same value and format, so they print the same.
func (t *Table) resourceList(l corev1.ResourceList) corev1.ResourceList {
	if len(l) == 0 {
		return l
	}
	var h uint64
	for k, q := range l { // order-independent: the sum of the entries' hashes
		h += hash(string(k)) ^ uint64(q.MilliValue())*0x9e3779b97f4a7c15
	}
	slot := &t.lists[h%uint64(len(t.lists))]
	if sameResources(*slot, l) {
		return *slot
	}
	for k, q := range l {
		l[of(t, k)] = q
	}
	*slot = l
	return l
}

func sameResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, q := range b {
		p, ok := a[k]
		if !ok || p.Format != q.Format || p.Cmp(q) != 0 {
			return false
		}
	}
	return true
}

func (t *Table) podSpec(s *corev1.PodSpec) {
	for i := range s.InitContainers {
		t.container(&s.InitContainers[i])
	}
	for i := range s.Containers {
		t.container(&s.Containers[i])
	}
	for i := range s.Volumes {
		t.volume(&s.Volumes[i])
	}
	s.RestartPolicy, s.DNSPolicy = of(t, s.RestartPolicy), of(t, s.DNSPolicy)
	s.ServiceAccountName, s.DeprecatedServiceAccount = t.String(s.ServiceAccountName), t.String(s.DeprecatedServiceAccount)
	s.NodeName, s.SchedulerName, s.PriorityClassName = t.String(s.NodeName), t.String(s.SchedulerName), t.String(s.PriorityClassName)
	s.Subdomain = t.String(s.Subdomain)
	s.NodeSelector = t.sharedMap(s.NodeSelector, t.String)
	for i := range s.Tolerations {
		tol := &s.Tolerations[i]
		tol.Key, tol.Operator, tol.Value, tol.Effect = t.String(tol.Key), of(t, tol.Operator), t.String(tol.Value), of(t, tol.Effect)
	}
	for i := range s.ImagePullSecrets {
		s.ImagePullSecrets[i].Name = t.String(s.ImagePullSecrets[i].Name)
	}
	if s.PreemptionPolicy != nil {
		p := of(t, *s.PreemptionPolicy)
		s.PreemptionPolicy = &p
	}
	if s.RuntimeClassName != nil {
		r := t.String(*s.RuntimeClassName)
		s.RuntimeClassName = &r
	}
}

func (t *Table) container(c *corev1.Container) {
	c.Name, c.Image, c.ImagePullPolicy = t.String(c.Name), t.String(c.Image), of(t, c.ImagePullPolicy)
	c.TerminationMessagePath, c.TerminationMessagePolicy = t.String(c.TerminationMessagePath), of(t, c.TerminationMessagePolicy)
	c.WorkingDir = t.String(c.WorkingDir)
	for i, a := range c.Command {
		c.Command[i] = t.short(a)
	}
	for i, a := range c.Args {
		c.Args[i] = t.short(a)
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		p.Name, p.Protocol = t.String(p.Name), of(t, p.Protocol)
	}
	for i := range c.Env {
		e := &c.Env[i]
		e.Name, e.Value = t.String(e.Name), t.short(e.Value)
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			f := e.ValueFrom.FieldRef
			f.APIVersion, f.FieldPath = t.String(f.APIVersion), t.String(f.FieldPath)
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			r := e.ValueFrom.SecretKeyRef
			r.Name, r.Key = t.String(r.Name), t.String(r.Key)
		}
		if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			r := e.ValueFrom.ConfigMapKeyRef
			r.Name, r.Key = t.String(r.Name), t.String(r.Key)
		}
	}
	for i := range c.EnvFrom {
		e := &c.EnvFrom[i]
		e.Prefix = t.String(e.Prefix)
		if e.ConfigMapRef != nil {
			e.ConfigMapRef.Name = t.String(e.ConfigMapRef.Name)
		}
		if e.SecretRef != nil {
			e.SecretRef.Name = t.String(e.SecretRef.Name)
		}
	}
	c.Resources.Limits = t.resourceList(c.Resources.Limits)
	c.Resources.Requests = t.resourceList(c.Resources.Requests)
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		m.Name, m.MountPath, m.SubPath = t.String(m.Name), t.String(m.MountPath), t.String(m.SubPath)
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p != nil && p.HTTPGet != nil {
			p.HTTPGet.Path, p.HTTPGet.Scheme = t.String(p.HTTPGet.Path), of(t, p.HTTPGet.Scheme)
			p.HTTPGet.Port.StrVal = t.String(p.HTTPGet.Port.StrVal)
		}
	}
}

func (t *Table) volume(v *corev1.Volume) {
	v.Name = t.String(v.Name)
	switch {
	case v.ConfigMap != nil:
		v.ConfigMap.Name = t.String(v.ConfigMap.Name)
	case v.Secret != nil:
		v.Secret.SecretName = t.String(v.Secret.SecretName)
	case v.PersistentVolumeClaim != nil:
		v.PersistentVolumeClaim.ClaimName = t.String(v.PersistentVolumeClaim.ClaimName)
	case v.HostPath != nil:
		v.HostPath.Path = t.String(v.HostPath.Path)
	case v.Projected != nil:
		for i := range v.Projected.Sources {
			s := &v.Projected.Sources[i]
			if s.ServiceAccountToken != nil {
				s.ServiceAccountToken.Path = t.String(s.ServiceAccountToken.Path)
			}
			if s.ConfigMap != nil {
				s.ConfigMap.Name = t.String(s.ConfigMap.Name)
				t.keyToPaths(s.ConfigMap.Items)
			}
			if s.Secret != nil {
				s.Secret.Name = t.String(s.Secret.Name)
				t.keyToPaths(s.Secret.Items)
			}
			if s.DownwardAPI != nil {
				for j := range s.DownwardAPI.Items {
					f := &s.DownwardAPI.Items[j]
					f.Path = t.String(f.Path)
					if f.FieldRef != nil {
						f.FieldRef.APIVersion, f.FieldRef.FieldPath = t.String(f.FieldRef.APIVersion), t.String(f.FieldRef.FieldPath)
					}
				}
			}
		}
	}
}

func (t *Table) keyToPaths(items []corev1.KeyToPath) {
	for i := range items {
		items[i].Key, items[i].Path = t.String(items[i].Key), t.String(items[i].Path)
	}
}

func (t *Table) podStatus(s *corev1.PodStatus) {
	s.Phase, s.QOSClass, s.HostIP = of(t, s.Phase), of(t, s.QOSClass), t.String(s.HostIP)
	s.Reason, s.Message = t.String(s.Reason), t.short(s.Message)
	for i := range s.HostIPs {
		s.HostIPs[i].IP = t.String(s.HostIPs[i].IP)
	}
	for i := range s.Conditions {
		c := &s.Conditions[i]
		c.Type, c.Status, c.Reason = of(t, c.Type), of(t, c.Status), t.String(c.Reason)
	}
	for _, list := range [][]corev1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses} {
		for i := range list {
			cs := &list[i]
			cs.Name, cs.Image, cs.ImageID = t.String(cs.Name), t.String(cs.Image), t.String(cs.ImageID)
			if w := cs.State.Waiting; w != nil {
				w.Reason = t.String(w.Reason)
			}
			if term := cs.State.Terminated; term != nil {
				term.Reason = t.String(term.Reason)
			}
			if term := cs.LastTerminationState.Terminated; term != nil {
				term.Reason = t.String(term.Reason)
			}
		}
	}
}
