package main

import (
	"log/slog"
	"runtime"

	"github.com/wts-project/wts/kernels/par"
)

// defaultEngineNice is the OS priority (nice) of the engine's threads in
// `wts serve`. On a node whose cores the engine shares with the API, a
// submission's reply otherwise waited for engine work to give up a core: at
// 64 clients in bench/apibench, nice 10 took acknowledged submissions from
// ~2,500 to ~4,900/s and p99 from 59–76 to 33–47 ms (two alternated
// pairs), while the engine worked through the queue in the gaps. Engine work
// still gets the cores whenever the API is idle, and at nice 10 about a
// tenth of a core per busy request thread when it is not.
const defaultEngineNice = 10

// deprioritizeEngine runs the engine's work (the executors, and the helpers
// of their parallel loops) on threads of its own at the given nice; 0 leaves
// it on Go's shared threads. The engine keeps the cores Go would have given
// it; Go gets twice as many processors, so that the engine's threads, which
// hold theirs while the OS runs others first, never leave a request
// goroutine without one. Call before any engine work.
func deprioritizeEngine(nice int, log *slog.Logger) {
	if nice == 0 {
		return
	}
	if !threadPriorities {
		log.Warn("engine priority: not supported on this OS, engine work runs at the node's priority")
		return
	}
	cores := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(2 * cores)
	par.Configure(cores, func() {
		runtime.LockOSThread()
		if err := setThreadNice(nice); err != nil {
			log.Warn("engine thread priority", "nice", nice, "err", err)
		}
	})
	log.Info("engine priority", "nice", nice, "engine_cores", cores, "gomaxprocs", 2*cores)
}
