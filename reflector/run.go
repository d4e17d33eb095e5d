package reflector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/object"
)

// Run lists and watches until ctx ends, resynchronising whenever the rules
// say so, and returns nil. It blocks; run it on its own goroutine. Every
// goroutine it starts has exited when it returns.
func (r *Reflector[T]) Run(ctx context.Context) error {
	return r.run(ctx, false)
}

// ListAndWatch synchronises (by list or watch-list) and then watches, as
// Run does, once, with client-go's ListAndWatch's results: the error of a
// sync that fails (a list the server refuses, the first one included) or
// of a watch the server refuses to open; nil once the watch ends in a way
// that requires a new sync (its cause is logged and counted as a relist,
// and LastError has it if it was an error), and nil when ctx ends. It
// returns without waiting out a backoff: the caller decides when to call
// again (Run waits with backoff). What one sync does to succeed stays
// inside the call, as in client-go: a list at "" after the resource
// version it asked for expired, one whole list after a continue token
// expired, a watch opened again after 429 or a refused connection, or
// after it closed cleanly. The next call (never a concurrent one)
// resynchronises from the resource version this one reached.
func (r *Reflector[T]) ListAndWatch(ctx context.Context) error {
	return r.run(ctx, true)
}

// driver is one run's IO state, owned by the goroutine that runs it.
type driver[T object.Object] struct {
	w      watch.Interface
	quiet  <-chan time.Time // armed while a watch-list stream has sent nothing
	quick  int              // events taken in a row without looking at the other channels (readEvent)
	closed func()           // called when w is stopped
	// relist gathers a relist's parts for a sink that takes it whole
	// (not a RelistSink).
	relist snapshot[T]
}

// run runs the machine until ctx ends, or with stopOnResync
// (ListAndWatch) until a new sync would begin: it then returns the error
// of the list or watch request whose failure led there, nil if a watch
// ended.
func (r *Reflector[T]) run(ctx context.Context, stopOnResync bool) error {
	m := r.m
	d := &driver[T]{closed: func() { r.noteWatch(time.Time{}) }}
	defer d.stopWatch()
	pending := m.next(start{})
	var failed error // the error of the list or watch request the pending actions answer, if one failed
	for ctx.Err() == nil {
		var in input
		switch {
		case len(pending) > 0:
			a := pending[0]
			pending[0] = nil // the slot would keep a relist's items alive
			pending = pending[1:]
			r.noteAction(a)
			c := resyncCause(a)
			if w, ok := a.(wait); ok && stopOnResync {
				c = resyncCause(w.then) // ListAndWatch returns without waiting: its caller decides when to call again
			}
			if c != nil && m.synced {
				r.metrics.relist()
				r.opts.Logger.Info("reflector: resynchronising", "name", r.opts.Name, "cause", c)
			}
			if c != nil && stopOnResync {
				return failed
			}
			if w, ok := a.(wait); ok {
				if !r.sleep(ctx, w.d) {
					return nil
				}
				pending = append([]action{w.then}, pending...)
				continue
			}
			if r.hold != nil {
				// A state still loading: the sink waits for it; anything
				// else goes ahead unless the state was abandoned already.
				err, ok := r.loaded(ctx, touchesSink(a))
				if !ok {
					return nil
				}
				if err != nil { // a belongs to a resume the sink never got whole
					clear(pending)
					pending = m.next(resumeAbandoned{cause: err})
					continue
				}
			}
			in = r.do(ctx, d, a)
		case d.w != nil:
			in = r.watchStep(ctx, d)
		default:
			return errors.New("reflector: internal error: the machine has nothing to do")
		}
		if in != nil && ctx.Err() == nil {
			failed = requestFailure(in)
			pending = append(pending, m.next(in)...)
		}
	}
	return nil
}

// requestFailure is the error of a list or watch request the server
// refused, else nil (a watch that ended is no failure of ListAndWatch's).
func requestFailure(in input) error {
	switch in := in.(type) {
	case listFailed:
		return in.err
	case watchFailed:
		return in.err
	}
	return nil
}

// watchStep reads the watch's next event and delivers it, or returns it
// (or what came instead: a Relist, the watch's end) as the machine's
// input.
func (r *Reflector[T]) watchStep(ctx context.Context, d *driver[T]) input {
	var relist chan relistReq // Relist is served while watching, after a sync
	if r.m.phase == watching {
		relist = r.relistC
	}
	ev, other := r.readEvent(ctx, d, relist)
	switch {
	case other != nil:
		return other
	case ev.typ == "": // skipped, or ctx ended
		return nil
	case r.m.watchEvent(ev):
		r.deliver(ev) // the hot path: no input, action or slice allocated
		return nil
	}
	return ev // an event outside the watching phase: the general path
}

