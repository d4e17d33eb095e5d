package debug

import (
	"fmt"
	"strings"
	"time"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/shard"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// FromInformer converts an informer's snapshot, taken at now. The caller
// fills in what the informer does not know: Kind, Resource, Namespace and
// the selectors.
func FromInformer(st informer.Stats, failing error, now time.Time) Informer {
	r := st.Reflector
	out := Informer{Name: st.Name, Synced: st.Synced, Objects: st.Objects, ApproxBytes: st.ApproxBytes,
		ResourceVersion: st.ResourceVersion, Queued: st.Queued, Mode: r.Mode, Syncs: r.Syncs,
		LastSync: timePtr(r.LastSync), LastSyncCause: r.LastSyncCause, ListErrors: r.ListErrors,
		WatchErrors: r.WatchErrors, LastError: r.LastError, LastErrorAt: timePtr(r.LastErrorAt),
		Failing: failing != nil, Handlers: make([]Handler, 0, len(st.Handlers))}
	out.Start = st.Start.String()
	if sn := st.Snapshot; sn.Writes > 0 || sn.Failures > 0 {
		out.Snapshot = &Snapshot{Writes: sn.Writes, Failures: sn.Failures, LastBytes: sn.LastBytes,
			LastObjects: sn.LastObjects, LastSeconds: sn.LastDuration.Seconds(), LastPauseSeconds: sn.LastPause.Seconds()}
		if sn.LastErr != nil {
			out.Snapshot.LastError = sn.LastErr.Error()
		}
	}
	if !r.WatchSince.IsZero() {
		age := now.Sub(r.WatchSince).Seconds()
		out.WatchAgeSeconds = &age
	}
	for _, h := range st.Handlers {
		out.Handlers = append(out.Handlers, Handler{Name: h.Name, Synced: h.Synced, PendingKeys: h.PendingKeys,
			OldestPendingSeconds: h.OldestPending.Seconds(), Panics: h.Panics})
	}
	return out
}

// FromShard converts a sharder's snapshot: ring is its table's
// namespace/name, ready what its Ready returned.
func FromShard(ring string, st shard.ShardStats, ready error) *Shard {
	out := &Shard{Ring: ring, Holder: st.Holder, Members: st.Members, Open: len(st.Open), Pending: len(st.Pending),
		Virtual: st.Virtual}
	if ready != nil {
		out.Ready = ready.Error()
	}
	return out
}

// FromController converts a controller's snapshot, taken at now; leader
// is Controller.Leader.
func FromController[K comparable](st controller.Stats[K], leader string, now time.Time) Controller {
	q := st.Queue
	out := Controller{Name: st.Name, Workers: st.Workers, Running: st.Running, Synced: st.Synced, Leader: leader,
		Queue:      Queue{Depth: q.Depth, Redirtied: q.Redirtied, Bands: make([]Band, 0, len(q.Bands))},
		Processing: make([]Processing, 0, len(q.Processing)), Reconciles: st.Reconciles, Errors: st.Errors,
		Panics: st.Panics, Retries: st.Retries, LastErrors: make([]KeyError, 0, len(st.LastErrors))}
	for _, b := range q.Bands {
		out.Queue.Bands = append(out.Queue.Bands, Band{Name: b.Name, Depth: b.Depth})
	}
	if q.Oldest != nil {
		out.Queue.Oldest = &QueuedKey{Key: fmt.Sprint(q.Oldest.Key), Since: timePtr(q.Oldest.Since),
			AgeSeconds: age(q.Oldest.Since, now)}
	}
	for _, p := range q.Processing {
		out.Processing = append(out.Processing, Processing{Key: fmt.Sprint(p.Key), Seconds: age(p.Since, now)})
	}
	for _, e := range st.LastErrors {
		out.LastErrors = append(out.LastErrors, keyError(e))
	}
	return out
}

// FromWebhooks converts the webhook server's snapshot; addr is where it
// listens.
func FromWebhooks(st webhook.Stats, addr string) *Webhooks {
	c := st.Certificate
	out := &Webhooks{Addr: addr, Hooks: make([]Webhook, 0, len(st.Webhooks)),
		Certificate: WebhookCertificate{Subject: c.Subject, Hosts: c.Hosts, NotAfter: timePtr(c.NotAfter),
			LoadedAt: timePtr(c.LoadedAt), Error: c.Err}}
	for _, w := range st.Webhooks {
		out.Hooks = append(out.Hooks, Webhook{Path: w.Path, Type: w.Type, Kind: w.Kind, Requests: w.Requests,
			Rejections: w.Rejections, Errors: w.Errors, Panics: w.Panics, LastError: w.LastError,
			LastErrorAt: timePtr(w.LastErrorAt)})
	}
	return out
}

// Cache is where an explanation looks a key up: an informer.
type Cache interface {
	Name() string
	CachedVersion(name object.ObjectName) (rv string, ok bool)
}

// Explain explains key of the controller called name from its KeyStats
// and its primary cache (nil: none), where the key's object is obj, at now.
func Explain[K comparable](name string, key K, obj object.ObjectName, ks controller.KeyStats[K], cache Cache, now time.Time) Explanation {
	e := Explanation{Controller: name, Key: fmt.Sprint(key), Adds: ks.Adds, Attempts: ks.Attempts}
	if cache != nil {
		e.Informer = cache.Name()
		e.ResourceVersion, e.Cached = cache.CachedVersion(obj)
	}
	q := ks.Queue
	e.Queued, e.Processing = q.Queued, q.Processing
	if q.Queued {
		e.Position, e.QueuedSince = q.Position, timePtr(q.Since)
	}
	if q.Processing {
		e.ProcessingSeconds = age(q.Since, now)
	}
	if ks.Adds > 0 {
		e.FirstReason, e.LastReason = reason(ks.First), reason(ks.Last)
	}
	if ks.LastError != nil {
		ke := keyError(*ks.LastError)
		e.LastError = &ke
	}
	e.TraceID = ks.TraceID
	e.Known = e.Cached || e.Queued || e.Processing || ks.Adds > 0 || e.LastError != nil || e.Attempts > 0
	e.Summary = summary(e, now)
	return e
}

// summary says what e says in one sentence.
func summary(e Explanation, now time.Time) string {
	if !e.Known {
		return fmt.Sprintf("%s is not in the cache of %s, not queued and has no recorded history in %s.",
			e.Key, orNone(e.Informer), e.Controller)
	}
	var parts []string
	if e.Cached {
		parts = append(parts, "cached at resource version "+e.ResourceVersion)
	} else {
		parts = append(parts, "not cached")
	}
	switch {
	case e.Processing:
		parts = append(parts, fmt.Sprintf("being reconciled for %.1fs", e.ProcessingSeconds))
	case e.Queued:
		parts = append(parts, fmt.Sprintf("queued at position %d", e.Position))
	case e.LastReason != nil && e.LastReason.Due != nil && e.LastReason.Due.After(now):
		parts = append(parts, fmt.Sprintf("due back in the queue in %s", e.LastReason.Due.Sub(now).Round(time.Millisecond)))
	default:
		parts = append(parts, "not queued")
	}
	if e.LastReason != nil {
		parts = append(parts, "last added by "+describe(*e.LastReason))
	}
	if e.LastError != nil {
		parts = append(parts, fmt.Sprintf("failing (%d in a row): %s", e.Attempts, e.LastError.Error))
	}
	return e.Key + ": " + strings.Join(parts, "; ") + "."
}

func describe(r Reason) string {
	if r.Source != "" {
		return r.Event + " of " + r.Source
	}
	return r.Event
}

func orNone(s string) string {
	if s == "" {
		return "(no informer)"
	}
	return s
}

func reason(r controller.Reason) *Reason {
	return &Reason{Event: r.Event, Source: r.Source, At: r.At, Due: timePtr(r.Due)}
}

func keyError[K comparable](e controller.KeyError[K]) KeyError {
	return KeyError{Key: fmt.Sprint(e.Key), Error: e.Err, At: e.At, Attempt: e.Attempt}
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func age(since, now time.Time) float64 {
	if since.IsZero() {
		return 0
	}
	return now.Sub(since).Seconds()
}
