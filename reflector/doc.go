// Package reflector is step 1 of the pipeline: a Reflector lists and
// watches one resource through a ListerWatcher (package listwatch adapts client-go's clients) and feeds what it
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
//	ADDED first, then ADDED / MODIFIED /       │           "0" → last synced → "" (after 410 /
//	DELETED applied to the snapshot, until     │           too large); an expired continue token
//	bookmark "k8s.io/initial-events-end"       │           lists once, unpaginated
//	  429, connection refused: back off, again │                              ^
//	  410 / too large: again at RV ""          │                              │
//	  any other failure ───────────────────────┼── list for this sync only ───┘
//	            │ replace(items, rv)           │                              │ replace(items, rv)
//	            v                              │                              │
//	WATCHING from the last RV (events, bookmarks move it) <──────────────────┘
//	  clean close ........................ re-watch from the last RV (no relist)
//	  closed within 1s with no events .... back off, resync
//	  410 Gone / too large ............... resync now (at the last RV; at "" if that fails too)
//	  429, connection refused ............ back off, re-watch from the last RV
//	  any other error .................... back off, resync
//
// A server ignores watch-list when it sends anything but ADDED first, or
// nothing for 10s. "Too large resource version" is also recognised in the
// forms of servers before 1.18.6 (a 504 Timeout without the status cause
// type). The machine outlives Run and ListAndWatch calls: the next call
// resynchronises from the last synced resource version.
//
// A start from a state the sink already holds (ResumeFrom: a snapshot
// loaded from disk) lists one object to learn the server's resource
// version (a state newer than it is refused), then watches from the
// state's version with a 1s timeout: the first event or bookmark, or the
// watch ending cleanly, confirms it (the held relist ends there, nothing
// listed); 410, "too large" or another failure refuses it and a sync
// follows, as from the start (Resume says which). With ResumeWhileLoading
// the sink is still being given the state: the probe and the watch go
// ahead, and the first call to the sink waits until the state is whole
// (or abandoned: a sync follows).
//
// Backoff is exponential with jitter, 0.8s doubling to 30s, and forgets
// after two minutes without a failure. Watches carry a random timeout
// between MinWatchTimeout (at least 5m) and twice it and always ask for
// bookmarks.
// Objects of the wrong type or without a name are skipped with a log line
// and the ctrlkit_reflector_skipped_objects_total metric, never a crash; a
// watch resumes after an unnamed object's resource version, as client-go's
// does (one of the wrong type is not counted as progress, again as there).
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
