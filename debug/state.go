package debug

import "time"

// State is the document /debug/ctrlkit/state.json serves: the pipeline's
// state at Time.
type State struct {
	Time time.Time `json:"time"`
	// Leader is the leader election's state; nil without leader election.
	Leader *Leader `json:"leader,omitempty"`
	// Shard is this replica's share of its ring; nil without sharding.
	Shard       *Shard       `json:"shard,omitempty"`
	Informers   []Informer   `json:"informers"`
	Controllers []Controller `json:"controllers"`
	// Waiting is the custom resources whose controllers wait for the API
	// server to serve them (manager.WhenServed).
	Waiting []Waiting `json:"waiting,omitempty"`
	// Refused is the clusters a fleet's providers offered that it could
	// not engage, each with why (fleet.Fleet.Refused).
	Refused []Refused `json:"refused,omitempty"`
	// Webhooks is the webhook server; nil when no webhook is registered.
	Webhooks *Webhooks `json:"webhooks,omitempty"`
}

// Waiting is a custom resource not served yet: its controllers start
// once its CRD is Established and serves its version. SetupError, when
// set, is why they have not started though it is served: the setup's
// last error (it is tried again).
type Waiting struct {
	Kind       string `json:"kind"`                 // group/version, Kind=...
	CRD        string `json:"crd"`                  // the CRD's name: plural.group
	SetupError string `json:"setupError,omitempty"` // the failed setup's error, while it is retried
}

// Refused is a cluster a fleet was offered but could not engage: its
// kubeconfig made no client, or its sources could not be built.
type Refused struct {
	Cluster string `json:"cluster"`
	Error   string `json:"error"`
}

// Webhooks is the manager's admission and conversion webhook server.
type Webhooks struct {
	// Addr is the address it listens on ("" before Run has bound it).
	Addr string `json:"addr"`
	// Certificate is the serving certificate: subject, hosts, expiry, when
	// it was read from disk, and the error of the last read if it failed.
	Certificate WebhookCertificate `json:"certificate"`
	Hooks       []Webhook          `json:"hooks"`
}

// WebhookCertificate describes the serving certificate.
type WebhookCertificate struct {
	Subject  string     `json:"subject,omitempty"`
	Hosts    []string   `json:"hosts,omitempty"`
	NotAfter *time.Time `json:"notAfter,omitempty"`
	LoadedAt *time.Time `json:"loadedAt,omitempty"`
	Error    string     `json:"error,omitempty"`
}

// Webhook is one webhook's path and counts since the process started.
type Webhook struct {
	Path string `json:"path"`
	// Type is "validating", "mutating" or "conversion"; Kind the group,
	// version and kind it admits ("" for conversion).
	Type        string     `json:"type"`
	Kind        string     `json:"kind,omitempty"`
	Requests    int64      `json:"requests"`
	Rejections  int64      `json:"rejections"`
	Errors      int64      `json:"errors"`
	Panics      int64      `json:"panics"`
	LastError   string     `json:"lastError,omitempty"`
	LastErrorAt *time.Time `json:"lastErrorAt,omitempty"`
}

// Leader is this replica's view of its leader election.
type Leader struct {
	// Lease is the Lease's namespace/name.
	Lease string `json:"lease"`
	// Identity is this replica's; Holder the one last seen holding the
	// lease; Leading reports that this replica leads.
	Identity string `json:"identity"`
	Holder   string `json:"holder"`
	Leading  bool   `json:"leading"`
}

// Shard is this replica's view of its ring (see package shard).
type Shard struct {
	// Ring is the ring's table, namespace/name; Holder this replica's
	// incarnation (identity#incarnation).
	Ring   string `json:"ring"`
	Holder string `json:"holder"`
	// Members are the live members' identities.
	Members []string `json:"members"`
	// Open counts the virtual shards reconciled here, Pending those being
	// acquired or released, of Virtual.
	Open    int `json:"open"`
	Pending int `json:"pending"`
	Virtual int `json:"virtual"`
	// Ready is "" when the replica's caches reflect its share, else why not.
	Ready string `json:"ready,omitempty"`
}

