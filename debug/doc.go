// Package debug serves a live view of a ctrlkit pipeline: one HTML page
// (/debug/ctrlkit) that polls a JSON document (/debug/ctrlkit/state.json)
// and explains single keys (/debug/ctrlkit/explain). The manager mounts it
// on its HTTP listener; any program can mount New(its own Source).
//
//	informer.Stats ─┐
//	controller.Stats ┼─> Source.State() ──> state.json ──> page (polls every second)
//	controller.KeyStats ─> Source.Explain() ──> explain
//
// /debug/ctrlkit/explain?controller=NAME&key=KEY answers, as JSON, why the
// controller called NAME queued KEY and where the key is now (queued, in
// flight, waiting for a retry): KEY as the controller's keys print,
// NAMESPACE/NAME (NAME for a cluster-scoped object), and for a fleet's
// controller CLUSTER/NAMESPACE/NAME. An unknown controller is 404, a key
// that does not parse 400.
//
// The JSON types are public API: their field names are stable, and the
// page reads nothing else. Nothing is computed in the background: each
// request composes the stages' Stats snapshots, whose cost does not grow
// with the size of the caches or the depth of the queues.
//
// Access: with Options.Token set, every request must carry
// "Authorization: Bearer <Options.Token>" (401 without it, 403 with a wrong
// one), loopback ones too: a proxy in the same Pod (a mesh's sidecar,
// kube-rbac-proxy) relays remote clients over loopback. Without a token,
// requests from loopback addresses whose Host header is localhost, a
// loopback address or one of Options.Hosts, and that carry no proxy's
// forwarding header, are served; others get 403. The Host check stops DNS
// rebinding: a web page whose name resolves to 127.0.0.1 reaches the
// server from loopback, but with its own name in Host. The page itself
// holds no data and is served to anyone; in a browser, give it the token
// after a '#' in its address (/debug/ctrlkit#token=...), which the browser
// never sends. Guard applies the same rule to any handler (the manager's
// pprof).
package debug
