//go:build !linux

package main

// totalMemory is unknown off Linux: the node sets no memory limit of its
// own there (GOMEMLIMIT still applies).
func totalMemory() uint64 { return 0 }
