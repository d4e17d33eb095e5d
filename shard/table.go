package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// The ring's table is the Lease named after the ring; its annotations say
// which incarnation holds each virtual shard.
const (
	holdersAnnotation = "ctrlkit.io/shard-holders"
	virtualAnnotation = "ctrlkit.io/virtual-shards"
	keyAnnotation     = "ctrlkit.io/shard-key"
)

// readTable reads the ring's table, creating it when missing. holders[v]
// is the holder of shard v, "" for none.
func (s *Sharder) readTable(ctx context.Context) (*coordinationv1.Lease, []string, error) {
	leases := s.opts.Kube.CoordinationV1().Leases(s.opts.Namespace)
	l, err := leases.Get(ctx, s.opts.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: s.opts.Name, Namespace: s.opts.Namespace}}
		if err := encodeTable(l, make([]string, s.opts.VirtualShards), s.opts.Key); err != nil {
			return nil, nil, err
		}
		l, err = leases.Create(ctx, l, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			l, err = leases.Get(ctx, s.opts.Name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("shard: reading the ring's table %s/%s: %w", s.opts.Namespace, s.opts.Name, err)
	}
	holders, err := decodeTable(l, s.opts.VirtualShards, s.opts.Key)
	if err != nil {
		return nil, nil, err
	}
	return l, holders, nil
}

// encodeTable writes holders into l's annotations: per holder, its shards
// as ranges ("0-3,7").
func encodeTable(l *coordinationv1.Lease, holders []string, key Key) error {
	byHolder := map[string][]string{}
	for v := 0; v < len(holders); {
		h := holders[v]
		end := v
		for end+1 < len(holders) && holders[end+1] == h {
			end++
		}
		if h != "" {
			r := strconv.Itoa(v)
			if end > v {
				r += "-" + strconv.Itoa(end)
			}
			byHolder[h] = append(byHolder[h], r)
		}
		v = end + 1
	}
	table := map[string]string{}
	for h, rs := range byHolder {
		table[h] = strings.Join(rs, ",")
	}
	b, err := json.Marshal(table)
	if err != nil {
		return err
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[holdersAnnotation] = string(b)
	l.Annotations[virtualAnnotation] = strconv.Itoa(len(holders))
	l.Annotations[keyAnnotation] = string(key)
	return nil
}

// Table is a ring's table of holders, as ReadTable returns it.
type Table struct {
	Key     Key
	Virtual int
	// Holders[v] is the holder (Identity#incarnation) of virtual shard v,
	// "" for none.
	Holders []string
}

// Held counts the virtual shards each identity holds (its incarnations
// together).
func (t Table) Held() map[string]int {
	out := map[string]int{}
	for _, h := range t.Holders {
		if h != "" {
			id, _, _ := strings.Cut(h, "#")
			out[id]++
		}
	}
	return out
}

// ReadTable reads the table of the ring named ring in namespace, e.g. for a
// dashboard. It fails with a NotFound API error before the ring's first
// member wrote it.
func ReadTable(ctx context.Context, kube kubernetes.Interface, namespace, ring string) (Table, error) {
	l, err := kube.CoordinationV1().Leases(namespace).Get(ctx, ring, metav1.GetOptions{})
	if err != nil {
		return Table{}, err
	}
	virtual, err := strconv.Atoi(l.Annotations[virtualAnnotation])
	if err != nil || checkVirtual(virtual) != nil {
		return Table{}, fmt.Errorf("%w: the ring %s's table names %q virtual shards", ErrInvalid, ring, l.Annotations[virtualAnnotation])
	}
	key := Key(l.Annotations[keyAnnotation])
	holders, err := decodeTable(l, virtual, key)
	if err != nil {
		return Table{}, err
	}
	return Table{Key: key, Virtual: virtual, Holders: holders}, nil
}

// decodeTable reads the holders of virtual shards from l, checking that
// the ring was made with the same number of shards and key.
func decodeTable(l *coordinationv1.Lease, virtual int, key Key) ([]string, error) {
	a := l.Annotations
	if got := a[virtualAnnotation]; got != strconv.Itoa(virtual) {
		return nil, fmt.Errorf("%w: the ring %s has %s virtual shards, this replica is configured with %d (use a new ring name to change it)",
			ErrInvalid, l.Name, got, virtual)
	}
	if got := a[keyAnnotation]; got != string(key) {
		return nil, fmt.Errorf("%w: the ring %s shards by %q, this replica by %q (use a new ring name to change it)", ErrInvalid, l.Name, got, key)
	}
	var table map[string]string
	if err := json.Unmarshal([]byte(a[holdersAnnotation]), &table); err != nil {
		return nil, fmt.Errorf("%w: the ring %s's table: %v", ErrInvalid, l.Name, err)
	}
	holders := make([]string, virtual)
	for h, rs := range table {
		for _, r := range strings.Split(rs, ",") {
			lo, hi, isRange := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil || a < 0 || b < a || b >= virtual {
				return nil, fmt.Errorf("%w: the ring %s's table: bad range %q of %s", ErrInvalid, l.Name, r, h)
			}
			for v := a; v <= b; v++ {
				holders[v] = h
			}
		}
	}
	return holders, nil
}

// watchTable pokes the step loop whenever the ring's table changes, so a
// released shard is claimed at once rather than at the next tick.
func (s *Sharder) watchTable(ctx context.Context) {
	leases := s.opts.Kube.CoordinationV1().Leases(s.opts.Namespace)
	for ctx.Err() == nil {
		w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", s.opts.Name).String()})
		if err == nil {
			for range w.ResultChan() {
				s.poke()
			}
			w.Stop()
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.opts.RetryPeriod):
		}
	}
}