// Informer is one informer: what it lists and watches, its cache, its
// list and watch, and its handlers.
type Informer struct {
	Name string `json:"name"`
	// Kind is the Go type's group, version and kind ("apps/v1 Deployment");
	// Resource the resource the server serves it as, once known.
	Kind          string `json:"kind,omitempty"`
	Resource      string `json:"resource,omitempty"`
	Namespace     string `json:"namespace,omitempty"`
	LabelSelector string `json:"labelSelector,omitempty"`
	FieldSelector string `json:"fieldSelector,omitempty"`
	// Synced reports that the first list was applied to the cache.
	Synced bool `json:"synced"`
	// Start says how the cache started: "warm (N objects at resource
	// version R)", "cold: why", or "pending" (see informer.CacheStart).
	Start string `json:"start"`
	// Snapshot describes the snapshots written of the cache, when on.
	Snapshot *Snapshot `json:"snapshot,omitempty"`
	// Objects is the number of cached objects; ApproxBytes an estimate of
	// their encoded size (see informer.Stats).
	Objects     int   `json:"objects"`
	ApproxBytes int64 `json:"approxBytes"`
	// ResourceVersion is the resource version the cache reflects.
	ResourceVersion string `json:"resourceVersion"`
	// Queued is the number of changes received and not yet cached.
	Queued int `json:"queued"`
	// Mode is how it last synchronised: "watch-list" or "paginated".
	Mode string `json:"mode"`
	// Syncs counts full synchronisations (the first included); LastSync is
	// when the last one started and LastSyncCause why ("" for the first).
	Syncs         uint64     `json:"syncs"`
	LastSync      *time.Time `json:"lastSync,omitempty"`
	LastSyncCause string     `json:"lastSyncCause,omitempty"`
	// WatchAgeSeconds is how long the open watch has been open; absent
	// while none is.
	WatchAgeSeconds *float64 `json:"watchAgeSeconds,omitempty"`
	ListErrors      uint64   `json:"listErrors"`
	WatchErrors     uint64   `json:"watchErrors"`
	// LastError is the last list or watch error, even if it recovered
	// since; Failing reports that it has not.
	LastError   string     `json:"lastError,omitempty"`
	LastErrorAt *time.Time `json:"lastErrorAt,omitempty"`
	Failing     bool       `json:"failing"`
	Handlers    []Handler  `json:"handlers"`
}

// Snapshot is what an informer wrote of its cache for warm restarts.
type Snapshot struct {
	Writes   int `json:"writes"`
	Failures int `json:"failures"`
	// LastBytes, LastObjects, LastSeconds and LastPauseSeconds describe
	// the last write: its size, objects, time to encode and write, and the
	// informer's pause to take the view.
	LastBytes        int64   `json:"lastBytes"`
	LastObjects      int     `json:"lastObjects"`
	LastSeconds      float64 `json:"lastSeconds"`
	LastPauseSeconds float64 `json:"lastPauseSeconds"`
	LastError        string  `json:"lastError,omitempty"`
}

// Handler is one event handler of an informer (for a manager: one per
// controller that uses the informer, named after it).
type Handler struct {
	Name   string `json:"name"`
	Synced bool   `json:"synced"`
	// PendingKeys is the number of keys with events the handler has not
	// received; OldestPendingSeconds the age of the oldest.
	PendingKeys          int     `json:"pendingKeys"`
	OldestPendingSeconds float64 `json:"oldestPendingSeconds"`
	Panics               uint64  `json:"panics"`
}

// Controller is one controller: its queue, its workers, its errors.
type Controller struct {
	Name    string `json:"name"`
	Workers int    `json:"workers"`
	// Running reports that it was started; Synced that its caches synced
	// and its workers run.
	Running bool `json:"running"`
	Synced  bool `json:"synced"`
	// Leader is "leading" or "standby" under leader election, "every
	// replica" for a controller that runs regardless, "" without election.
	Leader     string       `json:"leader,omitempty"`
	Queue      Queue        `json:"queue"`
	Processing []Processing `json:"processing"`
	// Reconciles counts finished reconciles; Errors the failed ones
	// (panics included); Panics the panics; Retries the keys queued again
	// after an error.
	Reconciles uint64     `json:"reconciles"`
	Errors     uint64     `json:"errors"`
	Panics     uint64     `json:"panics"`
	Retries    uint64     `json:"retries"`
	LastErrors []KeyError `json:"lastErrors"`
}

