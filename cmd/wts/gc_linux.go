package main

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// totalMemory is the memory the node may use: the machine's, or its
// cgroup's (v2) limit when that is lower, as in a container. 0 if unknown.
func totalMemory() uint64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	total := uint64(si.Totalram) * uint64(si.Unit)
	if raw, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if limit, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64); err == nil && limit < total {
			total = limit // "max" (no limit) does not parse
		}
	}
	return total
}
