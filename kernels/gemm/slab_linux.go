package gemm

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// adviseHuge asks Linux to back b (which starts on a hugePage boundary) with
// transparent huge pages. It is advice: where THP is off or the kernel lacks
// it, madvise fails and the memory stays in small pages, which is correct,
// only slower.
func adviseHuge(b []float32) {
	_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), len(b)*4), unix.MADV_HUGEPAGE)
}
