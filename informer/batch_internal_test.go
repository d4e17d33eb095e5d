package informer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/deltafifo"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// batchRecorder is a handler.Enqueuer that records every Enqueue call,
// one line per call ("bg=true 3 ns/a..ns/c"; bg=mixed when some of the
// events are background work and some not), and panics after recording
// a call whose events hold the key panicOn.
type batchRecorder struct {
	handler.Funcs[*corev1.ConfigMap] // never called: Enqueue replaces them
	calls                            []string
	panicOn                          string
	// synced, if set, reports whether the informer has announced its
	// sync; events given after that are counted in afterSync.
	synced    func() bool
	afterSync int
}

func (r *batchRecorder) ExpectKeys(int) {}

func (r *batchRecorder) Enqueue(events []handler.Event[*corev1.ConfigMap]) {
	if r.synced != nil && r.synced() {
		r.afterSync += len(events)
	}
	bg, fg, hit := 0, 0, false
	for k := range events {
		if events[k].Background() {
			bg++
		} else {
			fg++
		}
		hit = hit || events[k].Key == r.panicOn
	}
	kind := "mixed"
	switch {
	case fg == 0:
		kind = "true"
	case bg == 0:
		kind = "false"
	}
	r.calls = append(r.calls, fmt.Sprintf("bg=%s %d %s..%s", kind, len(events), events[0].Key, events[len(events)-1].Key))
	if hit {
		panic("batch handler failed")
	}
}

// cmLW is a ListerWatcher these tests never run: they hand the informer
// its FIFO's batches themselves.
type cmLW struct {
	reflector.ListerWatcher[*corev1.ConfigMap]
}

