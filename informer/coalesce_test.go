package informer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/internal/peak"
	"github.com/ctrlkit/ctrlkit/object"
)

func cm(rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: rv}}
}

// parse reads "add 1", "add* 1" (initial), "update 1 2", "resync 2 2" (an
// update the informer marks Resync), "delete 3".
func parse(s string) notification[*corev1.ConfigMap] {
	w := strings.Fields(s)
	switch w[0] {
	case "add", "add*":
		return notification[*corev1.ConfigMap]{Type: handler.AddEvent, Obj: cm(w[1]), Initial: w[0] == "add*"}
	case "update", "resync":
		return notification[*corev1.ConfigMap]{Type: handler.UpdateEvent, Old: cm(w[1]), Obj: cm(w[2]), Resync: w[0] == "resync"}
	}
	return notification[*corev1.ConfigMap]{Type: handler.DeleteEvent, Deleted: object.Deleted[*corev1.ConfigMap]{Name: object.ObjectName{Namespace: "ns", Name: "a"}, Obj: cm(w[1]), HasObj: true}}
}

func show[T object.Object](n notification[T]) string {
	switch n.Type {
	case handler.AddEvent:
		if n.Initial {
			return "add* " + n.Obj.GetResourceVersion()
		}
		return "add " + n.Obj.GetResourceVersion()
	case handler.UpdateEvent:
		kind := "update"
		if n.Resync {
			kind = "resync"
		}
		return fmt.Sprintf("%s %s %s", kind, n.Old.GetResourceVersion(), n.Obj.GetResourceVersion())
	}
	return "delete " + n.Deleted.Obj.GetResourceVersion()
}

func TestMerge_coalescesPerKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want []string
	}{
		{name: "add then update is one add of the newest", in: []string{"add 1", "update 1 2", "update 2 3"}, want: []string{"add 3"}},
		{name: "an initial add stays initial when updated", in: []string{"add* 1", "update 1 2"}, want: []string{"add* 2"}},
		{name: "update then update goes from the oldest old to the newest", in: []string{"update 1 2", "update 2 3"}, want: []string{"update 1 3"}},
		{name: "add then delete of an unseen key is nothing", in: []string{"add 1", "update 1 2", "delete 3"}},
		{name: "update then delete is the delete", in: []string{"update 1 2", "delete 3"}, want: []string{"delete 3"}},
		{name: "delete then add is a re-creation kept in order", in: []string{"delete 1", "add 2", "update 2 3"}, want: []string{"delete 1", "add 3"}},
		{name: "delete, add, delete keeps the first delete", in: []string{"delete 1", "add 2", "delete 3"}, want: []string{"delete 1"}},
		{name: "a resync update folds into a pending update", in: []string{"update 1 2", "update 2 2"}, want: []string{"update 1 2"}},
		{name: "a resync folds into a pending update, which stays a change", in: []string{"update 1 2", "resync 2 2"}, want: []string{"update 1 2"}},
		{name: "an update folds into a pending resync, which becomes a change", in: []string{"resync 1 1", "update 1 2"}, want: []string{"update 1 2"}},
		{name: "resyncs fold into one resync", in: []string{"resync 1 1", "resync 1 1"}, want: []string{"resync 1 1"}},
		{name: "an add stays an add when a resync folds into it", in: []string{"add 1", "resync 1 1"}, want: []string{"add 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p []notification[*corev1.ConfigMap]
			for _, s := range tc.in {
				p = merge(p, parse(s))
				if len(p) > 2 {
					t.Fatalf("after %q: %d pending, want at most 2", s, len(p))
				}
			}
			var got []string
			for _, n := range p {
				got = append(got, show(n))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("merged to %q, want %q", got, tc.want)
			}
		})
	}
}

// TestListener_PendingMapIsRebuiltOnceDelivered checks that a handler's
// pending keys after an initial list (every key of the cache pending at
// once) do not leave the map at its peak size once delivered and the
// handler kept up for a while.
func TestListener_PendingMapIsRebuiltOnceDelivered(t *testing.T) {
	l := newListener[*corev1.ConfigMap](nil, "h", handler.Funcs[*corev1.ConfigMap]{}, 0)
	n := 2 * peak.MinPeak
	for i := range n {
		l.enqueue(fmt.Sprint("ns/cm-", i), parse("add* 1"), time.Time{})
	}
	for i := range n + n/2 { // the initial list's keys, then one key at a time
		if i >= n {
			l.enqueue(fmt.Sprint("ns/cm-", i), parse("add 1"), time.Time{})
		}
		key, ns, ok := l.next()
		if !ok || key != fmt.Sprint("ns/cm-", i) || len(ns) != 1 {
			t.Fatalf("next %d = %q, %d notifications, %v", i, key, len(ns), ok)
		}
	}
	if l.pendingPeak.Peak() >= peak.MinPeak || len(l.pending) != 0 {
		t.Errorf("peak %d, %d keys pending once all were delivered; want an empty rebuilt map", l.pendingPeak.Peak(), len(l.pending))
	}
}

// A handler's backlog gives a key's notifications as they came, until
// more than maxUnmerged wait: client-go's TestUpdate deletes an object when
// its handler hears the update, so an add and an update queued before the
// handler took the add must not become one add. Past the bound they are
// coalesced, to the same state merge gives.
func TestListener_givesEveryNotificationUntilABacklogThenCoalesces(t *testing.T) {
	shown := func(ns []notification[*corev1.ConfigMap]) []string {
		var out []string
		for _, n := range ns {
			out = append(out, show(n))
		}
		return out
	}
	l := newListener[*corev1.ConfigMap](nil, "h", handler.Funcs[*corev1.ConfigMap]{}, 0)
	for _, s := range []string{"add 1", "update 1 2", "update 2 3", "delete 3", "add 4"} {
		l.enqueue("ns/a", parse(s), time.Time{})
	}
	_, ns, _ := l.next()
	if got, want := shown(ns), []string{"add 1", "update 1 2", "update 2 3", "delete 3", "add 4"}; !slices.Equal(got, want) {
		t.Errorf("a short backlog gave %q, want every notification %q", got, want)
	}

	l.enqueue("ns/a", parse("add 1"), time.Time{})
	for v := 1; v < 1000; v++ {
		l.enqueue("ns/a", parse(fmt.Sprintf("update %d %d", v, v+1)), time.Time{})
		if n := len(l.pending["ns/a"].ns); n > maxUnmerged {
			t.Fatalf("%d notifications of one key pending, want at most %d", n, maxUnmerged)
		}
	}
	_, ns, _ = l.next()
	var folded []notification[*corev1.ConfigMap]
	for _, n := range ns {
		folded = merge(folded, n)
	}
	if got := shown(folded); !slices.Equal(got, []string{"add 1000"}) {
		t.Errorf("1000 notifications delivered as %q, which fold to %q; want them to fold to one add of the newest", shown(ns), got)
	}
}
