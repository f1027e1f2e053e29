package main

import (
	"runtime"
	"sync"
)

// A checkpoint's commit into the store file holds a processor for tens of
// milliseconds in stretches that cannot yield: bbolt spills its nodes and
// writes ~1,100 pages, each write a short system call after which the
// goroutine takes its processor straight back. On a two-core node that left
// the requests one processor, and whenever the commit loop sat in a log
// sync on it the goroutines queued there waited: an execution trace at 64
// clients showed 44-62 request goroutines runnable for ~20 ms while the
// other processor ran the checkpoint, and the slowest 1% of submissions
// began during checkpoints. So the process runs with one processor more
// while any checkpoint runs: the OS shares the cores between three threads,
// and the requests keep two processors. At 64 clients with the executor
// held back (requests alone), p99 fell from 26-35 to 20-22 ms; with it,
// lower in six of eight alternated pairs (median ratio ~0.87).
//
// Nothing else may change GOMAXPROCS while a checkpoint runs: the last one
// to end restores the count it found.
var spare struct {
	sync.Mutex
	running int // checkpoints under way, over every store of the process
	base    int // GOMAXPROCS before the first of them took its processor
}

// withSpareProc runs fn with one processor more than the process had.
func withSpareProc(fn func()) {
	spare.Lock()
	if spare.running == 0 {
		spare.base = runtime.GOMAXPROCS(0)
		runtime.GOMAXPROCS(spare.base + 1)
	}
	spare.running++
	spare.Unlock()
	defer func() {
		spare.Lock()
		if spare.running--; spare.running == 0 {
			runtime.GOMAXPROCS(spare.base)
		}
		spare.Unlock()
	}()
	fn()
}
