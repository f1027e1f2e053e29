package actors

import (
	"bufio"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/wts-project/wts/cluster"
	"github.com/wts-project/wts/kernels/par"
)

// Device is what a node's executor pair (a trainer's and a sampling
// executor) owns and declares: today the CPU, its engine threads and the
// node's memory budget for trainers, adapters and KV caches. The node's
// membership metadata carries it (announcedDevices), which placement
// reads, and so do operators (the admin socket's GET /admin/node).
type Device struct {
	ID          string `json:"id"`           // "cpu0"
	Kind        string `json:"kind"`         // "cpu"
	Name        string `json:"name"`         // the processor's model
	Threads     int    `json:"threads"`      // the engine's threads
	MemoryBytes int64  `json:"memory_bytes"` // the budget the executors share
	FreeBytes   int64  `json:"free_bytes"`   // what of it is not taken
}

// Devices are the node's devices and what each has free now.
func (s *System) Devices() []Device {
	return []Device{{ID: "cpu0", Kind: "cpu", Name: cpuName(), Threads: par.Workers(),
		MemoryBytes: s.n.Memory.Limit(), FreeBytes: max(0, s.n.Memory.Limit()-s.n.Memory.InUse())}}
}

// announcedDevices are the node's devices as its membership metadata
// carries them (cluster.Gossip.SetDevices).
func (s *System) announcedDevices() []cluster.Device {
	var out []cluster.Device
	for _, d := range s.Devices() {
		out = append(out, cluster.Device{ID: d.ID, Kind: d.Kind, Name: d.Name, Memory: d.MemoryBytes, Free: d.FreeBytes})
	}
	return out
}

// cpuName is the processor's model, as the OS names it.
var cpuName = sync.OnceValue(func() string {
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		lines := bufio.NewScanner(f)
		for lines.Scan() {
			if k, v, ok := strings.Cut(lines.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
})
