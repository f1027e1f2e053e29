// Package par splits loops across the machine's cores. Kernels call it instead
// of spawning goroutines themselves so that one rule decides how work is cut.
package par

import (
	"runtime"
	"sync"
)

// Workers is how many goroutines a parallel loop may use.
func Workers() int { return runtime.GOMAXPROCS(0) }

// For runs fn over [0, n) in contiguous chunks, one per worker, and returns
// when all are done. Loops shorter than minChunk per worker run inline, since
// a goroutine hand-off costs about a microsecond.
func For(n, minChunk int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	w := Workers()
	if minChunk < 1 {
		minChunk = 1
	}
	if c := n / minChunk; c < w {
		w = c
	}
	if w <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + w - 1) / w
	for lo := chunk; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, hi)
	}
	fn(0, min(chunk, n))
	wg.Wait()
}
