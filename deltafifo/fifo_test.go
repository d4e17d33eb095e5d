package deltafifo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/peak"
)

func cm(name, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

// op is one call on the FIFO, written compactly for tables:
// "add a 1", "update a 2", "delete a 3", "replace 7 a:5 b:6", "bookmark 9".
type op string

func (o op) apply(t *testing.T, f *FIFO[*corev1.ConfigMap]) {
	t.Helper()
	w := strings.Fields(string(o))
	var err error
	switch w[0] {
	case "add":
		err = f.Add(cm(w[1], w[2]))
	case "update":
		err = f.Update(cm(w[1], w[2]))
	case "delete":
		err = f.Delete(cm(w[1], w[2]))
	case "replace":
		var items []*corev1.ConfigMap
		for _, kv := range w[2:] {
			name, rv, _ := strings.Cut(kv, ":")
			items = append(items, cm(name, rv))
		}
		err = f.Replace(items, w[1])
	case "bookmark":
		f.Bookmark(w[1])
	case "begin":
		err = f.BeginRelist()
	case "items":
		var items []*corev1.ConfigMap
		for _, kv := range w[1:] {
			name, rv, _ := strings.Cut(kv, ":")
			items = append(items, cm(name, rv))
		}
		err = f.RelistItems(items)
	case "relistdelete":
		err = f.RelistDelete(cm(w[1], w[2]))
	case "end":
		err = f.EndRelist(w[1])
	default:
		t.Fatalf("bad op %q", o)
	}
	if err != nil {
		t.Fatalf("%s: %v", o, err)
	}
}

// describe writes an Item the way the tables expect it:
// "ns/a: Added@1 Updated@3", "replace@7 a:5 b:6", "bookmark@9"; a
// relist's finals as "final a:3".
func describe(it Item[*corev1.ConfigMap]) string {
	var b strings.Builder
	finals := func(objs []*corev1.ConfigMap) {
		for _, o := range objs {
			fmt.Fprintf(&b, " final %s:%s", o.Name, o.ResourceVersion)
		}
	}
	switch {
	case it.Replace != nil:
		fmt.Fprintf(&b, "replace@%s", it.Replace.ResourceVersion)
		finals(it.Replace.Finals)
		for _, o := range it.Replace.Items {
			fmt.Fprintf(&b, " %s:%s", o.Name, o.ResourceVersion)
		}
	case it.Relist != nil:
		b.WriteString("relist")
		if it.Relist.Begin {
			b.WriteString(" begin")
		}
		finals(it.Relist.Finals)
		for _, o := range it.Relist.Items {
			fmt.Fprintf(&b, " %s:%s", o.Name, o.ResourceVersion)
		}
		for _, o := range it.Relist.Deleted {
			fmt.Fprintf(&b, " -%s:%s", o.Name, o.ResourceVersion)
		}
		if it.Relist.End {
			fmt.Fprintf(&b, " end@%s", it.Relist.ResourceVersion)
		}
	case it.Key != "":
		b.WriteString(it.Key + ":")
		for _, d := range it.Deltas {
			fmt.Fprintf(&b, " %v@%s", d.Type, d.Object.ResourceVersion)
		}
	default:
		b.WriteString("bookmark@" + it.Bookmark)
	}
	return b.String()
}

// drain pops every ready Item.
func drain(t *testing.T, f *FIFO[*corev1.ConfigMap]) []string {
	t.Helper()
	var out []string
	for f.Len() > 0 || f.readyForTest() {
		it, err := f.Pop(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, describe(it))
		if err := f.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func (f *FIFO[T]) readyForTest() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.readyLocked()
}

func TestFIFO_rules(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []op
		want []string
	}{
		{
			name: "keys pop in the order they were first queued",
			ops:  []op{"add a 1", "add b 2", "add c 3"},
			want: []string{"ns/a: Added@1", "ns/b: Added@2", "ns/c: Added@3"},
		},
		{
			name: "a queued key keeps its place when it changes again",
			ops:  []op{"add a 1", "add b 2", "update a 3"},
			want: []string{"ns/a: Added@1 Updated@3", "ns/b: Added@2"},
		},
		{
			name: "consecutive updates compact to the newest",
			ops:  []op{"update a 1", "update a 2", "update a 3"},
			want: []string{"ns/a: Updated@3"},
		},
		{
			name: "an update after an add keeps both, later updates compact into it",
			ops:  []op{"add a 1", "update a 2", "update a 3"},
			want: []string{"ns/a: Added@1 Updated@3"},
		},
		{
			name: "consecutive deletes collapse to the newest",
			ops:  []op{"delete a 1", "delete a 2"},
			want: []string{"ns/a: Deleted@2"},
		},
		{
			name: "a delete drops the updates before it",
			ops:  []op{"update a 1", "update a 2", "delete a 3"},
			want: []string{"ns/a: Deleted@3"},
		},
		{
			name: "an object added and deleted while queued is told whole, its updates dropped",
			ops:  []op{"add a 1", "update a 2", "delete a 3"},
			want: []string{"ns/a: Added@1 Deleted@3"},
		},
		{
			name: "a re-creation after a delete keeps both in order",
			ops:  []op{"delete a 1", "add a 2", "update a 3"},
			want: []string{"ns/a: Deleted@1 Added@2 Updated@3"},
		},
		{
			name: "a re-created object deleted again is told after the first delete",
			ops:  []op{"delete a 1", "add a 2", "update a 3", "delete a 4"},
			want: []string{"ns/a: Deleted@1 Added@2 Deleted@4"},
		},
		{
			name: "a burst of re-creations keeps the first life and the last",
			ops:  []op{"add a 1", "delete a 2", "add a 3", "delete a 4", "add a 5", "update a 6", "update a 7"},
			want: []string{"ns/a: Added@1 Deleted@2 Added@5 Updated@7"},
		},
		{
			name: "the lives between the held object's end and the last are dropped",
			ops:  []op{"delete a 1", "add a 2", "delete a 3", "add a 4", "delete a 5", "add a 6"},
			want: []string{"ns/a: Deleted@1 Added@6"},
		},
		{
			name: "an update after a delete begins a life that a delete ends without a trace",
			ops:  []op{"delete a 1", "update a 2", "delete a 3"},
			want: []string{"ns/a: Deleted@1"},
		},
		{
			name: "a replace supersedes every queued delta",
			ops:  []op{"add a 1", "update b 2", "replace 5 a:1 c:4"},
			want: []string{"replace@5 a:1 c:4"},
		},
		{
			name: "deltas after a replace pop after it in order",
			ops:  []op{"add a 1", "replace 5 a:1", "update a 6", "add b 7"},
			want: []string{"replace@5 a:1", "ns/a: Updated@6", "ns/b: Added@7"},
		},
		{
			name: "a second replace supersedes the first",
			ops:  []op{"replace 5 a:1", "add b 6", "replace 8 b:6"},
			want: []string{"replace@8 b:6"},
		},
		{
			name: "a bookmark pops after everything queued",
			ops:  []op{"bookmark 3", "add a 4", "bookmark 5"},
			want: []string{"ns/a: Added@4", "bookmark@5"},
		},
		{
			name: "a relist in parts supersedes every queued delta and pops part by part",
			ops:  []op{"add a 1", "bookmark 2", "begin", "items b:2 c:3", "end 7"},
			want: []string{"relist begin", "relist b:2 c:3 end@7"},
		},
		{
			name: "deltas after a relist in parts pop after it",
			ops:  []op{"begin", "items a:1", "end 5", "update a 6"},
			want: []string{"relist begin", "relist a:1 end@5", "ns/a: Updated@6"},
		},
		{
			name: "a new begin supersedes an unfinished relist",
			ops:  []op{"begin", "items a:1", "begin", "items b:2", "end 9"},
			want: []string{"relist begin", "relist b:2 end@9"},
		},
		{
			name: "a replace supersedes an unfinished relist, and a begin a pending replace",
			ops:  []op{"begin", "items a:1", "replace 5 b:2", "begin", "end 6"},
			want: []string{"relist begin end@6"},
		},
		{
			name: "a deletion during a relist is a part of it",
			ops:  []op{"begin", "relistdelete a 3", "end 4"},
			want: []string{"relist begin", "relist -a:3 end@4"},
		},
		{
			name: "a replace carries the deleted objects it drops, by key in queue order, both lives of a key",
			ops:  []op{"delete b 1", "add a 2", "delete a 3", "update c 4", "add b 5", "delete b 6", "replace 7 c:4"},
			want: []string{"replace@7 final b:1 final b:6 final a:3 c:4"},
		},
		{
			name: "a begin carries the deleted objects of the deltas and of a relist it drops unpopped",
			ops:  []op{"delete a 1", "replace 2", "delete b 3", "begin", "end 4"},
			want: []string{"relist begin final a:1 final b:3 end@4"},
		},
		{
			name: "a replace drops a pending bookmark",
			ops:  []op{"bookmark 3", "replace 5"},
			want: []string{"replace@5"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New[*corev1.ConfigMap]()
			for _, o := range tc.ops {
				o.apply(t, f)
				if err := f.checkInvariants(); err != nil {
					t.Fatalf("after %s: %v", o, err)
				}
			}
			if got := drain(t, f); !slices.Equal(got, tc.want) {
				t.Errorf("popped %q\nwant   %q", got, tc.want)
			}
			for _, max := range []int{1, 2, 64} {
				f := New[*corev1.ConfigMap]()
				for _, o := range tc.ops {
					o.apply(t, f)
				}
				if got := drainBatches(t, f, max); !slices.Equal(got, tc.want) {
					t.Errorf("PopBatch(%d) popped %q\nwant              %q", max, got, tc.want)
				}
			}
		})
	}
}

// drainBatches pops every ready Item by PopBatch(max), checking that a
// batch holds at most max Items, and only keys unless it holds one Item.
func drainBatches(t *testing.T, f *FIFO[*corev1.ConfigMap], max int) []string {
	t.Helper()
	var out []string
	var batch []Item[*corev1.ConfigMap]
	for f.readyForTest() {
		var err error
		if batch, err = f.PopBatch(t.Context(), batch, max); err != nil {
			t.Fatal(err)
		}
		if len(batch) == 0 || len(batch) > max {
			t.Fatalf("PopBatch(%d) returned %d Items", max, len(batch))
		}
		for _, it := range batch {
			if len(batch) > 1 && it.Key == "" {
				t.Fatalf("PopBatch(%d) returned %s among %d Items; a relist or bookmark comes alone", max, describe(it), len(batch))
			}
			out = append(out, describe(it))
		}
		if err := f.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestFIFO_popBatchTakesEveryQueuedKeyUpToItsMaximum(t *testing.T) {
	f := New[*corev1.ConfigMap]()
	for i := range 10 {
		op(fmt.Sprintf("add k%d %d", i, i+1)).apply(t, f)
	}
	op("bookmark 11").apply(t, f)
	var sizes []int
	var batch []Item[*corev1.ConfigMap]
	for f.readyForTest() {
		var err error
		if batch, err = f.PopBatch(t.Context(), batch, 4); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(batch))
	}
	if want := []int{4, 4, 2, 1}; !slices.Equal(sizes, want) {
		t.Errorf("batch sizes %v, want %v (ten keys by four, then the bookmark alone)", sizes, want)
	}
	if f.Len() != 0 {
		t.Errorf("%d left after draining", f.Len())
	}
}

func TestFIFO_popBatchReusesTheAppliedBatchsDeltas(t *testing.T) {
	f := New[*corev1.ConfigMap]()
	op("add a 1").apply(t, f)
	op("add b 2").apply(t, f)
	batch, err := f.PopBatch(t.Context(), nil, 4)
	if err != nil || len(batch) != 2 {
		t.Fatalf("PopBatch = %d Items, %v; want 2", len(batch), err)
	}
	a, b := &batch[0].Deltas[0], &batch[1].Deltas[0]
	op("update c 3").apply(t, f) // before the batch is handed back: a new slice
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	got, err := f.PopBatch(ctx, batch, 4) // c is ready: the context is not looked at
	if err != nil || len(got) != 1 || describe(got[0]) != "ns/c: Updated@3" || &got[0] != &batch[0] {
		t.Fatalf("PopBatch = %d Items, %v; want c's, in the applied batch's array", len(got), err)
	}
	if *a != (Delta[*corev1.ConfigMap]{}) || *b != (Delta[*corev1.ConfigMap]{}) {
		t.Error("the applied Items' deltas were not cleared")
	}
	c := &got[0].Deltas[0]
	op("update d 4").apply(t, f) // reuse b's, then a's
	op("update e 5").apply(t, f)
	op("update d 6").apply(t, f) // queued: its own deltas
	deltasOf := func(key string) *Delta[*corev1.ConfigMap] {
		f.mu.Lock()
		defer f.mu.Unlock()
		return &f.deltas[key][0]
	}
	if deltasOf("ns/d") != b || deltasOf("ns/e") != a {
		t.Error("changes of keys not queued did not reuse the applied Items' deltas, last handed back first")
	}
	if _, err := f.PopBatch(ctx, got, 4); err != nil { // hands back c's, pops d and e
		t.Fatal(err)
	}
	op("update g 7").apply(t, f)
	if deltasOf("ns/g") != c {
		t.Error("a change of a key not queued did not reuse the last applied batch's deltas")
	}
	// With nothing ready, an ended context: the applied batch comes back empty.
	f2 := New[*corev1.ConfigMap]()
	got, err = f2.PopBatch(ctx, make([]Item[*corev1.ConfigMap], 1, 4), 4)
	if !errors.Is(err, context.Canceled) || len(got) != 0 {
		t.Errorf("PopBatch on an empty FIFO with an ended context: %d Items, %v; want none and context.Canceled", len(got), err)
	}
	f2.Close()
	if got, err := f2.PopBatch(t.Context(), nil, 4); !errors.Is(err, ErrClosed) || len(got) != 0 {
		t.Errorf("PopBatch after Close: %d Items, %v; want none and ErrClosed", len(got), err)
	}
}

func TestFIFO_memoryStaysBoundedUnderABurstOnOneKey(t *testing.T) {
	f := New[*corev1.ConfigMap]()
	for i := range 100_000 {
		var err error
		switch i % 3 {
		case 0:
			err = f.Add(cm("hot", fmt.Sprint(i)))
		case 1:
			err = f.Update(cm("hot", fmt.Sprint(i)))
		default:
			err = f.Delete(cm("hot", fmt.Sprint(i)))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	n, keys := len(f.deltas["ns/hot"]), f.order.Len()
	f.mu.Unlock()
	if n > 3 || keys != 1 {
		t.Errorf("%d deltas in %d queued keys after 100000 changes, want at most 3 in 1", n, keys)
	}
}

func TestFIFO_rejectsObjectsWithoutAKey(t *testing.T) {
	f := New[*corev1.ConfigMap]()
	if err := f.Add(cm("", "1")); err == nil || !strings.HasPrefix(err.Error(), "deltafifo: ") {
		t.Errorf("Add of a nameless object: err = %v, want a deltafifo error", err)
	}
	if f.Len() != 0 {
		t.Errorf("Len = %d, want 0", f.Len())
	}
}

func TestFIFO_closeWakesABlockedPop(t *testing.T) {
	leakcheck.Check(t)
	f := New[*corev1.ConfigMap]()
	done := make(chan error, 1)
	go func() {
		_, err := f.Pop(t.Context())
		done <- err
	}()
	f.Close()
	f.Close() // idempotent
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Pop = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Pop still blocked 10s after Close")
	}
}

func TestFIFO_relistPartsWaitForTheConsumerAndCloseReleasesThem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := New[*corev1.ConfigMap]()
		if err := f.BeginRelist(); err != nil {
			t.Fatal(err)
		}
		if err := f.RelistItems([]*corev1.ConfigMap{cm("a", "1")}); err != nil { // MaxQueuedRelistParts queued now
			t.Fatal(err)
		}
		third := make(chan error, 1)
		go func() { third <- f.RelistItems([]*corev1.ConfigMap{cm("b", "2")}) }()
		synctest.Wait() // every goroutine of the test is blocked
		select {
		case err := <-third:
			t.Fatalf("a third part was queued beside %d unpopped ones: %v", MaxQueuedRelistParts, err)
		default:
		}
		if it, err := f.Pop(t.Context()); err != nil || describe(it) != "relist begin" {
			t.Fatalf("Pop = %q, %v", describe(it), err)
		}
		if err := <-third; err != nil {
			t.Fatalf("the third part after a Pop: %v", err)
		}
		if got := f.Len(); got != 2 {
			t.Fatalf("Len = %d, want the 2 queued parts", got)
		}
		fourth := make(chan error, 1)
		go func() { fourth <- f.RelistDelete(cm("a", "3")) }()
		synctest.Wait()
		f.Close()
		if err := <-fourth; !errors.Is(err, ErrClosed) {
			t.Errorf("a part blocked at Close returned %v, want ErrClosed", err)
		}
	})
}

