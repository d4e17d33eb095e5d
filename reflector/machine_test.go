package reflector

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
)

var (
	t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	errGone      = apierrors.NewResourceExpired("too old resource version: 5 (9)")
	errTooLarge  = apierrors.NewTimeoutError("Too large resource version", 1)
	errThrottled = apierrors.NewTooManyRequests("slow down", 1)
	// "Too large resource version" as servers before 1.18.6 sent it: a 504
	// Timeout with the message as a cause (1.17.0 to 1.18.5) or in the
	// status message alone (before 1.17).
	errTooLarge117 = apierrors.NewTimeoutError("Too large resource version: 20, current: 15", 1)
	errTooLarge116 = apierrors.NewTimeoutError("Too large resource version: 20, current: 15", 1)
	errRefused     = &netOpError{syscall.ECONNREFUSED}
	errInternal    = apierrors.NewInternalError(errors.New("boom"))
	errForbidden   = apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no RBAC"))
	errNoWatchList = apierrors.NewInvalid(schema.GroupKind{Kind: "ListOptions"}, "", field.ErrorList{
		field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"),
	})
)

func init() {
	// A real server marks "too large" with a status cause.
	errTooLarge.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}
	errTooLarge117.ErrStatus.Details.Causes = []metav1.StatusCause{{Message: "Too large resource version"}}
}

// netOpError is what a refused TCP connection looks like to client-go.
type netOpError struct{ errno syscall.Errno }

func (e *netOpError) Error() string { return "dial tcp 127.0.0.1:6443: connect: " + e.errno.Error() }
func (e *netOpError) Unwrap() error { return e.errno }

func testConfig(watchList bool) config {
	return config{
		pageSize: 500, minTimeout: 5 * time.Minute, maxTimeout: 10 * time.Minute,
		shortWatch: time.Second, silence: 10 * time.Second, confirmTimeout: time.Second, disableWatchList: !watchList,
		backoffInitial: 800 * time.Millisecond, backoffMax: 30 * time.Second, backoffReset: 2 * time.Minute,
	}
}

