package listwatch_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
		var fallbacks []string
		lw := listwatch.New[*corev1.ConfigMap](cms.List, cms.Watch, listwatch.Options{Shard: static(sel),
			OnShardNotApplied: func(r string) { fallbacks = append(fallbacks, r) }})
		l, err := lw.List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(fallbacks) != 0 {
			t.Errorf("half %d: the server did not apply the shard selector: %q", h, fallbacks)
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

// static returns an Options.Shard that always selects sel.
func static(sel *shard.Selector) func() listwatch.Shard {
	return func() listwatch.Shard { return sel }
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
	// A server's count of what follows: of every object, not of a half.
	remaining := int64(900)
	list := func(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error) { // ignores the selector
		return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{Continue: "next", RemainingItemCount: &remaining},
			Items: append([]corev1.ConfigMap(nil), items...)}, nil
	}
	total := 0
	for _, sel := range halves {
		var fallbacks []string
		lw := listwatch.New[*corev1.ConfigMap](list, nil, listwatch.Options{Shard: static(sel),
			OnShardNotApplied: func(r string) { fallbacks = append(fallbacks, r) }})
		l, err := lw.List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(fallbacks) != 1 || !strings.Contains(fallbacks[0], "shardInfo") {
			t.Errorf("fallbacks %q, want one naming the missing shardInfo", fallbacks)
		}
		for _, cm := range l.Items {
			if !sel.Matches(cm) {
				t.Errorf("%s is outside its half", cm.Name)
			}
		}
		if l.RemainingItemCount != nil {
			t.Errorf("a list filtered on the client kept the server's RemainingItemCount %d", *l.RemainingItemCount)
		}
		total += len(l.Items)
	}
	if total != 100 {
		t.Errorf("the halves kept %d of 100", total)
	}
}

func TestOptions_shardFallbackIsReportedFromListsWatchesAndRefusals(t *testing.T) {
	sel := halves[0]
	in, out := (*corev1.ConfigMap)(nil), (*corev1.ConfigMap)(nil)
	for i := 0; in == nil || out == nil; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint(i), UID: types.UID(fmt.Sprint("uid-", i))}}
		if sel.Matches(cm) {
			in = cm
		} else {
			out = cm
		}
	}
	var reasons []string
	var sent []string
	refuse := true
	list := func(_ context.Context, o metav1.ListOptions) (*corev1.ConfigMapList, error) {
		sent = append(sent, o.ShardSelector)
		if o.ShardSelector != "" && refuse {
			return nil, apierrors.NewBadRequest(`unknown query parameter "shardSelector"`)
		}
		return &corev1.ConfigMapList{Items: []corev1.ConfigMap{*in, *out}}, nil
	}
	fw := watch.NewFake()
	lw := listwatch.New[*corev1.ConfigMap](list, func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil },
		listwatch.Options{Shard: static(sel), OnShardNotApplied: func(r string) { reasons = append(reasons, r) }})

	// A server that refuses the field: retried without it, reported, not sent again.
	l, err := lw.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("List against a server refusing shardSelector: %v", err)
	}
	if len(l.Items) != 1 || l.Items[0].Name != in.Name {
		t.Errorf("items %v, want only %s", l.Items, in.Name)
	}
	if len(reasons) != 1 || !strings.Contains(reasons[0], "refused") {
		t.Errorf("reasons %q, want one saying the server refused the selector", reasons)
	}
	if _, err := lw.List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if want := []string{sel.String(), "", ""}; !slices.Equal(sent, want) {
		t.Errorf("selectors sent %q, want %q", sent, want)
	}

	// A server that ignores it silently: a watch event outside the selector
	// tells, once; the event is filtered out.
	reasons, refuse = nil, false
	lw2 := listwatch.New[*corev1.ConfigMap](list, func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil },
		listwatch.Options{Shard: static(sel), OnShardNotApplied: func(r string) { reasons = append(reasons, r) }})
	w, err := lw2.Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		fw.Add(out.DeepCopy())
		fw.Add(out.DeepCopy())
		fw.Add(in.DeepCopy())
	}()
	ev := <-w.ResultChan()
	if ev.Object.(*corev1.ConfigMap).Name != in.Name {
		t.Errorf("first event passed: %s, want %s (the others are outside the selector)", ev.Object.(*corev1.ConfigMap).Name, in.Name)
	}
	if len(reasons) != 1 || !strings.Contains(reasons[0], "watch event outside") {
		t.Errorf("reasons %q, want one (per watch) saying a watch event was outside the selector", reasons)
	}
}

func TestOptions_shardIsReadAtEveryCallAndByControllerFollowsTheOwner(t *testing.T) {
	owner := types.UID("owner-uid")
	var ownerHalf *shard.Selector
	for _, h := range halves {
		if h.MatchesValue(string(owner)) {
			ownerHalf = h
		}
	}
	yes := true
	owned := corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "owned", UID: "x",
		OwnerReferences: []metav1.OwnerReference{{UID: owner, Controller: &yes, Name: "o", Kind: "Foo", APIVersion: "v1"}}}}
	orphan := corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orphan", UID: "y"}}
	var sent []string
	list := func(_ context.Context, o metav1.ListOptions) (*corev1.ConfigMapList, error) {
		sent = append(sent, o.ShardSelector)
		return &corev1.ConfigMapList{Items: []corev1.ConfigMap{owned, orphan}}, nil
	}
	current := ownerHalf
	lw := listwatch.New[*corev1.ConfigMap](list, nil, listwatch.Options{Shard: func() listwatch.Shard {
		return shard.ByController{Selector: current}
	}})
	l, err := lw.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Items[0].Name != "owned" {
		t.Errorf("by controller, the owner's half kept %d items, want only the owned one", len(l.Items))
	}
	for _, h := range halves {
		if h != ownerHalf {
			current = h
		}
	}
	if l, _ = lw.List(t.Context(), metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("the other half kept %d items, want none", len(l.Items))
	}
	if want := []string{"", ""}; !slices.Equal(sent, want) {
		t.Errorf("selectors sent by controller %q, want none (the server cannot cut by owner)", sent)
	}
}