func namedCM(name, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

func keyItem(name, rv string, typ deltafifo.DeltaType) deltafifo.Item[*corev1.ConfigMap] {
	return deltafifo.Item[*corev1.ConfigMap]{Key: "ns/" + name,
		Deltas: []deltafifo.Delta[*corev1.ConfigMap]{{Type: typ, Object: namedCM(name, rv)}}}
}

func TestInformer_anEnqueuerIsGivenEachBatchsEventsInOneCall(t *testing.T) {
	inf, err := New[*corev1.ConfigMap](cmLW{}, Options[*corev1.ConfigMap]{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &batchRecorder{synced: func() bool {
		select {
		case <-inf.syncedC: // what WaitForCacheSync waits on, without the lock
			return true
		default:
			return false
		}
	}}
	if _, err := inf.AddEventHandler(rec, HandlerOptions{Name: "batch"}); err != nil {
		t.Fatal(err)
	}

	// The initial list, 600 objects in one part: background keys, given
	// whenever maxHeld are held and at the part's end.
	var items []*corev1.ConfigMap
	for n := range 600 {
		items = append(items, namedCM(fmt.Sprintf("o%03d", n), "1"))
	}
	inf.process([]deltafifo.Item[*corev1.ConfigMap]{{Relist: &deltafifo.RelistPart[*corev1.ConfigMap]{
		Begin: true, Items: items, End: true, ResourceVersion: "1", Seq: 1}}})
	want := []string{"bg=true 512 ns/o000..ns/o511", "bg=true 88 ns/o512..ns/o599"}
	if !slices.Equal(rec.calls, want) {
		t.Errorf("initial list: calls %q, want %q", rec.calls, want)
	}
	if rec.afterSync != 0 {
		t.Errorf("%d keys of the initial list given after the informer announced its sync", rec.afterSync)
	}

	// A batch of three keys: one call, in the batch's order.
	rec.calls = nil
	inf.process([]deltafifo.Item[*corev1.ConfigMap]{
		keyItem("o005", "2", deltafifo.Updated), keyItem("new", "3", deltafifo.Added), keyItem("o001", "4", deltafifo.Deleted)})
	if want := []string{"bg=false 3 ns/o005..ns/o001"}; !slices.Equal(rec.calls, want) {
		t.Errorf("a batch of three keys: calls %q, want %q", rec.calls, want)
	}

	// A delete of a key the cache never held tells nobody: no call at all.
	rec.calls = nil
	inf.process([]deltafifo.Item[*corev1.ConfigMap]{keyItem("never", "5", deltafifo.Deleted)})
	if len(rec.calls) != 0 {
		t.Errorf("a batch that notifies nobody: calls %q, want none", rec.calls)
	}

	// A late handler is given the cache in calls of at most maxHeld keys.
	late := &batchRecorder{}
	if _, err := inf.AddEventHandler(late, HandlerOptions{Name: "late"}); err != nil {
		t.Fatal(err)
	}
	given := 0
	for _, c := range late.calls {
		var n int
		var first, last string
		if _, err := fmt.Sscanf(strings.ReplaceAll(c, "..", " "), "bg=true %d %s %s", &n, &first, &last); err != nil || n > maxHeld {
			t.Errorf("late handler: call %q, want background keys, at most %d", c, maxHeld)
		}
		given += n
	}
	if given != 600 {
		t.Errorf("late handler was given %d keys in %d calls, want the 600 cached", given, len(late.calls))
	}
}

func TestInformer_anEnqueuerThatPanicsIsGivenTheEventsOneByOne(t *testing.T) {
	inf, err := New[*corev1.ConfigMap](cmLW{}, Options[*corev1.ConfigMap]{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &batchRecorder{panicOn: "ns/b"}
	reg, err := inf.AddEventHandler(rec, HandlerOptions{Name: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	inf.process([]deltafifo.Item[*corev1.ConfigMap]{{Relist: &deltafifo.RelistPart[*corev1.ConfigMap]{
		Begin: true, End: true, ResourceVersion: "1", Seq: 1}}})
	inf.process([]deltafifo.Item[*corev1.ConfigMap]{
		keyItem("a", "2", deltafifo.Added), keyItem("b", "3", deltafifo.Added), keyItem("c", "4", deltafifo.Added)})
	want := []string{"bg=false 3 ns/a..ns/c", "bg=false 1 ns/a..ns/a", "bg=false 1 ns/b..ns/b", "bg=false 1 ns/c..ns/c"}
	if !slices.Equal(rec.calls, want) {
		t.Errorf("calls %q, want %q (the batch, then each event again after its panic)", rec.calls, want)
	}
	if n := inf.listeners[0].panics.Load(); n != 2 {
		t.Errorf("%d panics counted, want 2 (the batch's, then b's alone)", n)
	}
	if !reg.HasSynced() {
		t.Error("the handler's registration is not synced after the initial list")
	}
}

// TestInformer_anEventThroughTheFIFOAllocatesOnlyItsKey runs the processing
// loop and sends changes of cached objects through the FIFO to an
// EnqueueKey handler and its queue: the FIFO's key string is the one
// allocation per change (the delta slices of applied batches are reused,
// the batch, the informer and the queue allocate nothing).
func TestInformer_anEventThroughTheFIFOAllocatesOnlyItsKey(t *testing.T) {
	inf, err := New[*corev1.ConfigMap](cmLW{}, Options[*corev1.ConfigMap]{FactoryOptions: FactoryOptions{DetectMutations: DetectNever}})
	if err != nil {
		t.Fatal(err)
	}
	q, err := workqueue.New[string](workqueue.Options[string]{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.ShutDown()
	if _, err := inf.AddEventHandler(handler.EnqueueKey[*corev1.ConfigMap](q, nil), HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	const keys = 64
	var objs []*corev1.ConfigMap
	for n := range keys {
		objs = append(objs, namedCM(fmt.Sprintf("o%02d", n), "1"))
	}
	inf.process([]deltafifo.Item[*corev1.ConfigMap]{{Relist: &deltafifo.RelistPart[*corev1.ConfigMap]{
		Begin: true, Items: objs, End: true, ResourceVersion: "1", Seq: 1}}})
	for range keys {
		k, _ := q.Get()
		q.Done(k)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.processLoop(ctx, nil)
	}()
	defer func() {
		cancel()
		<-done
	}()
	n := 0
	change := func() {
		if err := inf.fifo.Update(objs[n%keys]); err != nil {
			t.Fatal(err)
		}
		n++
		k, _ := q.Get() // the change went through the informer into the queue
		q.Done(k)
	}
	for range 2 * keys { // every key once, so that each has a slice to reuse
		change()
	}
	if a := testing.AllocsPerRun(1000, change); a > 1 {
		t.Errorf("%v allocations per change through the FIFO, the informer and the queue; want at most 1 (the key)", a)
	}
}

// expectingRecorder is a batchRecorder that records what ExpectKeys
// hears, and panics there if told to.
type expectingRecorder struct {
	batchRecorder
	expected []int
	panics   bool
}

func (r *expectingRecorder) ExpectKeys(n int) {
	r.expected = append(r.expected, n)
	if r.panics {
		panic("ExpectKeys failed")
	}
}

// mirrorOf is a plain Handler with an ExpectKeys method: not an
// Enqueuer, so never given the hint.
type mirrorOf struct {
	handler.Funcs[*corev1.ConfigMap]
	expected []int
}

func (m *mirrorOf) ExpectKeys(n int) { m.expected = append(m.expected, n) }

func TestInformer_enqueuersHearTheSizeOfAListIntoAnEmptyStore(t *testing.T) {
	inf, err := New[*corev1.ConfigMap](cmLW{}, Options[*corev1.ConfigMap]{})
	if err != nil {
		t.Fatal(err)
	}
	sized, failing, plain := &expectingRecorder{}, &expectingRecorder{panics: true}, &mirrorOf{}
	for name, h := range map[string]handler.Handler[*corev1.ConfigMap]{"sized": sized, "failing": failing, "plain": plain} {
		if _, err := inf.AddEventHandler(h, HandlerOptions{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	inf.reserve(600) // what the reflector's sink does with a first list's first page
	if fmt.Sprint(sized.expected) != "[600]" || fmt.Sprint(failing.expected) != "[600]" {
		t.Fatalf("after the first list's size: expected %v and %v, want [600] each", sized.expected, failing.expected)
	}
	panics := 0
	for _, l := range inf.listeners {
		panics += int(l.panics.Load())
	}
	if panics != 1 {
		t.Errorf("%d panics counted, want the failing handler's one", panics)
	}

	// The list arrives; every handler, the failing one too, gets its keys.
	var items []*corev1.ConfigMap
	for n := range 600 {
		items = append(items, namedCM(fmt.Sprintf("o%03d", n), "1"))
	}
	inf.process([]deltafifo.Item[*corev1.ConfigMap]{{Relist: &deltafifo.RelistPart[*corev1.ConfigMap]{
		Begin: true, Items: items, End: true, ResourceVersion: "1", Seq: 1}}})
	for name, r := range map[string]*batchRecorder{"sized": &sized.batchRecorder, "failing": &failing.batchRecorder} {
		if len(r.calls) != 2 {
			t.Errorf("%s: calls %q after the initial list, want its 600 keys in two", name, r.calls)
		}
	}
	if len(plain.expected) != 0 {
		t.Errorf("a handler that is not an Enqueuer was told to expect %v keys", plain.expected)
	}

	// A relist into a store that holds objects brings few new keys: no hint.
	inf.reserve(600)
	if fmt.Sprint(sized.expected) != "[600]" {
		t.Errorf("after a relist's size: expected %v, want still [600]", sized.expected)
	}
}

// lifeRecorder is a handler.Enqueuer that records each event as
// "add ns/x@2", "update ns/x@3" or "delete ns/x@4".
type lifeRecorder struct {
	handler.Funcs[*corev1.ConfigMap] // never called: Enqueue replaces them
	events                           []string
}

func (r *lifeRecorder) ExpectKeys(int) {}

func (r *lifeRecorder) Enqueue(events []handler.Event[*corev1.ConfigMap]) {
	for _, e := range events {
		switch e.Type {
		case handler.AddEvent:
			r.events = append(r.events, "add "+e.Key+"@"+e.Obj.ResourceVersion)
		case handler.UpdateEvent:
			r.events = append(r.events, "update "+e.Key+"@"+e.Obj.ResourceVersion)
		case handler.DeleteEvent:
			r.events = append(r.events, "delete "+e.Key+"@"+e.Deleted.Obj.ResourceVersion)
		}
	}
}

// An object created and deleted while its key waited in the FIFO is told
// to handlers as an add then a delete, as client-go's informers tell it:
// an expectation counting the creates a controller made hears of it. So is
// an object created again after a cached one was deleted, and deleted too.
func TestInformer_anObjectAddedAndDeletedWhileQueuedIsToldAsAnAddThenADelete(t *testing.T) {
	inf, err := New[*corev1.ConfigMap](cmLW{}, Options[*corev1.ConfigMap]{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &lifeRecorder{}
	if _, err := inf.AddEventHandler(rec, HandlerOptions{Name: "lives"}); err != nil {
		t.Fatal(err)
	}
	inf.process([]deltafifo.Item[*corev1.ConfigMap]{{Relist: &deltafifo.RelistPart[*corev1.ConfigMap]{
		Begin: true, Items: []*corev1.ConfigMap{namedCM("held", "1")}, End: true, ResourceVersion: "1", Seq: 1}}})
	rec.events = nil

	fifo := deltafifo.New[*corev1.ConfigMap]()
	for _, push := range []func() error{
		func() error { return fifo.Add(namedCM("brief", "2")) },
		func() error { return fifo.Update(namedCM("brief", "3")) },
		func() error { return fifo.Delete(namedCM("brief", "4")) },
		func() error { return fifo.Delete(namedCM("held", "5")) },
		func() error { return fifo.Add(namedCM("held", "6")) },
		func() error { return fifo.Delete(namedCM("held", "7")) },
	} {
		if err := push(); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := fifo.PopBatch(t.Context(), nil, 64)
	if err != nil {
		t.Fatal(err)
	}
	inf.process(batch)
	want := []string{"add ns/brief@2", "delete ns/brief@4", "delete ns/held@5", "add ns/held@6", "delete ns/held@7"}
	if !slices.Equal(rec.events, want) {
		t.Errorf("handler heard %q, want %q", rec.events, want)
	}
	if n := len(inf.idx.List()); n != 0 {
		t.Errorf("the cache holds %d objects, want none", n)
	}
}
