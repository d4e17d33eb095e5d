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
//   - apiserver: a real kube-apiserver with embedded etcd on loopback, for tests and the demo
//
// The root package itself holds no code; it documents the layout.
package ctrlkit
