package deltafifo

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// model is the naive FIFO: every delta of every key, uncompacted, in a
// slice scanned linearly, and the server's state that produced them.
type model struct {
	server  map[string]string // name -> resource version, as the server has it
	replace []string          // pending relist, as "name:rv", or nil
	pending bool              // a relist is pending
	parts   int               // parts of a relist given in parts waiting to be popped
	order   []string          // queued names, first-queued first
	deltas  map[string][]Delta[*corev1.ConfigMap]
	rv      int
	applied []Item[*corev1.ConfigMap] // the last batch popped, handed back at the next pop
}

// consumer applies popped Items the way the informer does: state is its
// cache; seen, during a relist given in parts, what the relist wrote.
type consumer struct {
	state map[string]string
	seen  map[string]bool
}

func (c *consumer) apply(it Item[*corev1.ConfigMap]) {
	switch {
	case it.Replace != nil:
		clear(c.state)
		for _, o := range it.Replace.Items {
			c.state[o.Name] = o.ResourceVersion
		}
	case it.Relist != nil:
		p := it.Relist
		if p.Begin {
			c.seen = map[string]bool{}
		}
		for _, o := range p.Items {
			c.state[o.Name], c.seen[o.Name] = o.ResourceVersion, true
		}
		for _, o := range p.Deleted {
			delete(c.state, o.Name)
		}
		if p.End {
			maps.DeleteFunc(c.state, func(name, _ string) bool { return !c.seen[name] })
		}
	case it.Key != "":
		for _, d := range it.Deltas {
			if d.Type == Deleted {
				delete(c.state, d.Object.Name)
			} else {
				c.state[d.Object.Name] = d.Object.ResourceVersion
			}
		}
	}
}

// write changes key on the server and in both FIFOs: an add if it is
// absent, else an update or (when del) a delete.
func (m *model) write(t *testing.T, f *FIFO[*corev1.ConfigMap], name string, del bool) {
	m.rv++
	o := cm(name, fmt.Sprint(m.rv))
	d := Delta[*corev1.ConfigMap]{Type: Added, Object: o}
	if _, ok := m.server[name]; ok {
		d.Type = Updated
		if del {
			d.Type = Deleted
		}
	}
	if d.Type == Deleted {
		delete(m.server, name)
	} else {
		m.server[name] = o.ResourceVersion
	}
	if !slices.Contains(m.order, name) {
		m.order = append(m.order, name)
	}
	m.deltas[name] = append(m.deltas[name], d)
	if err := f.push(d); err != nil {
		t.Fatal(err)
	}
}

func (m *model) relist(t *testing.T, f *FIFO[*corev1.ConfigMap]) {
	var items []*corev1.ConfigMap
	m.replace = nil
	for _, name := range slices.Sorted(maps.Keys(m.server)) {
		items = append(items, cm(name, m.server[name]))
		m.replace = append(m.replace, name+":"+m.server[name])
	}
	m.pending, m.parts, m.order = true, 0, nil
	clear(m.deltas)
	if err := f.Replace(items, fmt.Sprint(m.rv)); err != nil {
		t.Fatal(err)
	}
}

// streamedRelist gives the server's state as a relist in parts of up to
// three objects, popping (into c) whenever the FIFO holds as many parts as
// it takes, as a concurrent consumer would.
func (m *model) streamedRelist(t *testing.T, f *FIFO[*corev1.ConfigMap], c *consumer) {
	m.pending, m.order = false, nil
	clear(m.deltas)
	if err := f.BeginRelist(); err != nil {
		t.Fatal(err)
	}
	m.parts = 1
	names := slices.Sorted(maps.Keys(m.server))
	for len(names) > 0 {
		n := min(3, len(names))
		var items []*corev1.ConfigMap
		for _, name := range names[:n] {
			items = append(items, cm(name, m.server[name]))
		}
		names = names[n:]
		for m.parts >= MaxQueuedRelistParts {
			m.pop(t, f, c)
		}
		if err := f.RelistItems(items); err != nil {
			t.Fatal(err)
		}
		m.parts++
	}
	if err := f.EndRelist(fmt.Sprint(m.rv)); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	m.parts = len(f.parts) // the end joins the last part when it is still queued
	f.mu.Unlock()
}

