//go:build !unix

package scenario

// offHeap returns n bytes; without mmap they are on the Go heap.
func offHeap(n int) []byte { return make([]byte, n) }
