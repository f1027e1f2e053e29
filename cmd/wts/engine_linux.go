package main

import "golang.org/x/sys/unix"

// threadPriorities: Linux gives each thread its own nice value.
const threadPriorities = true

// setThreadNice sets the calling thread's nice value (the caller has locked
// its goroutine to the thread). Raising it needs no privilege.
func setThreadNice(nice int) error {
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice)
}
