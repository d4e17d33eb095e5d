package listwatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/shard"
)

var halves = [2]*shard.Selector{
	{Key: shard.UID, Ranges: []shard.Range{{Start: 0, End: 1 << 63}}},
	{Key: shard.UID, Ranges: []shard.Range{{Start: 1 << 63}}},
}

func TestOptions_shardSplitsListsAndWatchesOnTheRealServer(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	cms := cs.CoreV1().ConfigMaps(ns)
	create := func(prefix string, n int) {
		for i := range n {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", prefix, i)}}
			if _, err := cms.Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	create("listed", 30)
	owner := map[string]int{} // name -> the half that listed or watched it
	var watches [2]watch.Interface
	for h, sel := range halves {
		lw := listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{Shard: sel})
		l, err := lw.List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !l.ShardApplied {
			t.Errorf("half %d: the server did not apply the shard selector", h)
		}
		for _, cm := range l.Items {
			if prev, dup := owner[cm.Name]; dup {
				t.Errorf("%s listed by halves %d and %d", cm.Name, prev, h)
			}
			owner[cm.Name] = h
		}
		if watches[h], err = lw.Watch(t.Context(), metav1.ListOptions{ResourceVersion: l.ResourceVersion}); err != nil {
			t.Fatal(err)
		}
		defer watches[h].Stop()
	}
	if len(owner) != 30 {
		t.Fatalf("the halves listed %d of 30", len(owner))
	}
	create("watched", 20)
	seen := 0
	for seen < 20 {
		select {
		case ev := <-watches[0].ResultChan():
			seen += record(t, owner, ev, 0)
		case ev := <-watches[1].ResultChan():
			seen += record(t, owner, ev, 1)
		case <-time.After(30 * time.Second):
			t.Fatalf("the halves' watches delivered %d of 20 creations", seen)
		}
	}
}

// record notes which half saw an ADDED event and fails on a second one.
func record(t *testing.T, owner map[string]int, ev watch.Event, h int) int {
	t.Helper()
	cm, ok := ev.Object.(*corev1.ConfigMap)
	if !ok || ev.Type != watch.Added {
		return 0
	}
	if prev, dup := owner[cm.Name]; dup {
		t.Errorf("%s seen by halves %d and %d", cm.Name, prev, h)
	}
	owner[cm.Name] = h
	return 1
}

func TestOptions_shardFiltersOnTheClientWhenTheServerDoesNot(t *testing.T) {
	var items []corev1.ConfigMap
	for i := range 100 {
		items = append(items, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint(i), UID: types.UID(fmt.Sprint("uid-", i))}})
	}
	list := func(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error) { // ignores the selector
		return &corev1.ConfigMapList{Items: append([]corev1.ConfigMap(nil), items...)}, nil
	}
	total := 0
	for _, sel := range halves {
		lw := listwatch.New[*corev1.ConfigMap](list, nil, listwatch.Options{Shard: sel})
		l, err := lw.List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.ShardApplied {
			t.Error("ShardApplied without shardInfo in the response")
		}
		for _, cm := range l.Items {
			if !sel.Matches(cm) {
				t.Errorf("%s is outside its half", cm.Name)
			}
		}
		total += len(l.Items)
	}
	if total != 100 {
		t.Errorf("the halves kept %d of 100", total)
	}
}
