package main

import (
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
)

// defaultGCPercent is the node's GOGC unless the environment sets one. The
// collector's work follows the heap's pointers, and a node's big buffers
// (weights, activations, KV caches) are pointer-free floats that it never
// scans; what it scans is request-sized garbage. At Go's default of 100 a
// node with a small model collected every few megabytes of it, and 400
// took CPU off each submission (`bench/apibench --against` a build with
// 100 shows it). The heap may then grow to five times what is live; the
// memory limit below keeps that inside the machine.
const defaultGCPercent = 400

// memoryShare is the part of the machine's memory the node's soft limit
// (GOMEMLIMIT) is set to unless the environment sets one: near it the
// collector runs as often as it must, whatever GOGC says.
const memoryShare = 0.75

// defaultBudget is the node's memory budget unless --memory-budget sets
// one: memoryShare of the machine's memory (or its cgroup's limit), 0 when
// that is unknown.
func defaultBudget() int64 { return int64(memoryShare * float64(totalMemory())) }

// limitShare is the part of the node's memory budget its soft limit
// (GOMEMLIMIT) is set to: with GOGC at 400 the heap grows to the limit
// before the collector works hard, and the limit is soft, so it sits below
// the budget, which the node's resident memory must stay within.
const limitShare = 0.9

// tuneGC applies the defaults above where the operator has not chosen; the
// soft limit (GOMEMLIMIT) follows the node's memory budget.
func tuneGC(log *slog.Logger, budget int64) {
	gogc, set := os.LookupEnv("GOGC")
	if !set {
		debug.SetGCPercent(defaultGCPercent)
		gogc = strconv.Itoa(defaultGCPercent)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set && budget > 0 {
		debug.SetMemoryLimit(int64(limitShare * float64(budget)))
	}
	log.Info("garbage collector", "gogc", gogc, "memory_limit_bytes", debug.SetMemoryLimit(-1)) // -1 reads the limit
}