func pod(name, rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

func pods(names ...string) []*corev1.Pod {
	var out []*corev1.Pod
	for i, n := range names {
		out = append(out, pod(n, fmt.Sprint(i+1)))
	}
	return out
}

// describe renders actions as short strings, so tables read like the rules.
// A relist's parts are folded as a sink would: nothing is rendered until
// its end, rendered as "replace [objects] rv=..." (the state the relist
// gave). Pass the same folder through a machine's whole history.
func describe(acts []action) string { return (&relistFolder{}).describe(acts) }

// relistFolder is the state of the relist being described.
type relistFolder struct{ snap snapshot[*corev1.Pod] }

func (f *relistFolder) describe(acts []action) string {
	var s []string
	for _, a := range acts {
		switch a := a.(type) {
		case relistBegin:
			f.snap = snapshot[*corev1.Pod]{}
		case relistItems[*corev1.Pod]:
			typ := watch.Added
			if a.update {
				typ = watch.Modified
			}
			for _, p := range a.items {
				f.snap.apply(typ, p)
			}
		case relistDelete[*corev1.Pod]:
			f.snap.apply(watch.Deleted, a.obj)
		case relistEnd:
			var names []string
			for _, p := range f.snap.take() {
				names = append(names, p.Name+"@"+p.ResourceVersion)
			}
			slices.Sort(names) // a relist has no order
			s = append(s, fmt.Sprintf("replace [%s] rv=%s", strings.Join(names, " "), a.rv))
		default:
			s = append(s, describeOne(a))
		}
	}
	return strings.Join(s, "; ")
}

func describeOne(a action) string {
	switch a := a.(type) {
	case list:
		if a.cont != "" {
			return fmt.Sprintf("list cont=%s limit=%d", a.cont, a.limit)
		}
		if a.probe {
			return "probe"
		}
		return fmt.Sprintf("list rv=%q limit=%d", a.rv, a.limit)
	case watchReq:
		kind := "watch"
		if a.sendInitial {
			kind = "watch-list"
		}
		return fmt.Sprintf("%s rv=%q timeout=%s", kind, a.rv, a.timeout)
	case apply[*corev1.Pod]:
		return fmt.Sprintf("%s %s", a.typ, a.obj.Name)
	case bookmark:
		return "bookmark " + a.rv
	case wait:
		return fmt.Sprintf("wait %s then %s", a.d, describeOne(a.then))
	case resumed:
		return "resumed rv=" + a.rv
	case resumeRefused:
		if a.abandoned {
			return fmt.Sprintf("abandoned comparable=%t", a.comparable)
		}
		return fmt.Sprintf("refused comparable=%t", a.comparable)
	}
	return fmt.Sprintf("%T", a)
}

// Inputs used by the tables.
func listedPage(rv, cont string, names ...string) input {
	return listed[*corev1.Pod]{items: pods(names...), rv: rv, cont: cont}
}
func ev(typ watch.EventType, name, rv string) input {
	return event[*corev1.Pod]{typ: typ, obj: pod(name, rv), rv: rv}
}
func bm(rv string) input { return event[*corev1.Pod]{typ: watch.Bookmark, rv: rv} }
func initialEnd(rv string) input {
	return event[*corev1.Pod]{typ: watch.Bookmark, rv: rv, initialEnd: true}
}
func started(at time.Duration) input { return watchStarted{now: t0.Add(at)} }
func ended(at time.Duration, err error) input {
	return watchEnded{err: err, now: t0.Add(at)}
}
func listErr(at time.Duration, err error) input  { return listFailed{err: err, now: t0.Add(at)} }
func watchErr(at time.Duration, err error) input { return watchFailed{err: err, now: t0.Add(at)} }

// synced is the history of a machine that listed two pods at RV 10 and
// has a watch open since t0.
var synced = []input{start{}, listedPage("10", "", "a", "b"), started(0)}

func TestMachine(t *testing.T) {
	for _, tc := range []struct {
		name      string
		watchList bool
		rnd       float64
		history   []input
		in        input
		want      string
	}{
		// The first sync.
		{name: "first sync lists at RV 0 in pages", in: start{},
			want: `list rv="0" limit=500`},
		{name: "first sync streams with watch-list from a consistent RV", watchList: true, in: start{},
			want: `watch-list rv="" timeout=5m0s`},
		{name: "a page with a continue token asks for the next page", history: []input{start{}},
			in: listedPage("10", "c1", "a"), want: `list cont=c1 limit=500`},
		{name: "the last page replaces the sink with every page and watches from the list RV",
			history: []input{start{}, listedPage("10", "c1", "a")}, in: listedPage("10", "", "b"),
			want: `replace [a@1 b@1] rv=10; watch rv="10" timeout=5m0s`},
		{name: "watch timeouts are randomised between the minimum and twice it", rnd: 0.5,
			history: []input{start{}}, in: listedPage("10", "", "a"),
			want: `replace [a@1] rv=10; watch rv="10" timeout=7m30s`},

		// Resource versions of relists.
		{name: "a relist asks for the last synced RV, unpaginated so the watch cache serves it",
			history: synced, in: ended(time.Minute, errGone), want: `list rv="10" limit=0`},
		{name: "a relist stays paginated when the server paginated the RV 0 list (no watch cache)",
			history: []input{start{}, listedPage("", "c1", "a"), listedPage("10", "", "b"), started(0)},
			in:      ended(time.Minute, errGone), want: `list rv="10" limit=500`},
		{name: "410 on a list relists at once with a consistent read",
			history: append(synced, ended(time.Minute, errGone)), in: listErr(time.Minute, errGone),
			want: `list rv="" limit=500`},
		{name: "too large RV on a list relists at once with a consistent read",
			history: append(synced, ended(time.Minute, errGone)), in: listErr(time.Minute, errTooLarge),
			want: `list rv="" limit=500`},
		{name: "too large RV in the form of servers 1.17.0 to 1.18.5 relists with a consistent read",
			history: append(synced, ended(time.Minute, errGone)), in: listErr(time.Minute, errTooLarge117),
			want: `list rv="" limit=500`},
		{name: "too large RV in the form of servers before 1.17 relists with a consistent read",
			history: append(synced, ended(time.Minute, errGone)), in: listErr(time.Minute, errTooLarge116),
			want: `list rv="" limit=500`},
		{name: "a timeout that is not about the RV backs off and lists at the same RV",
			history: append(synced, ended(time.Minute, errGone)), in: listErr(time.Minute, apierrors.NewTimeoutError("etcd is slow", 1)),
			want: `wait 800ms then list rv="10" limit=0`},
		{name: "410 again on a consistent read backs off instead of looping",
			history: append(synced, ended(time.Minute, errGone), listErr(time.Minute, errGone)),
			in:      listErr(time.Minute, errGone), want: `wait 800ms then list rv="" limit=500`},
		{name: "a consistent relist succeeds and the next relist uses its RV again",
			history: append(synced, ended(time.Minute, errGone), listErr(time.Minute, errGone), listedPage("20", "", "a"), started(time.Minute)),
			in:      ended(2*time.Minute, errGone), want: `list rv="20" limit=0`},
		{name: "an expired continue token lists everything at once at the list's RV",
			history: []input{start{}, listedPage("10", "c1", "a")}, in: listErr(0, errGone),
			want: `list rv="0" limit=0`},
		{name: "an unknown list error backs off and lists again at the same RV",
			history: []input{start{}}, in: listErr(0, errInternal), want: `wait 800ms then list rv="0" limit=500`},

		// Backoff.
		{name: "backoff doubles on consecutive failures",
			history: []input{start{}, listErr(0, errInternal)}, in: listErr(time.Second, errInternal),
			want: `wait 1.6s then list rv="0" limit=500`},
		{name: "backoff is capped at 30s",
			history: []input{start{}, listErr(0, errInternal), listErr(1, errInternal), listErr(2, errInternal),
				listErr(3, errInternal), listErr(4, errInternal), listErr(5, errInternal)},
			in: listErr(6, errInternal), want: `wait 30s then list rv="0" limit=500`},
		{name: "backoff resets after two healthy minutes",
			history: []input{start{}, listErr(0, errInternal), listErr(time.Second, errInternal)},
			in:      listErr(3*time.Minute, errInternal), want: `wait 800ms then list rv="0" limit=500`},
		{name: "backoff is jittered by up to one step", rnd: 0.5,
			history: []input{start{}}, in: listErr(0, errInternal), want: `wait 1.2s then list rv="0" limit=500`},

		// Watching.
		{name: "events are applied in order and move the RV", history: synced,
			in: ev(watch.Modified, "a", "11"), want: `MODIFIED a`},
		{name: "a bookmark moves the RV without an event", history: synced,
			in: bm("15"), want: `bookmark 15`},
		{name: "a normal close re-watches from the last event's RV without relisting",
			history: append(synced, ev(watch.Added, "c", "12")), in: ended(2*time.Minute, nil),
			want: `watch rv="12" timeout=5m0s`},
		{name: "a normal close re-watches from the last bookmark's RV",
			history: append(synced, bm("15")), in: ended(2*time.Minute, nil),
			want: `watch rv="15" timeout=5m0s`},
		{name: "a very short watch without events backs off and relists",
			history: synced, in: ended(500*time.Millisecond, nil), want: `wait 800ms then list rv="10" limit=0`},
		{name: "a short watch that carried events is fine",
			history: append(synced, ev(watch.Deleted, "a", "11")), in: ended(500*time.Millisecond, nil),
			want: `watch rv="11" timeout=5m0s`},
		{name: "410 during a watch relists at once at the last synced RV",
			history: append(synced, ev(watch.Added, "c", "12")), in: ended(time.Minute, errGone),
			want: `list rv="12" limit=0`},
		{name: "429 during a watch backs off and re-watches without relisting",
			history: append(synced, ev(watch.Added, "c", "12")), in: ended(time.Minute, errThrottled),
			want: `wait 800ms then watch rv="12" timeout=5m0s`},
		{name: "429 on a watch request backs off and re-watches",
			history: synced, in: watchErr(time.Minute, errThrottled), want: `wait 800ms then watch rv="10" timeout=5m0s`},
		{name: "connection refused backs off and re-watches",
			history: synced, in: watchErr(time.Minute, errRefused), want: `wait 800ms then watch rv="10" timeout=5m0s`},
		{name: "an unknown watch error backs off and relists",
			history: synced, in: ended(time.Minute, errInternal), want: `wait 800ms then list rv="10" limit=0`},
		{name: "410 on a watch request relists at once",
			history: synced, in: watchErr(time.Minute, errGone), want: `list rv="10" limit=0`},
		{name: "a page arriving while watching is ignored", history: synced,
			in: listedPage("99", "", "z"), want: ``},

		// Watch-list.
		{name: "watch-list collects initial events until the end bookmark, then replaces", watchList: true,
			history: []input{start{}, started(0), ev(watch.Added, "a", "7"), ev(watch.Added, "b", "3")},
			in:      initialEnd("10"), want: `replace [a@7 b@3] rv=10`},
		{name: "after watch-list the same stream carries on", watchList: true,
			history: []input{start{}, started(0), initialEnd("10")}, in: ev(watch.Added, "c", "11"),
			want: `ADDED c`},
		{name: "an empty collection syncs on the end bookmark alone", watchList: true,
			history: []input{start{}, started(0)}, in: initialEnd("10"), want: `replace [] rv=10`},
		{name: "a server that rejects watch-list falls back to a paginated list", watchList: true,
			history: []input{start{}}, in: watchErr(0, errNoWatchList), want: `list rv="0" limit=500`},
		{name: "the fallback is remembered: later resyncs list too", watchList: true,
			history: []input{start{}, watchErr(0, errNoWatchList), listedPage("10", "", "a"), started(0)},
			in:      ended(time.Minute, errGone), want: `list rv="10" limit=0`},
		{name: "a modification as the first event means the server ignored watch-list", watchList: true,
			history: []input{start{}, started(0)}, in: ev(watch.Modified, "a", "9"), want: `list rv="0" limit=500`},
		{name: "a deletion as the first event means the server ignored watch-list", watchList: true,
			history: []input{start{}, started(0)}, in: ev(watch.Deleted, "a", "9"), want: `list rv="0" limit=500`},
		{name: "a plain bookmark as the first event means the server ignored watch-list", watchList: true,
			history: []input{start{}, started(0)}, in: bm("9"), want: `list rv="0" limit=500`},
		{name: "a modification during the stream is applied to the snapshot", watchList: true,
			history: []input{start{}, started(0), ev(watch.Added, "a", "7"), ev(watch.Added, "b", "3"), ev(watch.Modified, "a", "9")},
			in:      initialEnd("10"), want: `replace [a@9 b@3] rv=10`},
		{name: "a deletion during the stream removes the object from the snapshot", watchList: true,
			history: []input{start{}, started(0), ev(watch.Added, "a", "7"), ev(watch.Added, "b", "3"), ev(watch.Added, "c", "4"),
				ev(watch.Deleted, "a", "9"), ev(watch.Modified, "c", "10")},
			in: initialEnd("11"), want: `replace [b@3 c@10] rv=11`},
		{name: "an object deleted during the stream, then created again, is in the snapshot once", watchList: true,
			history: []input{start{}, started(0), ev(watch.Added, "a", "7"), ev(watch.Deleted, "a", "8"), ev(watch.Added, "a", "9")},
			in:      initialEnd("10"), want: `replace [a@9] rv=10`},
		{name: "events during the stream neither move the RV nor reach the sink", watchList: true,
			history: []input{start{}, started(0), ev(watch.Added, "a", "7")},
			in:      ev(watch.Modified, "a", "9"), want: ``},
		{name: "a plain bookmark during the stream is not its end", watchList: true,
			history: []input{start{}, started(0), ev(watch.Added, "a", "7")}, in: bm("8"), want: ``},
		{name: "a silent watch-list stream means the server ignored watch-list", watchList: true,
			history: []input{start{}, started(0)}, in: silent{now: t0.Add(10 * time.Second)}, want: `list rv="0" limit=500`},
		{name: "silence after the sync means nothing", watchList: true,
			history: []input{start{}, started(0), initialEnd("10")}, in: silent{now: t0}, want: ``},
		{name: "410 on a watch-list request streams again from a consistent RV", watchList: true,
			history: []input{start{}, started(0), initialEnd("10"), started(time.Minute), ended(2*time.Minute, errGone)},
			in:      watchErr(2*time.Minute, errGone), want: `watch-list rv="" timeout=5m0s`},
		{name: "410 during a synced watch streams again from the last RV", watchList: true,
			history: []input{start{}, started(0), initialEnd("10"), ev(watch.Added, "c", "12")},
			in:      ended(time.Minute, errGone), want: `watch-list rv="12" timeout=5m0s`},
		{name: "a watch-list stream the server ends before its bookmark starts over, as in client-go", watchList: true,
			history: []input{start{}, started(0), ev(watch.Added, "a", "7")},
			in:      ended(time.Minute, nil), want: `watch-list rv="" timeout=5m0s`},
		{name: "the stream that starts over is a new relist: only its objects are in the snapshot", watchList: true,
			history: []input{start{}, started(0), ev(watch.Added, "a", "7"), ended(time.Minute, nil), started(time.Minute),
				ev(watch.Added, "b", "8")},
			in: initialEnd("9"), want: `replace [b@8] rv=9`},
		{name: "a watch-list stream that closes at once, empty, falls back to a list for this sync", watchList: true,
			history: []input{start{}, started(0)},
			in:      ended(0, nil), want: `list rv="0" limit=500`},
		{name: "a watch-list stream that ends with an error falls back to a list for this sync", watchList: true,
			history: []input{start{}, started(0), ev(watch.Added, "a", "7")},
			in:      ended(time.Minute, errInternal), want: `list rv="0" limit=500`},
		{name: "a watch-list request refused with a 500 falls back to a list for this sync", watchList: true,
			history: []input{start{}}, in: watchErr(0, errInternal), want: `list rv="0" limit=500`},
		{name: "a watch-list request refused with a 403 falls back to a list for this sync", watchList: true,
			history: []input{start{}}, in: watchErr(0, errForbidden), want: `list rv="0" limit=500`},
		{name: "a fallback after another error is not remembered: the next resync streams again", watchList: true,
			history: []input{start{}, watchErr(0, errInternal), listedPage("10", "", "a"), started(0), ev(watch.Added, "c", "12")},
			in:      ended(time.Minute, errGone), want: `watch-list rv="12" timeout=5m0s`},
		{name: "a list that fails after a watch-list fallback backs off and lists again", watchList: true,
			history: []input{start{}, watchErr(0, errInternal)}, in: listErr(0, errInternal),
			want: `wait 800ms then list rv="0" limit=500`},
		{name: "429 on a watch-list request backs off and streams again", watchList: true,
			history: []input{start{}}, in: watchErr(0, errThrottled), want: `wait 800ms then watch-list rv="" timeout=5m0s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine[*corev1.Pod](testConfig(tc.watchList), func() float64 { return tc.rnd })
			f := &relistFolder{}
			for _, in := range tc.history {
				f.describe(m.next(in))
			}
			if got := f.describe(m.next(tc.in)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestMachine_resume is the table of a start from a state the sink holds
// at RV 50 (Reflector.ResumeFrom).
// TestMachine_resume is the table of a start from a state the sink holds
// at RV 50 (Reflector.ResumeFrom).
func TestMachine_resume(t *testing.T) {
	probed := []input{start{}, listedPage("60", "")}
	resuming := slices.Clip(append(probed, started(0))) // clipped: each row's append copies it
	for _, tc := range []struct {
		name      string
		watchList bool
		history   []input
		in        input
		want      string
	}{
		{name: "the start lists one object to learn the server's RV, listing nothing else",
			in: start{}, want: `probe`},
		{name: "a server RV no older than the state's: watch from the state's RV with a short timeout",
			history: []input{start{}}, in: listedPage("60", ""), want: `watch rv="50" timeout=1s`},
		{name: "and so with watch-list on", watchList: true,
			history: []input{start{}}, in: listedPage("50", ""), want: `watch rv="50" timeout=1s`},
		{name: "a server RV older than the state's refuses it as not comparable and syncs from a consistent read",
			history: []input{start{}}, in: listedPage("40", ""), want: `refused comparable=false; list rv="" limit=500`},
		{name: "and streams when watch-list is on", watchList: true,
			history: []input{start{}}, in: listedPage("40", ""), want: `refused comparable=false; watch-list rv="" timeout=5m0s`},
		{name: "a probe refused with 429 waits and probes again", history: []input{start{}},
			in: listErr(0, errThrottled), want: `wait 800ms then probe`},
		{name: "a probe refused otherwise refuses the state, backs off and syncs", history: []input{start{}},
			in: listErr(0, errForbidden), want: `refused comparable=true; wait 800ms then list rv="50" limit=0`},
		{name: "an event confirms the state, then applies", history: resuming,
			in: ev(watch.Modified, "a", "51"), want: `resumed rv=50; MODIFIED a`},
		{name: "a bookmark confirms the state", history: resuming,
			in: bm("60"), want: `resumed rv=50; bookmark 60`},
		{name: "the short watch ending cleanly confirms the state and watches on as usual", history: resuming,
			in: ended(2*time.Second, nil), want: `resumed rv=50; watch rv="50" timeout=5m0s`},
		{name: "after the confirmation, events take the hot path's rules",
			history: append(resuming, bm("60")), in: ended(time.Minute, errGone), want: `list rv="60" limit=0`},
		{name: "410 refuses the state (comparable) and lists from a consistent read", history: resuming,
			in: ended(0, errGone), want: `refused comparable=true; list rv="" limit=500`},
		{name: "410 refuses the state and streams from a consistent read", watchList: true, history: resuming,
			in: ended(0, errGone), want: `refused comparable=true; watch-list rv="" timeout=5m0s`},
		{name: "a version too large for the watch refuses the state as not comparable", history: probed,
			in: watchErr(0, errTooLarge), want: `refused comparable=false; list rv="" limit=500`},
		{name: "429 on the watch waits and resumes again", history: probed,
			in: watchErr(0, errThrottled), want: `wait 800ms then watch rv="50" timeout=1s`},
		{name: "a refused connection waits and resumes again", history: resuming,
			in: ended(0, errRefused), want: `wait 800ms then watch rv="50" timeout=1s`},
		{name: "another error refuses the state, backs off and syncs from its RV", history: probed,
			in: watchErr(0, errForbidden), want: `refused comparable=true; wait 800ms then list rv="50" limit=0`},
		{name: "a version found too large by that sync's list marks the state not comparable",
			history: append(probed, watchErr(0, errForbidden)),
			in:      listErr(time.Second, errTooLarge), want: `refused comparable=false; list rv="" limit=500`},
		{name: "once a sync ended, a later 410 is no longer about the state",
			history: append(resuming, ended(0, errGone), listedPage("70", "", "a"), started(0)),
			in:      ended(time.Minute, errGone), want: `list rv="70" limit=0`},
		{name: "a relist request while resuming waits for the confirmation", history: resuming,
			in: relistRequested{}, want: ``},
		{name: "a state abandoned while loading (ResumeWhileLoading) is not comparable and syncs from its RV", history: resuming,
			in: resumeAbandoned{cause: errors.New("object 3 does not decode")}, want: `abandoned comparable=false; list rv="50" limit=0`},
		{name: "and streams when watch-list is on", watchList: true, history: resuming,
			in: resumeAbandoned{cause: errors.New("object 3 does not decode")}, want: `abandoned comparable=false; watch-list rv="50" timeout=5m0s`},
		{name: "a state abandoned after the machine saw its confirmation syncs as the first sync, from the event's RV",
			history: append(resuming, ev(watch.Modified, "a", "51")),
			in:      resumeAbandoned{cause: errors.New("object 3 does not decode")}, want: `abandoned comparable=false; list rv="51" limit=0`},
		{name: "a state abandoned after a 410 began its sync starts that sync over, not comparable",
			history: append(resuming, ended(0, errGone)),
			in:      resumeAbandoned{cause: errors.New("object 3 does not decode")}, want: `abandoned comparable=false; list rv="" limit=500`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine[*corev1.Pod](testConfig(tc.watchList), func() float64 { return 0 })
			m.resumeRV = "50"
			f := &relistFolder{}
			for _, in := range tc.history {
				f.describe(m.next(in))
			}
			if got := f.describe(m.next(tc.in)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestMachine_relistCausesAreNamed(t *testing.T) {
	m := newMachine[*corev1.Pod](testConfig(false), func() float64 { return 0 })
	for _, in := range synced {
		m.next(in)
	}
	acts := m.next(ended(time.Minute, errGone))
	if c := resyncCause(acts[0]); !errors.Is(c, errGone) {
		t.Errorf("cause of a relist after 410 = %v, want the 410", c)
	}
	acts = m.next(listedPage("12", "", "a"))
	m.next(started(time.Minute))
	acts = m.next(ended(time.Minute+time.Millisecond, nil))
	w, ok := acts[0].(wait)
	if !ok || !errors.Is(resyncCause(w.then), errVeryShortWatch) {
		t.Errorf("after a very short watch: %s, want a wait then a list caused by errVeryShortWatch", describe(acts))
	}
	if c := resyncCause(list{cont: "c", cause: errGone}); c != nil {
		t.Errorf("a continuation page is not a resync, got cause %v", c)
	}
}

func TestBackoff_staysWithinBounds(t *testing.T) {
	b := backoff{initial: 800 * time.Millisecond, max: 30 * time.Second, resetAfter: 2 * time.Minute}
	now := t0
	for i := range 50 {
		rnd := float64(i%10) / 10
		d := b.next(now, rnd)
		if d < 800*time.Millisecond || d > 30*time.Second {
			t.Fatalf("failure %d: delay %s outside [800ms, 30s]", i, d)
		}
		now = now.Add(d)
	}
}

// describeParts renders a relist's parts as they are, unfolded.
func describeParts(acts []action) string {
	var s []string
	for _, a := range acts {
		switch a := a.(type) {
		case relistBegin:
			s = append(s, "begin")
		case relistItems[*corev1.Pod]:
			var names []string
			for _, p := range a.items {
				names = append(names, p.Name)
			}
			s = append(s, fmt.Sprintf("items(%d) %s", len(a.items), strings.Join(names[:min(len(names), 2)], " ")))
		case relistDelete[*corev1.Pod]:
			s = append(s, "delete "+a.obj.Name)
		case relistEnd:
			s = append(s, "end rv="+a.rv)
		default:
			s = append(s, describeOne(a))
		}
	}
	return strings.Join(s, "; ")
}

func TestMachine_aListReachesTheSinkPageByPageNeverWhole(t *testing.T) {
	m := newMachine[*corev1.Pod](testConfig(false), func() float64 { return 0 })
	steps := []struct {
		in   input
		want string
	}{
		{start{}, `list rv="0" limit=500`},
		{listedPage("10", "c1", "a", "b"), `begin; items(2) a b; list cont=c1 limit=500`},
		{listedPage("10", "c2", "c"), `items(1) c; list cont=c2 limit=500`},
		{listErr(0, errGone), `list rv="0" limit=0`}, // the continue token expired: one whole list, a new relist
		{listedPage("10", "", "a", "c"), `begin; items(2) a c; end rv=10; watch rv="10" timeout=5m0s`},
	}
	for _, s := range steps {
		if got := describeParts(m.next(s.in)); got != s.want {
			t.Fatalf("after %T:\ngot  %s\nwant %s", s.in, got, s.want)
		}
	}
}

func TestMachine_watchListPassesInitialEventsOnInBatches(t *testing.T) {
	m := newMachine[*corev1.Pod](testConfig(true), func() float64 { return 0 })
	m.next(start{})
	m.next(started(0))
	var got []string
	for i := range relistBatch + 3 {
		if s := describeParts(m.next(ev(watch.Added, fmt.Sprintf("p%04d", i), "5"))); s != "" {
			got = append(got, s)
		}
	}
	for _, in := range []input{ev(watch.Modified, "p0001", "7"), ev(watch.Added, "x", "8"), ev(watch.Deleted, "p0002", "9"), initialEnd("10")} {
		if s := describeParts(m.next(in)); s != "" {
			got = append(got, s)
		}
	}
	want := []string{
		"begin",
		"items(500) p0000 p0001",
		"items(3) p0500 p0501; items(1) p0001", // a modification follows what came before it, alone
		"items(1) x; delete p0002",             // a deletion flushes the batch first
		"end rv=10",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}
