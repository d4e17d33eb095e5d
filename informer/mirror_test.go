package informer_test

import (
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/object"
)

// mirror is a Handler that keeps its own view of the objects from the
// events it hears, and records violations of the handler contract: an add
// of a key it holds, an update or delete of a key it does not, an update
// whose old is not what it holds, an update from one object to another
// (another UID: a recreated object is a delete, then an add), a delete
// carrying another object than the one it holds.
type mirror struct {
	mu        sync.Mutex
	view      map[string]string // name -> resource version
	uids      map[string]types.UID
	calls     []string
	errs      []string
	initial   int
	block     chan struct{} // when set, every call waits for it to be closed
	panicOn   func(call string) bool
	onCall    func(call string)
	handlerID string
}

func newMirror() *mirror { return &mirror{view: map[string]string{}, uids: map[string]types.UID{}} }

func (m *mirror) record(call string, f func()) {
	if m.block != nil {
		<-m.block
	}
	m.mu.Lock()
	m.calls = append(m.calls, call)
	f()
	m.mu.Unlock()
	if m.onCall != nil {
		m.onCall(call)
	}
	if m.panicOn != nil && m.panicOn(call) {
		panic("boom: " + call)
	}
}

func (m *mirror) violation(format string, args ...any) {
	m.errs = append(m.errs, fmt.Sprintf(format, args...))
}

func (m *mirror) OnAdd(obj *corev1.ConfigMap, initial bool) {
	m.record(fmt.Sprintf("add %s@%s initial=%v", obj.Name, obj.ResourceVersion, initial), func() {
		if rv, ok := m.view[obj.Name]; ok {
			m.violation("add of %s@%s, already held at %s", obj.Name, obj.ResourceVersion, rv)
		}
		if initial {
			m.initial++
		}
		m.view[obj.Name] = obj.ResourceVersion
		m.uids[obj.Name] = obj.UID
	})
}

func (m *mirror) OnUpdate(old, new *corev1.ConfigMap) {
	m.record(fmt.Sprintf("update %s@%s->%s", new.Name, old.ResourceVersion, new.ResourceVersion), func() {
		if rv, ok := m.view[new.Name]; !ok || rv != old.ResourceVersion {
			m.violation("update of %s from %s, held %q (%v)", new.Name, old.ResourceVersion, rv, ok)
		}
		if old.UID != new.UID {
			m.violation("update of %s from UID %s to %s: another object", new.Name, old.UID, new.UID)
		}
		m.view[new.Name] = new.ResourceVersion
	})
}

func (m *mirror) OnDelete(d object.Deleted[*corev1.ConfigMap]) {
	rv := "-"
	if d.HasObj {
		rv = d.Obj.ResourceVersion
	}
	m.record(fmt.Sprintf("delete %s@%s unknown=%v", d.Name, rv, d.FinalStateUnknown), func() {
		name := d.Name.Name
		if _, ok := m.view[name]; !ok {
			m.violation("delete of %s, not held", d.Name)
		}
		if d.HasObj && d.Obj.UID != m.uids[name] {
			m.violation("delete of %s with UID %s, held UID %s", d.Name, d.Obj.UID, m.uids[name])
		}
		delete(m.view, name)
		delete(m.uids, name)
	})
}

func (m *mirror) snapshot() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.view)
}

func (m *mirror) callList() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.calls...)
}

// check fails t on any contract violation the mirror saw.
func (m *mirror) check(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.errs {
		t.Errorf("%s: %s", m.handlerID, e)
	}
}

// waitForView waits until the mirror's view equals want().
func (m *mirror) waitForView(t *testing.T, d time.Duration, want func() map[string]string) {
	t.Helper()
	var last map[string]string
	waitFor(t, d, "the handler's view to match the server", func() bool {
		last = want()
		return maps.Equal(m.snapshot(), last)
	})
}
