package persistence

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data, and its size only if that changed: the log
// never changes size between resets (wal.grow), so this is one data write.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
