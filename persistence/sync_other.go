//go:build !linux

package persistence

import "os"

// fdatasync is a full sync where the system has no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }
