package grain

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// Every scheduled mailbox runs, a blocked one holds up no other, and idle
// workers end.
func TestWorkerPool(t *testing.T) {
	base := runtime.NumGoroutine()
	p := newWorkerPool(20 * time.Millisecond)
	release := make(chan struct{})
	p.Schedule(func() { <-release }) // a mailbox waiting on another actor
	var wg sync.WaitGroup
	ran := make([]bool, 100)
	for i := range ran {
		wg.Add(1)
		p.Schedule(func() { ran[i] = true; wg.Done() })
		if i%10 == 0 {
			time.Sleep(time.Millisecond) // let workers go idle and be reused
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("mailboxes behind a blocked one did not run")
	}
	close(release)
	for i, ok := range ran {
		if !ok {
			t.Fatalf("mailbox %d never ran", i)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left, %d before: idle workers did not end", runtime.NumGoroutine(), base)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
