package store

import "github.com/ctrlkit/ctrlkit/object"

// newerVersion returns the resource version a store should reflect after
// seeing next when it reflected cur. Versions only move forward:
//   - an empty next says nothing and leaves cur;
//   - when both are unsigned integers (etcd revisions, the practical case)
//     the larger wins;
//   - otherwise they cannot be ordered and next wins, since the store is fed
//     in the order the server produced events.
func newerVersion(cur, next string) string {
	if next == "" || cur == "" {
		return cur + next // whichever is set, or ""
	}
	if cmp, ok := object.CompareResourceVersions(cur, next); ok && cmp >= 0 {
		return cur
	}
	return next
}

// maxVersion folds newerVersion over the versions of objs, in order,
// starting at rv. With only numeric versions the order does not matter; an
// opaque version makes it matter, which is why the fold starts at the
// store's version rather than being computed separately and merged.
func maxVersion[T object.Object](rv string, objs []T) string {
	for _, obj := range objs {
		rv = newerVersion(rv, obj.GetResourceVersion())
	}
	return rv
}
