package main

import cmap "github.com/orcaman/concurrent-map"

// protoactor keeps every process of an actor system (each request's future
// among them) in 1,024 buckets chosen by hash, and each bucket is a
// concurrent-map of SHARD_COUNT Go maps, 32 by default: 32,768 maps, each of
// which keeps its slots once a future has passed through it. At 64 clients
// in bench/apibench that was ~9 MB of pointers that every collection marked
// and that each future touched at a random place (the collector's mark ~17
// ms of CPU a cycle, against ~10 with one shard). One shard a bucket leaves
// 1,024 maps, which the buckets' hash already spreads the processes over.
//
// The shard count is read when a map is made and on every access, so it is
// set here, before any actor system exists; protoactor makes its maps only
// in its constructors.
func init() { cmap.SHARD_COUNT = 1 }