// Queue is a controller's work queue.
type Queue struct {
	// Depth is the number of keys waiting for a worker.
	Depth int `json:"depth"`
	// Bands splits Depth by priority band (named by priority, e.g. "0",
	// "-100"), highest first.
	Bands []Band `json:"bands"`
	// Oldest is the key that has waited longest; absent when none waits.
	Oldest *QueuedKey `json:"oldest,omitempty"`
	// Redirtied is the number of keys changed while being reconciled: they
	// are reconciled again afterwards.
	Redirtied int `json:"redirtied"`
}

// Band is one priority band of a queue.
type Band struct {
	Name  string `json:"name"`
	Depth int    `json:"depth"`
}

// QueuedKey is a key waiting in a queue.
type QueuedKey struct {
	Key        string     `json:"key"`
	Since      *time.Time `json:"since,omitempty"`
	AgeSeconds float64    `json:"ageSeconds"`
}

// Processing is a key a worker is reconciling.
type Processing struct {
	Key     string  `json:"key"`
	Seconds float64 `json:"seconds"`
}

// KeyError is a failed reconcile.
type KeyError struct {
	Key   string    `json:"key"`
	Error string    `json:"error"`
	At    time.Time `json:"at"`
	// Attempt is the key's failures in a row, this one included.
	Attempt int `json:"attempt"`
}

// Reason is why a key was queued.
type Reason struct {
	// Event is "add", "update", "delete", "initial list", "resync" (of
	// Source), or the controller's own "retry after error", "requeue
	// after", "held for read-your-writes", or the manager's "its writes are
	// visible (read-your-writes)".
	Event string `json:"event"`
	// Source is the informer whose event it was, named as /readyz and the
	// informer rows name it ("configmaps/v1 in namespace team-a"); empty
	// for the controller's own requeues. (Which of For, Owns or Watches
	// queued the key is on the reconcile's trace link, ctrlkit.handler.)
	Source string `json:"source,omitempty"`
	// At is when the key was added for this reason; Due, for a delayed
	// add, when it is handed to the queue.
	At  time.Time  `json:"at"`
	Due *time.Time `json:"due,omitempty"`
}

// Explanation is what /debug/ctrlkit/explain answers for one key of one
// controller: its state now, and why it was added since its last
// reconcile started. Once a reconcile has started and nothing added the
// key again, its reasons are gone; with tracing, TraceID names the trace
// of that reconcile, whose links say why it ran (package tracing).
type Explanation struct {
	Controller string `json:"controller"`
	Key        string `json:"key"`
	// Known reports that the key is cached, queued, being reconciled,
	// failing, or has a recorded reason: anything below.
	Known bool `json:"known"`
	// Summary says it all in one sentence.
	Summary string `json:"summary"`
	// Cached reports that the controller's primary informer (Informer)
	// holds the object, at ResourceVersion.
	Informer        string `json:"informer"`
	Cached          bool   `json:"cached"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Queued reports that the key waits for a worker, at Position (0:
	// next), since QueuedSince. A key added again while it is being
	// reconciled is not queued until that reconcile ends (a key is never
	// reconciled twice at once): Processing is true, and Adds and the
	// reasons count the new adds.
	Queued      bool       `json:"queued"`
	Position    int        `json:"position"`
	QueuedSince *time.Time `json:"queuedSince,omitempty"`
	// Processing reports that a worker is reconciling it, for
	// ProcessingSeconds.
	Processing        bool    `json:"processing"`
	ProcessingSeconds float64 `json:"processingSeconds"`
	// FirstReason and LastReason are why the key was added since its last
	// reconcile started, Adds how many times.
	FirstReason *Reason `json:"firstReason,omitempty"`
	LastReason  *Reason `json:"lastReason,omitempty"`
	Adds        int     `json:"adds"`
	// Attempts is the key's failures in a row; LastError the last of them.
	Attempts  int       `json:"attempts"`
	LastError *KeyError `json:"lastError,omitempty"`
	// TraceID is the trace of the key's latest reconcile, when the
	// controller traces (see package tracing).
	TraceID string `json:"traceId,omitempty"`
}
