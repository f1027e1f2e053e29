package main

import (
	"runtime"
	"sync"
	"testing"
)

// Checkpoints of several stores at once share one spare processor, and the
// last to end gives it back.
func TestSpareProc(t *testing.T) {
	spare.Lock() // another test's store may be checkpointing
	base := runtime.GOMAXPROCS(0)
	if spare.running > 0 {
		base = spare.base
	}
	spare.Unlock()
	release := make(chan struct{})
	var inside, wg sync.WaitGroup
	for range 3 {
		inside.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			withSpareProc(func() {
				inside.Done()
				<-release
			})
		}()
	}
	inside.Wait()
	if got := runtime.GOMAXPROCS(0); got != base+1 {
		t.Errorf("during three checkpoints: GOMAXPROCS %d, want %d", got, base+1)
	}
	close(release)
	wg.Wait()
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Errorf("after them: GOMAXPROCS %d, want %d", got, base)
	}
	withSpareProc(func() {
		if got := runtime.GOMAXPROCS(0); got != base+1 {
			t.Errorf("during a lone checkpoint: GOMAXPROCS %d, want %d", got, base+1)
		}
	})
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Errorf("after it: GOMAXPROCS %d, want %d", got, base)
	}
}
