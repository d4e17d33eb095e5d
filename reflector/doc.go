// Package reflector is step 1 of the pipeline: a Reflector lists and
// watches one resource through a listwatch.ListerWatcher and feeds what it
// learns, in server order, to a Sink (the DeltaFIFO).
//
// The decisions live in a pure state machine (machine.go: inputs are what
// happened, actions what to do next; time and randomness are inputs) and a
// thin driver (run.go) performs them. The rules, each a row of the
// machine's table test:
//
//	          start
//	            │ watch-list supported (default)?      no / refused / ignored (remembered)
//	            ├──────────────────────────────┐──────────────────────────────┐
//	            v                              │                              v
//	STREAMING: watch sendInitialEvents=true    │           LISTING: pages of 500 at RV
//	ADDED... then bookmark                     │           "0" → last synced → "" (after 410 /
//	"k8s.io/initial-events-end"                │           too large); an expired continue token
//	            │ replace(items, rv)           │           lists once, unpaginated
//	            v                              │                              │ replace(items, rv)
//	WATCHING from the last RV (events, bookmarks move it) <──────────────────┘
//	  clean close ........................ re-watch from the last RV (no relist)
//	  closed within 1s with no events .... back off, resync
//	  410 Gone / too large ............... resync now (at the last RV; at "" if that fails too)
//	  429, connection refused ............ back off, re-watch from the last RV
//	  any other error .................... back off, resync
//
// Backoff is exponential with jitter, 0.8s doubling to 30s, and forgets
// after two minutes without a failure. Watches carry a random timeout
// between MinWatchTimeout and twice it and always ask for bookmarks.
// Objects of the wrong type or without a name are skipped with a log line
// and the ctrlkit_reflector_skipped_objects_total metric, never a crash.
//
// A failed list or watch is a *Error (op, resource, HTTP code, API reason,
// cause), which LastError returns and OnError receives; classify it with
// errors.As, never by its message. A failure that repeats (same op, code
// and reason) is logged once at WARN, then only counted in
// ctrlkit_reflector_failures_total{op,code} until that op succeeds again,
// which is logged once at INFO.
//
// Concurrency: Run and ListAndWatch block and own all the reflector's state;
// LastSyncResourceVersion and LastError are safe to call from any goroutine.
// Every goroutine Run starts has exited when it returns.
package reflector