func TestFIFO_popReturnsWhenItsContextEnds(t *testing.T) {
	f := New[*corev1.ConfigMap]()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.Pop(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Pop = %v, want context.Canceled", err)
	}
}

func TestFIFO_popWaitsForAnItem(t *testing.T) {
	leakcheck.Check(t)
	f := New[*corev1.ConfigMap]()
	got := make(chan string, 1)
	go func() {
		it, err := f.Pop(t.Context())
		if err != nil {
			got <- err.Error()
			return
		}
		got <- describe(it)
	}()
	if err := f.Add(cm("a", "1")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "ns/a: Added@1" {
			t.Errorf("popped %q, want ns/a: Added@1", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Pop did not return 10s after Add")
	}
}

func TestFIFO_relistEndsAreNumberedInOrderAndASupersededOneIsSkipped(t *testing.T) {
	f := New[*corev1.ConfigMap]()
	pop := func() Item[*corev1.ConfigMap] {
		t.Helper()
		it, err := f.Pop(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
	_ = f.Replace([]*corev1.ConfigMap{cm("a", "1")}, "1") // 1, superseded by 2 before anyone popped it
	_ = f.Replace([]*corev1.ConfigMap{cm("a", "2")}, "2") // 2
	if it := pop(); it.Replace == nil || it.Replace.Seq != 2 || it.Replace.ResourceVersion != "2" {
		t.Fatalf("first pop = %+v, want the second replace, numbered 2", it)
	}
	_ = f.BeginRelist()
	_ = f.EndRelist("3") // 3, superseded by the next begin
	_ = f.BeginRelist()  // drops 3
	f.AbandonRelist()    // 4
	_ = f.BeginRelist()  // drops 4 too
	_ = f.EndRelist("5") // 5
	it := pop()
	if it.Relist == nil || !it.Relist.Begin || !it.Relist.End || it.Relist.Abandoned || it.Relist.Seq != 5 {
		t.Fatalf("pop after superseded relists = %+v, want the last whole relist, numbered 5", it.Relist)
	}
	_ = f.BeginRelist()
	f.AbandonRelist()
	if it := pop(); it.Relist == nil || !it.Relist.End || !it.Relist.Abandoned || it.Relist.Seq != 6 {
		t.Fatalf("pop of an abandoned relist = %+v, want its end, abandoned, numbered 6", it.Relist)
	}
}

// TestFIFO_DeltasMapIsRebuiltOnceABacklogDrained checks that a backlog of
// keys (a reflector far ahead of its consumer) does not leave the map of
// queued keys at its peak size once popped and the FIFO stayed small, nor
// once a relist superseded it.
func TestFIFO_DeltasMapIsRebuiltOnceABacklogDrained(t *testing.T) {
	f := New[*corev1.ConfigMap]()
	n := 2 * peak.MinPeak
	for i := range n + n/2 { // the backlog, then one key at a time
		if err := f.Update(cm(fmt.Sprint("cm-", i), "1")); err != nil {
			t.Fatal(err)
		}
		if i < n-1 {
			continue
		}
		if i == n-1 && f.peak.Peak() != n {
			t.Fatalf("peak %d after %d keys queued; want %d", f.peak.Peak(), n, n)
		}
		for f.order.Len() > 0 {
			if _, ok := f.popLocked(); !ok {
				t.Fatal("nothing to pop")
			}
		}
	}
	if f.peak.Peak() >= peak.MinPeak {
		t.Errorf("peak %d once the backlog was popped and the FIFO stayed small; want the map rebuilt", f.peak.Peak())
	}
	for i := range n { // a backlog a relist supersedes: dropped with its table
		if err := f.Update(cm(fmt.Sprint("cm-", i), "2")); err != nil {
			t.Fatal(err)
		}
	}
	_ = f.Replace(nil, "3")
	if f.peak.Peak() != 0 || len(f.deltas) != 0 {
		t.Errorf("peak %d, %d keys after a relist superseded a backlog; want a new empty map", f.peak.Peak(), len(f.deltas))
	}
	if err := f.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// Interrupt: queued items are popped first; the Pop that then finds the
// FIFO empty returns ErrInterrupted at once (a waiting one wakes), and
// the next one waits again.
func TestFIFO_interruptEndsThePopThatFindsItEmpty(t *testing.T) {
	f := New[*corev1.ConfigMap]()
	if err := f.Add(cm("a", "1")); err != nil {
		t.Fatal(err)
	}
	f.Interrupt()
	f.Interrupt() // counts as one
	if it, err := f.Pop(t.Context()); err != nil || it.Key != "ns/a" {
		t.Fatalf("Pop = %v, %v; want the queued item first", it.Key, err)
	}
	if _, err := f.Pop(t.Context()); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Pop on an empty FIFO after Interrupt = %v, want ErrInterrupted", err)
	}
	done := make(chan error, 1)
	go func() { _, err := f.Pop(t.Context()); done <- err }()
	f.Interrupt() // wakes the waiting Pop
	if err := <-done; !errors.Is(err, ErrInterrupted) {
		t.Fatalf("a waiting Pop interrupted = %v, want ErrInterrupted", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.Pop(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Pop after the interrupt was taken = %v, want to wait (here: the cancelled context)", err)
	}
}

// ListKeys and GetByKey read the queue as client-go's DeltaFIFO's do: the
// keys in the order they pop, and a copy of one key's deltas.
func TestFIFO_listKeysAndGetByKeyReadTheQueue(t *testing.T) {
	f := New[*corev1.ConfigMap]()
	for _, o := range []op{"add b 1", "add a 2", "update b 3"} {
		o.apply(t, f)
	}
	if keys := f.ListKeys(); !slices.Equal(keys, []string{"ns/b", "ns/a"}) {
		t.Errorf("ListKeys = %v, want [ns/b ns/a]: the order they pop", keys)
	}
	ds, ok := f.GetByKey("ns/b")
	if !ok || len(ds) != 2 || ds[0].Type != Added || ds[1].Type != Updated || ds[1].Object.ResourceVersion != "3" {
		t.Fatalf("GetByKey(ns/b) = %v, %v; want its add then its update", ds, ok)
	}
	ds[0] = Delta[*corev1.ConfigMap]{} // a copy: the queue keeps its own
	if again, _ := f.GetByKey("ns/b"); again[0].Type != Added {
		t.Error("changing what GetByKey returned changed the queue")
	}
	if _, ok := f.GetByKey("ns/none"); ok {
		t.Error("GetByKey of a key with nothing queued: found")
	}
	if _, err := f.Pop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if keys := f.ListKeys(); !slices.Equal(keys, []string{"ns/a"}) {
		t.Errorf("ListKeys after a Pop = %v, want [ns/a]", keys)
	}
}
