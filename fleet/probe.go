package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
)

// defaultProbeInterval is Options.ProbeInterval's default.
const defaultProbeInterval = 5 * time.Second

// errDisengaged ends the reconciles in flight of a cluster that left.
var errDisengaged = errors.New("fleet: the cluster was disengaged")

// health is what a member's probe last learnt of its API server.
type health struct {
	mu          sync.Mutex
	unreachable error // nil while the last probe was answered
}

func (h *health) set(err error) {
	h.mu.Lock()
	h.unreachable = err
	h.mu.Unlock()
}

func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unreachable
}

// probe asks the cluster's API server every interval whether it answers
// (GET /livez over the cluster's connections, bounded by the interval),
// until ctx ends. Any HTTP answer counts, an error status too: the server
// is there. Only a request that gets none (a stopped process, a partition
// that drops packets, a refused connection) marks the cluster unreachable,
// until a probe is answered again. Without it, a server that stops
// answering is noticed only when the requests to it time out (a watch's
// connection after about 45 s), and meanwhile the cluster reads as well.
func (m *member) probe(ctx context.Context, dc *discovery.DiscoveryClient, interval time.Duration) {
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, interval)
		err := dc.RESTClient().Get().AbsPath("/livez").Do(pctx).Error()
		cancel()
		if ctx.Err() != nil {
			return
		}
		if _, answered := err.(apierrors.APIStatus); answered || err == nil {
			m.health.set(nil)
		} else {
			m.health.set(fmt.Errorf("fleet: cluster %s: its API server did not answer GET /livez within %s: %w", m.name, interval, err))
		}
		t.Reset(interval)
	}
}

// track makes close cancel a reconcile's context, with errDisengaged as
// the cause; untrack once the reconcile returned, with what to record of
// it: record runs under m's lock unless m is closed, so before close and
// before the cluster's series are deleted (a reconcile that ends as its
// cluster leaves would otherwise make them again after). It returns
// false when m is closed already.
func (m *member) track(cancel context.CancelCauseFunc) (untrack func(record func()), ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return nil, false
	}
	if m.reconciles == nil {
		m.reconciles = map[uint64]context.CancelCauseFunc{}
	}
	m.nextReconcile++
	id := m.nextReconcile
	m.reconciles[id] = cancel
	return func(record func()) {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.reconciles, id)
		if !m.stopped {
			record()
		}
	}, true
}
