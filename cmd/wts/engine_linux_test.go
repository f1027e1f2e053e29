package main

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// setThreadNice lowers the calling thread's priority and no other's.
func TestSetThreadNice(t *testing.T) {
	nice := func() int { // the raw getpriority returns 20 - nice
		p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
		if err != nil {
			t.Fatal(err)
		}
		return 20 - p
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := nice()
	want := min(before+7, 19)
	if want == before {
		t.Skip("already at the lowest priority")
	}
	got := make(chan int)
	go func() {
		runtime.LockOSThread() // the thread exits with the goroutine
		if err := setThreadNice(want); err != nil {
			t.Error(err)
		}
		got <- nice()
	}()
	if n := <-got; n != want {
		t.Fatalf("engine thread nice %d, want %d", n, want)
	}
	if n := nice(); n != before {
		t.Fatalf("this thread's nice moved to %d from %d", n, before)
	}
}
