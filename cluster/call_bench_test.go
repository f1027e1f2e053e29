//go:build !race

package cluster

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"
)

// BenchmarkGrainCall is a grain request and its answer from one member of
// a two-member cluster, to grains on that member (same-node) and on the
// other (cross-node), in the same run: one caller at a time (the latency)
// and 64 callers on 64 grains (GOMAXPROCS dividing 64) (the throughput). The grains answer at once,
// so the figures are the runtime's cost alone: placement lookup (cached),
// mailbox, and for cross-node protoactor's remote (gRPC, protobuf).
func BenchmarkGrainCall(b *testing.B) {
	a := startGossip(b, nil)
	defer a.c.Shutdown(true)
	o := startGossip(b, []string{a.gossip.Addr()})
	defer o.c.Shutdown(true)
	waitMembers(b, 10*time.Second, []string{a.sys.Address(), o.sys.Address()}, a, o)
	where := hosts(b, a, 512)
	ids := map[string][]string{}
	for id, addr := range where {
		name := "cross-node"
		if addr == a.sys.Address() {
			name = "same-node"
		}
		ids[name] = append(ids[name], id)
	}
	msg := wrapperspb.String("")
	for _, name := range []string{"same-node", "cross-node"} {
		if len(ids[name]) < 64 {
			b.Fatalf("%d %s grains of 512", len(ids[name]), name)
		}
		b.Run(name+"/callers=1", func(b *testing.B) {
			id := ids[name][0]
			for b.Loop() {
				if _, err := a.c.Request(id, "where", msg); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/callers=64", func(b *testing.B) {
			var callers atomic.Int64
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				id := ids[name][int(callers.Add(1)-1)%64]
				for pb.Next() {
					if _, err := a.c.Request(id, "where", msg); err != nil {
						panic(fmt.Sprint(id, err))
					}
				}
			})
		})
	}
}
