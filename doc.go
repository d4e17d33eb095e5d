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
// Packages, one per stage (see ARCHITECTURE.md for what is built today):
//
//   - listwatch: step 1, the ListerWatcher interface and adapters over client-go's clients
//   - reflector: step 1, list and watch forever, recovering from every failure; feeds a Sink
//   - object: the shared vocabulary (Object, keys, typed tombstones, resource versions)
//   - store: steps 4, 5 and 9, the Indexer (typed cache with indexes) and Listers
//   - workqueue: steps 7 and 8, the rate-limited work queue
//   - controller: steps 8 and 9, workers running a Reconciler
//   - apiserver: a real kube-apiserver with embedded etcd on loopback, for tests and the demo
//
// The root package itself holds no code; it documents the layout.
package ctrlkit
