// Package ctrlkit is a toolkit for writing Kubernetes controllers: the
// client-go controller pipeline, written again from scratch, typed with
// generics, and tested against a real API server.
//
//	API server ──1 List & Watch──> Reflector ──2 Add──> DeltaFIFO ──3 Pop──> Informer ──4 Add──> Indexer
//	                                                                            │ 6 dispatch   (5 store by key)
//	                                                                            v
//	Process Item <──8 Get key── Workqueue <──7 Enqueue key── Resource Event Handlers
//	     └──9 Get object for key──> Indexer (via Lister)
//
// Most users start with package manager, which wires the stages below into a
// runtime: shared informers by type, controllers built from For, Owns and
// Watches, /metrics, /healthz, /readyz and the live /debug/ctrlkit page, one
// lifecycle.
//
// Packages, one per stage (see ARCHITECTURE.md for what is built today):
//
//   - manager: the runtime that runs controllers over shared informers
//   - client: one typed client for any type in the scheme (built-in or custom): every verb, status, server-side apply
//   - apply: owner references and create-or-update, the writes controllers make
//   - election: leader election on a Lease, so one replica of several reconciles
//   - lease: what election and ring membership share: lease timing, default identity, the renew-deadline fence
//   - ledger: read-your-writes, the writes made for each key and the gate that waits for them
//   - fleet: one controller over a changing set of clusters, its keys naming the cluster
//   - tracing: why a reconcile ran, as OpenTelemetry spans linked to every event merged into it, write spans, KEP-5915's traceparent
//   - debug: the live /debug/ctrlkit page and its JSON, composed from each stage's Stats snapshot
//   - webhook: admission (typed validators and defaulters) and conversion webhooks over HTTPS, certificates reloaded
//   - ociimage: a controller program's container image without a Docker daemon (a static
//     binary, non-root, no base), as a tarball or pushed; ctrlkit image
//   - listwatch: step 1, the ListerWatcher interface and adapters over client-go's clients
//   - shard: a replica's share of a resource as hash ranges, filtered by the API server (sharded list and watch);
//     ring membership and the handoff protocol (a pure machine and its Lease driver)
//   - reflector: step 1, list and watch forever, recovering from every failure; feeds a Sink
//   - object: the shared vocabulary (Object, keys, typed tombstones, resource versions)
//   - deltafifo: steps 2 and 3, per-key deltas in server order, relists whole or in parts
//   - informer: steps 3 to 6, the shared informer that owns the cache and notifies handlers
//   - telemetry: the logger and metrics registerer every stage's options embed
//   - intern: the memory-first cache, repeated strings of cached objects shared
//   - projection: lean objects, a projection type (only the fields a controller reads) decoded straight from
//     protobuf, never building the full object
//   - snapshot: warm restarts: a cache written to disk with what it is of, read back only if it matches and is
//     intact (the informer resumes from it: informer.Options.Snapshot, manager.Options.CacheDir)
//   - perturb: tests users' controllers under seeded stale reads, relists, failover and crashes after each
//     write, with their invariants
//   - store: steps 4, 5 and 9, the Indexer (typed cache with indexes), Reader and Listers
//   - handler: steps 6 and 7, resource event handlers and the enqueue helpers
//   - workqueue: steps 7 and 8, the rate-limited work queue
//   - controller: steps 8 and 9, workers running a Reconciler
//   - apiserver: a real kube-apiserver with embedded etcd on loopback, for tests and the demo
//
// Programs and examples:
//
//   - examples/guide: the controller that docs/guide.md ("write your own controller") builds and tests
//   - examples/podlogger: the seed documents' example, an informer and a worker printing Pods
//   - examples/mirror: a Secret beside every labelled ConfigMap, on the manager
//   - examples/foo: a custom resource that owns Deployments, with status, Events and RBAC
//   - cmd/ctrlkit: the command line: the demo, the sample controllers, and building and running the API server
//   - internal: not for users; the layering test and helpers for ctrlkit's own tests
//
// Modules of their own, so their dependencies stay out of yours:
//
//   - testenv: the ctrlkit-apiserver command (kube-apiserver and etcd in one binary) that package apiserver runs
//   - bench: side-by-side benchmarks with client-go
//   - e2e: browser tests: the debug page in headless Chromium against the real API server
//
// The root package itself holds no code; it documents the layout.
package ctrlkit
