package store

// Sample returns up to n cached objects, an arbitrary selection (Go's map
// order), and the number of objects cached, in one short read lock whose
// cost does not grow with the cache: for estimates such as a debug page's
// cache size. The objects are read-only. Safe for concurrent use.
func (s *Indexer[T]) Sample(n int) (objs []T, total int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	objs = make([]T, 0, min(n, len(s.c.items)))
	for _, e := range s.c.items {
		if len(objs) == n {
			break
		}
		objs = append(objs, e.obj)
	}
	return objs, len(s.c.items)
}