// resyncCause is the cause of an action that starts a full sync, or
// starts one again after it failed, else nil (the first sync, a list's
// next page, and a list or watch-list that carries on the sync in
// progress).
func resyncCause(a action) error {
	switch a := a.(type) {
	case list:
		if a.cont == "" && !a.again {
			return a.cause
		}
	case watchReq:
		if a.sendInitial && !a.again {
			return a.cause
		}
	}
	return nil
}

func (r *Reflector[T]) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-r.opts.Clock.After(d):
		return true
	}
}

func (d *driver[T]) stopWatch() {
	if d.w != nil {
		d.w.Stop()
		d.w, d.quiet, d.quick = nil, nil, 0
		d.closed()
	}
}

// do performs one action and returns what came of it, if anything.
func (r *Reflector[T]) do(ctx context.Context, d *driver[T], a action) input {
	switch a := a.(type) {
	case list:
		d.stopWatch()
		if a.fallback != nil {
			r.opts.Logger.Info("reflector: listing instead of watch-list for this sync", "name", r.opts.Name, "cause", a.fallback)
		}
		return r.list(ctx, a)
	case watchReq:
		d.stopWatch()
		return r.watch(ctx, d, a)
	case apply[T]:
		r.apply(a)
	case bookmark:
		r.setRV(a.rv)
		r.sink.Bookmark(a.rv)
	case resumed:
		r.setRV(a.rv)
		r.setResume(ResumeAccepted, nil, true)
		r.opts.Logger.Info("reflector: resumed from the state the sink held", "name", r.opts.Name, "resourceVersion", a.rv)
		defer r.ended.Add(1)
		r.sinkDo(r.relistSink.EndRelist(a.rv))
	case resumeRefused:
		r.setResume(ResumeRefused, a.cause, a.comparable)
		what := "the server refused the resumed state's resource version; synchronising"
		if a.abandoned {
			what = "the resumed state was abandoned while it was loaded; synchronising"
		}
		r.opts.Logger.Info("reflector: "+what, "name", r.opts.Name, "cause", a.cause)
	default:
		r.relist(d, a)
	}
	return nil
}

// relist does a relist's actions: into the relist sink, if the sink is
// one, else into a snapshot replaced whole at the end.
func (r *Reflector[T]) relist(d *driver[T], a action) {
	switch a := a.(type) {
	case relistBegin:
		if r.relistSink != nil {
			r.sinkDo(r.relistSink.BeginRelist())
		} else {
			d.relist = snapshot[T]{}
		}
	case relistItems[T]:
		if r.relistSink != nil {
			r.sinkDo(r.relistSink.RelistItems(a.items))
			break
		}
		typ := watch.Added
		if a.update {
			typ = watch.Modified
		}
		for _, obj := range a.items {
			d.relist.apply(typ, obj)
		}
	case relistDelete[T]:
		if r.relistSink != nil {
			r.sinkDo(r.relistSink.RelistDelete(a.obj))
		} else {
			d.relist.apply(watch.Deleted, a.obj)
		}
	case relistEnd:
		r.setRV(a.rv)
		defer r.ended.Add(1)
		if r.relistSink != nil {
			r.sinkDo(r.relistSink.EndRelist(a.rv))
		} else {
			r.sinkDo(r.sink.Replace(d.relist.take(), a.rv))
		}
	}
}

func (r *Reflector[T]) list(ctx context.Context, a list) input {
	start := r.opts.Clock.Now()
	l, err := r.lw.List(ctx, metav1.ListOptions{ResourceVersion: a.rv, Limit: a.limit, Continue: a.cont})
	now := r.opts.Clock.Now()
	r.metrics.list(now.Sub(start), err)
	if err != nil {
		if ctx.Err() == nil {
			r.failed(ctx, OpList, a.rv, err)
		}
		return listFailed{err: err, now: now}
	}
	r.succeeded(ctx, OpList)
	r.setErr(nil)
	if sizer, ok := r.relistSink.(RelistSizer); ok && a.cont == "" && !a.probe && l.RemainingItemCount != nil && *l.RemainingItemCount >= 0 {
		sizer.RelistSize(int(min(int64(len(l.Items))+*l.RemainingItemCount, MaxRelistSizeHint)))
	}
	if l.Skipped > 0 {
		r.skip(l.Skip, cmp.Or(l.SkipReason, "wrong type"), l.Skipped)
	}
	items := l.Items[:0]
	for _, it := range l.Items {
		if it.GetName() == "" {
			r.skip("list item has no name", "no metadata", 1)
			continue
		}
		items = append(items, it)
	}
	return listed[T]{items: items, rv: l.ResourceVersion, cont: l.Continue}
}

