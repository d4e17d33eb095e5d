package informer

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/handler"
)

// deleteRecorder is a handler.Enqueuer that records each delete it is
// given: key, the tombstone's object (resource version and data) and
// FinalStateUnknown.
type deleteRecorder struct {
	handler.Funcs[*corev1.ConfigMap] // never called: Enqueue replaces them
	deletes                          []string
}

func (r *deleteRecorder) ExpectKeys(int) {}

func (r *deleteRecorder) Enqueue(events []handler.Event[*corev1.ConfigMap]) {
	for _, e := range events {
		if e.Type == handler.DeleteEvent {
			d := e.Deleted
			r.deletes = append(r.deletes, fmt.Sprintf("%s@%s %s unknown=%v", e.Key, d.Obj.ResourceVersion, d.Obj.Data["v"], d.FinalStateUnknown))
		}
	}
}

func uidCM(name, uid, rv, v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid), ResourceVersion: rv},
		Data: map[string]string{"v": v}}
}

// popAll hands the informer every Item its FIFO holds, as Run does.
func popAll(t *testing.T, inf *SharedIndexInformer[*corev1.ConfigMap]) {
	t.Helper()
	for inf.fifo.Len() > 0 {
		batch, err := inf.fifo.PopBatch(context.Background(), nil, popBatch)
		if err != nil {
			t.Fatal(err)
		}
		inf.process(batch)
	}
}

// A watch delete still queued when a relist begins is dropped with
// everything queued, but the relist tells that object's deletion with the
// state the watch delivered, not as FinalStateUnknown with the cached
// (older) object: what client-go's handler gets (its
// TestDeltaFIFO_ReplaceMakesDeletions). Only for the life the cache
// holds; a final state of another life (another UID) does not stand in for
// it. Every way a relist comes: whole (Replace), in parts, and atomic.
func TestInformer_aRelistTellsTheDeletesItSupersededWithTheirFinalState(t *testing.T) {
	for _, mode := range []string{"whole", "parts", "atomic"} {
		t.Run(mode, func(t *testing.T) {
			var opts Options[*corev1.ConfigMap]
			opts.AtomicRelist = mode == "atomic"
			inf, err := New(cmLW{}, opts)
			if err != nil {
				t.Fatal(err)
			}
			rec := &deleteRecorder{}
			if _, err := inf.AddEventHandler(rec, HandlerOptions{Name: "deletes"}); err != nil {
				t.Fatal(err)
			}
			relist := func(rv string, items ...*corev1.ConfigMap) {
				t.Helper()
				if mode == "whole" {
					_ = inf.fifo.Replace(items, rv)
				} else {
					_ = inf.fifo.BeginRelist()
					_ = inf.fifo.RelistItems(items)
					_ = inf.fifo.EndRelist(rv)
				}
				popAll(t, inf)
			}
			relist("3", uidCM("a", "ua", "1", "listed"), uidCM("b", "ub", "2", "listed"), uidCM("c", "uc", "3", "listed"),
				uidCM("d", "ud", "3", "listed"))

			// Queued, not popped: a changed and then deleted (its final
			// state is the change); b deleted, recreated and deleted again
			// (the second life's final is not the cached life's); c updated.
			_ = inf.fifo.Update(uidCM("a", "ua", "4", "changed"))
			_ = inf.fifo.Delete(uidCM("a", "ua", "5", "final"))
			_ = inf.fifo.Delete(uidCM("b", "ub", "6", "final"))
			_ = inf.fifo.Add(uidCM("b", "ub2", "7", "second life"))
			_ = inf.fifo.Delete(uidCM("b", "ub2", "8", "second life's final"))
			_ = inf.fifo.Update(uidCM("c", "uc", "9", "changed"))
			// d deleted and created again: listed under its new UID, its
			// old life's end is told with the final state.
			_ = inf.fifo.Delete(uidCM("d", "ud", "10", "final"))
			_ = inf.fifo.Add(uidCM("d", "ud2", "11", "second life"))
			relist("12", uidCM("c", "uc", "9", "changed"), uidCM("d", "ud2", "11", "second life"))

			want := []string{"ns/a@5 final unknown=false", "ns/b@6 final unknown=false", "ns/d@10 final unknown=false"}
			slices.Sort(rec.deletes) // an atomic relist tells its deletes in no set order
			if !slices.Equal(rec.deletes, want) {
				t.Errorf("deletes told by the relist:\n%q\nwant\n%q", rec.deletes, want)
			}
			if len(inf.finals) != 0 {
				t.Errorf("%d final states kept after the relist ended", len(inf.finals))
			}

			// With no delete queued, a relist that lacks an object tells it
			// with the cached state, FinalStateUnknown.
			rec.deletes = nil
			relist("13", uidCM("d", "ud2", "11", "second life"))
			if want := []string{"ns/c@9 changed unknown=true"}; !slices.Equal(rec.deletes, want) {
				t.Errorf("deletes told by a relist with nothing superseded: %q, want %q", rec.deletes, want)
			}
		})
	}
}

// The final states of a relist superseded before its end are kept for the
// relist that supersedes it, and a final state of another life of a key
// does not stand in for the cached one: the cached object, FinalStateUnknown.
func TestInformer_finalStatesOutliveASupersededRelistAndMatchTheCachedLife(t *testing.T) {
	inf, err := New[*corev1.ConfigMap](cmLW{}, Options[*corev1.ConfigMap]{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &deleteRecorder{}
	if _, err := inf.AddEventHandler(rec, HandlerOptions{Name: "deletes"}); err != nil {
		t.Fatal(err)
	}
	_ = inf.fifo.Replace([]*corev1.ConfigMap{uidCM("a", "ua", "1", "listed"), uidCM("b", "ub", "2", "listed")}, "2")
	popAll(t, inf)

	_ = inf.fifo.Delete(uidCM("a", "ua", "3", "final"))
	_ = inf.fifo.Delete(uidCM("b", "other", "4", "another life"))
	_ = inf.fifo.BeginRelist() // popped, then superseded before its end
	popAll(t, inf)
	_ = inf.fifo.BeginRelist()
	_ = inf.fifo.EndRelist("5")
	popAll(t, inf)

	want := []string{"ns/a@3 final unknown=false", "ns/b@2 listed unknown=true"}
	slices.Sort(rec.deletes)
	if !slices.Equal(rec.deletes, want) {
		t.Errorf("deletes:\n%q\nwant\n%q", rec.deletes, want)
	}
}
