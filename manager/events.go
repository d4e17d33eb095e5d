package manager

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// EventRecorder returns a recorder of Kubernetes Events (as "kubectl
// describe" shows them) from component. Events are sent while Run runs;
// one recorded outside Run is dropped.
func (m *Manager) EventRecorder(component string) record.EventRecorder {
	return &recorder{rs: m.recorder, source: corev1.EventSource{Component: component}}
}

// recorders owns the event broadcaster, which exists only during Run.
type recorders struct {
	m *Manager

	mu          sync.Mutex // guards b and byComponent
	b           record.EventBroadcaster
	byComponent map[string]record.EventRecorder
}

func (rs *recorders) start(ctx context.Context) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	// Not ended with ctx: only stop shuts it down, once it has taken it
	// away under the lock, so an event recorded as the manager stops is
	// never handed to a broadcaster that stopped on its own (which logs
	// an error for each).
	rs.b = record.NewBroadcaster(record.WithContext(context.WithoutCancel(ctx)))
	rs.b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: rs.m.kube.CoreV1().Events("")})
	rs.byComponent = map[string]record.EventRecorder{}
}

// started starts the recorders now, and returns a runnable that keeps
// them until its context ends, then flushes and stops them.
func (rs *recorders) started(ctx context.Context) func(context.Context) error {
	rs.start(ctx)
	return func(ctx context.Context) error {
		<-ctx.Done()
		rs.stop()
		return nil
	}
}

func (rs *recorders) stop() {
	rs.mu.Lock()
	b := rs.b
	rs.b, rs.byComponent = nil, nil
	rs.mu.Unlock()
	if b != nil {
		b.Shutdown()
	}
}

// with calls fn with the recorder of source, under the lock that stop
// takes before it shuts the broadcaster down: an event recorded while the
// manager stops is sent or dropped, never handed to a broadcaster that
// stopped (which logs an error for it). Outside Run, fn is not called.
// A recorder's calls do not block: they queue the event or drop it.
func (rs *recorders) with(source corev1.EventSource, fn func(record.EventRecorder)) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.b == nil {
		return
	}
	r, ok := rs.byComponent[source.Component]
	if !ok {
		r = rs.b.NewRecorder(rs.m.scheme, source)
		rs.byComponent[source.Component] = r
	}
	fn(r)
}

// recorder forwards to the component's recorder of the running manager.
type recorder struct {
	rs     *recorders
	source corev1.EventSource
}

func (r *recorder) Event(obj runtime.Object, eventtype, reason, message string) {
	r.rs.with(r.source, func(rec record.EventRecorder) { rec.Event(obj, eventtype, reason, message) })
}

func (r *recorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.rs.with(r.source, func(rec record.EventRecorder) { rec.Eventf(obj, eventtype, reason, messageFmt, args...) })
}

func (r *recorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.rs.with(r.source, func(rec record.EventRecorder) {
		rec.AnnotatedEventf(obj, annotations, eventtype, reason, messageFmt, args...)
	})
}
