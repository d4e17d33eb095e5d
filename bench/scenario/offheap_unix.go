//go:build unix

package scenario

import "syscall"

// offHeap returns n bytes of anonymous memory mapped outside the Go heap:
// the garbage collector neither counts nor scans them. They are never
// unmapped (a recording lives as long as the process).
func offHeap(n int) []byte {
	if n == 0 {
		return nil
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n) // on the heap after all: the figures then include it in the baseline
	}
	return b
}
