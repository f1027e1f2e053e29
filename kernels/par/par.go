// Package par splits loops across the machine's cores. Kernels call it instead
// of spawning goroutines themselves so that one rule decides how work is cut.
//
// Parallel regions in decoding are short (tens of microseconds: one small
// matrix-vector product each) and come back to back, and waking a parked
// goroutine costs about as much as the region itself. So the helpers are
// persistent workers that spin for a moment after each task before parking,
// and a caller that finds a worker busy (another run's work) does that chunk
// itself rather than wait.
package par

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// spinFor is how long an idle worker keeps polling before it parks. It
// outlasts the serial gaps of a decode step (norms, attention at long
// contexts, sampling over the vocabulary): a parked worker is woken by the
// Go scheduler onto the caller's own processor, and on a virtual machine the
// idle one takes tens of microseconds to come and steal it, so with a
// shorter spin a single-stream decode left a good part of a core idle.
const spinFor = 200 * time.Microsecond

// Grain is the fewest multiply-adds (or steps of like cost) worth handing to
// another core: posting a task and waiting for it costs a few microseconds,
// about what one core spends on this many, and a helper woken for less then
// spins for spinFor, taking a core from whatever else the process runs (the
// service's HTTP and store, beside a tiny model's forward).
const Grain = 1 << 15

// MinChunk is the minChunk for a loop whose items cost work multiply-adds
// each: enough items to make a grain, and at least floor.
func MinChunk(work, floor int) int {
	return max(floor, Grain/max(work, 1))
}

// share is how many workers For(n, minChunk, ·) uses.
func share(n, minChunk int) int {
	return min(Workers(), n/max(minChunk, 1))
}

// Splits reports whether For(n, minChunk, ·) would hand part of the loop to
// a helper. A loop that mostly runs inline (a tiny model's norms,
// activations and attention heads) calls its body directly when not: a
// closure For may pass to another goroutine is built on the heap, ten of
// them in each of the service's tiny forwards.
func Splits(n, minChunk int) bool { return share(n, minChunk) > 1 }

// Workers is how many goroutines a parallel loop may use: the cores given
// to Configure, or GOMAXPROCS, read on every call (under the scheduler's
// lock: a service configures its cores once instead).
func Workers() int {
	if cores > 0 {
		return cores
	}
	return runtime.GOMAXPROCS(0)
}

var (
	cores       int    // set by Configure; 0: GOMAXPROCS
	threadSetup func() // set by Configure; nil: engine work runs on any thread
)

// Configure gives the engine its share of the process before the first
// parallel loop: how many cores its loops use, and setup, which each engine
// thread runs once as it starts (the helpers here, and the callers that
// say so with EngineThread). A service that runs the engine beside
// latency-bound work uses it to keep engine work on threads of its own at
// a lower OS priority (cmd/wts: --engine-nice); setup must then lock the
// goroutine to its thread.
func Configure(workers int, setup func()) {
	cores, threadSetup = workers, setup
}

// EngineThread runs Configure's setup on the calling goroutine, for loops'
// callers outside this package (the service's executors): a loop's share
// that ran at another priority than its helpers' would make one side wait
// on the other.
func EngineThread() {
	if threadSetup != nil {
		threadSetup()
	}
}

// Yield lets other goroutines have the processor, between jobs or while a
// spin goes on. After Configure with a setup it does nothing: Go hands a
// locked goroutine's processor to another thread and back on every yield
// (two thread switches), and the OS already runs the other threads first.
func Yield() {
	if threadSetup == nil {
		runtime.Gosched()
	}
}

type worker struct {
	busy   atomic.Bool   // claimed by a caller
	seq    atomic.Uint64 // bumped when a task is posted
	done   atomic.Uint64 // the seq of the last finished task
	parked atomic.Bool
	task   func()
	wake   chan struct{} // capacity 1: a token wakes a parked worker
}

var (
	poolOnce sync.Once
	pool     []*worker
)

func workers() []*worker {
	poolOnce.Do(func() {
		n := Workers() - 1
		for i := 0; i < n; i++ {
			w := &worker{wake: make(chan struct{}, 1)}
			pool = append(pool, w)
			go w.run()
		}
	})
	return pool
}

func (w *worker) run() {
	EngineThread()
	var last uint64
	for {
		start := time.Now()
		for i := 0; w.seq.Load() == last; i++ {
			if i%256 != 255 {
				continue
			}
			if time.Since(start) < spinFor {
				Yield()
				continue
			}
			// Publish parked before the last look, so a poster either sees it
			// and sends a token or has already bumped seq.
			w.parked.Store(true)
			if w.seq.Load() == last {
				<-w.wake
			}
			w.parked.Store(false)
			start = time.Now()
		}
		last = w.seq.Load()
		w.task()
		w.done.Store(last)
	}
}

// post hands fn to a claimed worker and returns the seq to wait for.
func (w *worker) post(fn func()) uint64 {
	w.task = fn
	s := w.seq.Add(1)
	if w.parked.Load() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return s
}

// wait spins until the worker has finished task s, then releases it.
func (w *worker) wait(s uint64) {
	for i := 0; w.done.Load() != s; i++ {
		if i%64 == 63 {
			Yield()
		}
	}
	w.busy.Store(false)
}

// For runs fn over [0, n) in contiguous chunks, one per worker, and returns
// when all are done. Loops shorter than minChunk per worker run inline.
func For(n, minChunk int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	w := share(n, minChunk)
	if w <= 1 {
		fn(0, n)
		return
	}
	ws := workers()
	chunk := (n + w - 1) / w
	type posted struct {
		w   *worker
		seq uint64
	}
	var helpers [8]posted
	used := helpers[:0]
	var inline [][2]int
	next := 0
	for lo := chunk; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		claimed := false
		for next < len(ws) && !claimed {
			if ws[next].busy.CompareAndSwap(false, true) {
				lo, hi := lo, hi
				used = append(used, posted{ws[next], ws[next].post(func() { fn(lo, hi) })})
				claimed = true
			}
			next++
		}
		if !claimed {
			inline = append(inline, [2]int{lo, hi})
		}
	}
	fn(0, min(chunk, n))
	for _, r := range inline {
		fn(r[0], r[1])
	}
	for _, p := range used {
		p.w.wait(p.seq)
	}
}