func (r *Reflector[T]) watch(ctx context.Context, d *driver[T], a watchReq) input {
	timeout := int64(a.timeout.Seconds())
	opts := metav1.ListOptions{ResourceVersion: a.rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout}
	if a.sendInitial {
		yes := true
		opts.SendInitialEvents = &yes
		opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	w, err := r.lw.Watch(ctx, opts)
	r.metrics.watch(err)
	now := r.opts.Clock.Now()
	if err != nil {
		if ctx.Err() == nil {
			r.failed(ctx, OpWatch, a.rv, err)
		}
		return watchFailed{err: err, now: now}
	}
	r.setErr(nil)
	d.w = w
	r.noteWatch(now)
	if a.sendInitial {
		d.quiet = r.opts.Clock.After(r.cfg.silence)
	}
	return watchStarted{now: now}
}

// readEvent waits for the next event. It returns a usable event (typ set),
// or another input (the stream ended, went silent, or sent an error), or
// neither when the event was skipped or ctx ended.
//
// An event already waiting is taken without a select over every channel,
// quickReads times in a row at most; then the context, a relist request
// and the quiet timer are looked at first, so that a stream of events
// delays them by at most quickReads events.
func (r *Reflector[T]) readEvent(ctx context.Context, d *driver[T], relist <-chan relistReq) (event[T], input) {
	if d.quick == quickReads {
		d.quick = 0
		if in, ok := r.otherReady(ctx, d, relist); ok {
			return event[T]{}, in
		}
	}
	select {
	case ev, ok := <-d.w.ResultChan():
		d.quick++
		return r.received(ctx, d, ev, ok)
	default:
	}
	d.quick = 0
	select {
	case <-ctx.Done():
		return event[T]{}, nil
	case req := <-relist:
		return event[T]{}, r.answerRelist(req)
	case <-d.quiet:
		return event[T]{}, r.wentQuiet(d)
	case ev, ok := <-d.w.ResultChan():
		return r.received(ctx, d, ev, ok)
	}
}

// otherReady looks, without waiting, at what readEvent waits for beside
// events, in order: the context's end (ok with a nil input), a relist
// request, the quiet timer. ok is false when none is ready. One channel
// at a time: a select over one channel and a default takes no lock when
// nothing is ready.
func (r *Reflector[T]) otherReady(ctx context.Context, d *driver[T], relist <-chan relistReq) (in input, ok bool) {
	select {
	case <-ctx.Done():
		return nil, true
	default:
	}
	select {
	case req := <-relist:
		return r.answerRelist(req), true
	default:
	}
	select {
	case <-d.quiet:
		return r.wentQuiet(d), true
	default:
	}
	return nil, false
}

// quickReads is how many events readEvent takes in a row, while they come
// faster than they are applied, before it looks at its other channels: a
// select locks every channel it waits on, and a stream of events would pay
// for that on every one.
const quickReads = 64

// answerRelist answers a relist request made while watching: this
// relist's end is the next one handed to the sink (no other sync is under
// way while watching).
func (r *Reflector[T]) answerRelist(req relistReq) input {
	req.reply <- r.ended.Load() + 1
	return relistRequested{cause: req.cause}
}

// wentQuiet is the input of a watch-list stream that has sent nothing for a
// while.
func (r *Reflector[T]) wentQuiet(d *driver[T]) input {
	d.quiet = nil
	return silent{now: r.opts.Clock.Now()}
}

// received handles what readEvent received from the watch.
func (r *Reflector[T]) received(ctx context.Context, d *driver[T], ev watch.Event, ok bool) (event[T], input) {
	d.quiet = nil
	if !ok {
		d.stopWatch()
		return event[T]{}, watchEnded{now: r.opts.Clock.Now()}
	}
	e, in := r.convert(ctx, d, ev)
	if e.typ != "" && r.streaks.watch.n > 0 { // a usable event: watching works again
		r.succeeded(ctx, OpWatch)
	}
	return e, in
}

// deliver passes a watched event to the sink.
func (r *Reflector[T]) deliver(ev event[T]) {
	if ev.typ == watch.Bookmark {
		r.setRV(ev.rv)
		r.sink.Bookmark(ev.rv)
		return
	}
	r.apply(apply[T]{typ: ev.typ, obj: ev.obj, rv: ev.rv})
}

func (r *Reflector[T]) convert(ctx context.Context, d *driver[T], ev watch.Event) (event[T], input) {
	r.metrics.event(string(ev.Type))
	switch ev.Type {
	case watch.Error:
		d.stopWatch()
		err := apierrors.FromObject(ev.Object)
		r.failed(ctx, OpWatch, r.LastSyncResourceVersion(), err)
		return event[T]{}, watchEnded{err: err, now: r.opts.Clock.Now()}
	case watch.Bookmark:
		acc, err := meta.Accessor(ev.Object)
		if err != nil {
			r.skip(fmt.Sprintf("bookmark carries %T without metadata", ev.Object), "no metadata", 1)
			return event[T]{}, nil
		}
		end := acc.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
		return event[T]{typ: watch.Bookmark, rv: acc.GetResourceVersion(), initialEnd: end}, nil
	case watch.Added, watch.Modified, watch.Deleted:
		if u, ok := ev.Object.(Undecodable); ok {
			r.skip(fmt.Sprintf("%s event object does not decode: %v", ev.Type, u.Undecodable()), "undecodable", 1)
			return event[T]{}, nil
		}
		obj, ok := ev.Object.(T)
		if !ok {
			var zero T
			r.skip(fmt.Sprintf("%s event carries %T, not %T", ev.Type, ev.Object, zero), "wrong type", 1)
			return event[T]{}, nil
		}
		if obj.GetName() == "" {
			r.skip(fmt.Sprintf("%s event object has no name", ev.Type), "no metadata", 1)
			if rv := obj.GetResourceVersion(); rv != "" && r.m.phase == watching {
				// The stream has passed it: a watch resumes after it, as
				// client-go's reflector records a version it cannot store.
				return event[T]{typ: watch.Bookmark, rv: rv}, nil
			}
			return event[T]{}, nil
		}
		return event[T]{typ: ev.Type, obj: obj, rv: obj.GetResourceVersion()}, nil
	}
	r.skip(fmt.Sprintf("unknown event type %q", ev.Type), "unknown event", 1)
	return event[T]{}, nil
}

// apply records the event's resource version, as it arrived, then passes
// the event to the sink (whose transform may edit the object).
func (r *Reflector[T]) apply(a apply[T]) {
	r.setRV(a.rv)
	switch a.typ {
	case watch.Added:
		r.sinkDo(r.sink.Add(a.obj))
	case watch.Modified:
		r.sinkDo(r.sink.Update(a.obj))
	case watch.Deleted:
		r.sinkDo(r.sink.Delete(a.obj))
	}
}

func (r *Reflector[T]) sinkDo(err error) {
	if err != nil {
		r.metrics.sinkError()
		r.opts.Logger.Error("reflector: sink error", "name", r.opts.Name, "err", err)
	}
}

func (r *Reflector[T]) skip(what, reason string, n int) {
	r.metrics.skip(reason, n)
	r.opts.Logger.Warn("reflector: skipped unusable object", "name", r.opts.Name, "object", what, "count", n)
}

// relistReq is one call of Relist: the goroutine running Run answers with
// the number of the relist end that will reflect it.
type relistReq struct {
	cause error
	reply chan uint64
}

// Relist makes the running reflector synchronise again from scratch (a
// watch-list stream or a paginated list, as for any resync), e.g. because
// its ListerWatcher now selects other objects. It waits until the
// reflector is watching (a sync under way finishes first) and returns n:
// the sync that reflects the call is the n-th one handed whole to the sink
// (see Ended). It fails only when ctx ends first.
func (r *Reflector[T]) Relist(ctx context.Context, cause error) (n uint64, err error) {
	req := relistReq{cause: cause, reply: make(chan uint64, 1)}
	select {
	case r.relistC <- req:
		return <-req.reply, nil
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}

// Ended returns how many full synchronisations the reflector has handed to
// its sink so far (each ends with EndRelist, or is one Replace).
func (r *Reflector[T]) Ended() uint64 { return r.ended.Load() }
