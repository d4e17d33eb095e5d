package workqueue

import (
	"fmt"
	"time"
)

// waiting is a key, the time it becomes ready and its priority.
type waiting[K comparable] struct {
	key  K
	at   time.Time
	prio int32
}

// delayHeap holds delayed keys, earliest first, at most once each: adding a
// key that is already waiting keeps the earlier of the two times and the
// higher of the two priorities. It is a
// plain type with no lock and no clock; the delay goroutine owns it and
// passes the time in.
//
// Invariants (checked by checkInvariants): items is a binary min-heap on at;
// index maps each key in items to its position, and nothing else.
type delayHeap[K comparable] struct {
	items []waiting[K]
	index map[K]int
}

func newDelayHeap[K comparable]() delayHeap[K] {
	return delayHeap[K]{index: map[K]int{}}
}

func (h *delayHeap[K]) len() int { return len(h.items) }

// add schedules w.key at w.at, or moves it earlier if it already waits for a
// later time. A later time for a waiting key is ignored; a higher priority
// is kept.
func (h *delayHeap[K]) add(w waiting[K]) {
	if i, ok := h.index[w.key]; ok {
		h.items[i].prio = max(h.items[i].prio, w.prio)
		if w.at.Before(h.items[i].at) {
			h.items[i].at = w.at
			h.up(i)
		}
		return
	}
	h.items = append(h.items, w)
	h.index[w.key] = len(h.items) - 1
	h.up(len(h.items) - 1)
}

// next returns the earliest ready time; ok is false when the heap is empty.
func (h *delayHeap[K]) next() (at time.Time, ok bool) {
	if len(h.items) == 0 {
		return at, false
	}
	return h.items[0].at, true
}

// popReady removes and appends to dst every key whose time is not after now,
// earliest first, and returns dst.
func (h *delayHeap[K]) popReady(now time.Time, dst []waiting[K]) []waiting[K] {
	for len(h.items) > 0 && !h.items[0].at.After(now) {
		dst = append(dst, h.items[0])
		h.removeTop()
	}
	return dst
}

func (h *delayHeap[K]) removeTop() {
	last := len(h.items) - 1
	delete(h.index, h.items[0].key)
	if last > 0 {
		h.items[0] = h.items[last]
		h.index[h.items[0].key] = 0
	}
	h.items[last] = waiting[K]{}
	h.items = h.items[:last]
	if last > 0 {
		h.down(0)
	}
}

func (h *delayHeap[K]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.index[h.items[i].key] = i
	h.index[h.items[j].key] = j
}

func (h *delayHeap[K]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.items[i].at.Before(h.items[p].at) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *delayHeap[K]) down(i int) {
	n := len(h.items)
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < n && h.items[l].at.Before(h.items[least].at) {
			least = l
		}
		if r < n && h.items[r].at.Before(h.items[least].at) {
			least = r
		}
		if least == i {
			return
		}
		h.swap(i, least)
		i = least
	}
}

// checkInvariants returns an error describing the first broken invariant.
func (h *delayHeap[K]) checkInvariants() error {
	if len(h.index) != len(h.items) {
		return fmt.Errorf("workqueue: heap has %d items but %d indexed", len(h.items), len(h.index))
	}
	for i, w := range h.items {
		if j, ok := h.index[w.key]; !ok || j != i {
			return fmt.Errorf("workqueue: heap item %d (%v) indexed at %d", i, w.key, j)
		}
		if p := (i - 1) / 2; i > 0 && w.at.Before(h.items[p].at) {
			return fmt.Errorf("workqueue: heap item %d is earlier than its parent %d", i, p)
		}
	}
	return nil
}
