package par

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every index is visited exactly once, whatever the chunking.
func TestForCoversOnce(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 7, 100, 1001} {
		for _, minChunk := range []int{0, 1, 4, 500} {
			seen := make([]int32, n)
			For(n, minChunk, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					atomic.AddInt32(&seen[i], 1)
				}
			})
			for i, c := range seen {
				if c != 1 {
					t.Fatalf("n=%d min=%d: index %d visited %d times", n, minChunk, i, c)
				}
			}
		}
	}
}

// Concurrent callers share the workers without deadlock or lost work, and
// workers woken from parking still run their tasks.
func TestConcurrentCallers(t *testing.T) {
	var wg sync.WaitGroup
	var total atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 200; r++ {
				For(64, 1, func(lo, hi int) { total.Add(int64(hi - lo)) })
				if r%50 == 0 {
					time.Sleep(200 * time.Microsecond) // let workers park
				}
			}
		}()
	}
	wg.Wait()
	if total.Load() != 8*200*64 {
		t.Fatalf("total %d", total.Load())
	}
}

// BenchmarkForRegion is the round trip of one two-chunk region with nothing
// in it: what each parallel region of a decode step costs before its work.
func BenchmarkForRegion(b *testing.B) {
	var s atomic.Int64
	for i := 0; i < b.N; i++ {
		For(8, 1, func(lo, hi int) { s.Add(int64(hi - lo)) })
	}
}
