package par

import (
	"os"
	"os/exec"
	"runtime"
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

// Configure fixes the loops' width apart from GOMAXPROCS and runs its setup
// once on each helper and on every EngineThread caller; loops on such
// threads (which never yield to Go's scheduler) still finish. The pool of
// helpers is made once per process, so this runs in a child process.
func TestConfigure(t *testing.T) {
	if os.Getenv("PAR_CONFIGURE_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConfigure$", "-test.count=1")
		cmd.Env = append(os.Environ(), "PAR_CONFIGURE_CHILD=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	runtime.GOMAXPROCS(4)
	var setups atomic.Int32
	Configure(2, func() {
		runtime.LockOSThread()
		setups.Add(1)
	})
	if Workers() != 2 {
		t.Fatalf("Workers() = %d, want the configured 2", Workers())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		EngineThread()
		for r := 0; r < 300; r++ {
			var chunks atomic.Int32
			For(100, 1, func(lo, hi int) { chunks.Add(1) })
			if chunks.Load() != 2 {
				t.Errorf("round %d: %d chunks, want 2", r, chunks.Load())
				return
			}
			if r%100 == 0 {
				time.Sleep(time.Millisecond) // let the helper park
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("loops on locked engine threads did not finish")
	}
	if n := setups.Load(); n != 2 { // the one helper, and the caller
		t.Fatalf("setup ran %d times, want 2", n)
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