// pop pops from both and checks that the real Item is a compaction of the
// model's: same kind, same key, at most two deltas, a delete kept if any was
// queued, and the same final state.
func (m *model) pop(t *testing.T, f *FIFO[*corev1.ConfigMap], c *consumer) {
	if f.Len() == 0 {
		if m.pending || m.parts > 0 || len(m.order) > 0 {
			t.Fatalf("real FIFO is empty, the model has relist=%v parts=%d keys=%q", m.pending, m.parts, m.order)
		}
		return
	}
	batch, err := f.PopBatch(t.Context(), m.applied, 1) // the Deltas handed back are reused
	if err != nil {
		t.Fatal(err)
	}
	m.applied = batch
	it := batch[0]
	switch {
	case m.pending:
		if it.Replace == nil {
			t.Fatalf("popped %s, want the pending relist", describe(it))
		}
		m.pending = false
	case m.parts > 0:
		if it.Relist == nil {
			t.Fatalf("popped %s, want a part of the relist", describe(it))
		}
		m.parts--
	case it.Key != "ns/"+m.order[0]:
		t.Fatalf("popped %s, want key ns/%s", describe(it), m.order[0])
	default:
		m.checkCompaction(t, it)
	}
	c.apply(it)
}

func (m *model) checkCompaction(t *testing.T, it Item[*corev1.ConfigMap]) {
	name := m.order[0]
	full := m.deltas[name]
	m.order = m.order[1:]
	delete(m.deltas, name)
	if err := checkDeltas(it.Deltas); err != nil {
		t.Fatalf("%s: %v", describe(it), err)
	}
	// The lives told are the first and the last of those queued (one if
	// only one was), each told as it began and ended.
	want, got := lives(full), lives(it.Deltas)
	if len(want) > 2 {
		want = []life{want[0], want[len(want)-1]}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("popped %s for %d deltas: lives %+v, want %+v", describe(it), len(full), got, want)
	}
}

// life is what a consumer hears of one object's life while its key was
// queued: whether it heard it begin (added: the object it was added as),
// its last state, and whether it ended (a delete), and, for an object
// added then updated and still alive, that both were told.
type life struct {
	added   *corev1.ConfigMap // the Added delta's object, if it began in the queue
	last    *corev1.ConfigMap
	deleted bool
	updated bool // an add, then an update, told apart
}

// lives splits deltas, in server order, into lives: one ends with each
// delete. An uncompacted life's updates after its add reduce to one update
// unless a delete follows, as appendDelta tells them.
func lives(ds []Delta[*corev1.ConfigMap]) []life {
	var out []life
	var cur *life
	for _, d := range ds {
		if cur == nil {
			out = append(out, life{})
			cur = &out[len(out)-1]
		}
		switch d.Type {
		case Added:
			if cur.added == nil && cur.last == nil {
				cur.added = d.Object
			}
		case Updated:
			cur.updated = cur.added != nil
		case Deleted:
			cur.deleted, cur.updated = true, false
		}
		cur.last = d.Object
		if d.Type == Deleted {
			cur = nil
		}
	}
	return out
}

// FuzzFIFO drives the FIFO and the model with the same operations, two
// bytes each: what to do, and on which of 8 keys. After draining, the
// consumer must hold exactly the server's state.
func FuzzFIFO(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 5, 0, 1, 1, 5, 0})
	f.Add([]byte{0, 1, 0, 2, 3, 0, 0, 1, 5, 0, 5, 0})
	f.Add([]byte{0, 1, 0, 2, 0, 3, 0, 4, 2, 1, 6, 0, 0, 5, 5, 0, 2, 2, 6, 0, 5, 0})
	f.Fuzz(fuzzBody)
}

func fuzzBody(t *testing.T, ops []byte) {
	fifo := New[*corev1.ConfigMap]()
	m := &model{server: map[string]string{}, deltas: map[string][]Delta[*corev1.ConfigMap]{}}
	c := &consumer{state: map[string]string{}}
	for i := 0; i+1 < len(ops); i += 2 {
		name := fmt.Sprintf("k%d", ops[i+1]%8)
		switch ops[i] % 7 {
		case 0, 1:
			m.write(t, fifo, name, false)
		case 2:
			m.write(t, fifo, name, true)
		case 3:
			m.relist(t, fifo)
		case 4:
			fifo.Bookmark(fmt.Sprint(m.rv))
		case 5:
			m.pop(t, fifo, c)
		case 6:
			m.streamedRelist(t, fifo, c)
		}
		if err := fifo.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	for fifo.Len() > 0 {
		m.pop(t, fifo, c)
	}
	if !maps.Equal(c.state, m.server) {
		t.Fatalf("consumer holds %v, the server %v", c.state, m.server)
	}
}
