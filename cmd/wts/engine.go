package main

import (
	"log/slog"
	"runtime"

	"github.com/wts-project/wts/kernels/par"
)

// defaultEngineNice is the OS priority (nice) of the engine's threads in
// `wts serve`: off. At 10, on a node whose cores the engine shares with the
// API, bench/apibench acknowledges markedly more submissions a second with
// a lower p99 (`--engine-nice 10` against 0), the engine working through
// the queue in the gaps at its old pace. But the engine's threads then
// share the cores with the API's at the OS's discretion, and a parallel
// loop whose helper the OS has set aside waits for it: `wts bench sample`
// decodes markedly fewer tokens a second. So it suits a node that mostly
// trains (commit c4135ba has the figures).
const defaultEngineNice = 0

// configureEngine gives the engine its cores, fixed at start: Go's
// processors as the node starts (par's helpers are started once, for that
// many), so that no parallel loop reads GOMAXPROCS, which takes the
// scheduler's lock; a tiny model's forward opens ~100 loops. With a nice
// other than 0 it also runs the engine's work (the executors, and the
// helpers of their parallel loops) on threads of its own at that nice; the
// engine keeps the cores Go would have given it, and Go gets twice as many
// processors, so that the engine's threads, which hold theirs while the OS
// runs others first, never leave a request goroutine without one. Call
// before any engine work.
func configureEngine(nice int, log *slog.Logger) {
	cores := runtime.GOMAXPROCS(0)
	if nice == 0 {
		par.Configure(cores, nil)
		return
	}
	if !threadPriorities {
		log.Warn("engine priority: not supported on this OS, engine work runs at the node's priority")
		par.Configure(cores, nil)
		return
	}
	runtime.GOMAXPROCS(2 * cores)
	par.Configure(cores, func() {
		runtime.LockOSThread()
		if err := setThreadNice(nice); err != nil {
			log.Warn("engine thread priority", "nice", nice, "err", err)
		}
	})
	log.Info("engine priority", "nice", nice, "engine_cores", cores, "gomaxprocs", 2*cores)
}
