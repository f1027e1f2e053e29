//go:build !linux

package main

// threadPriorities: elsewhere a nice value is the whole process's.
const threadPriorities = false

func setThreadNice(int) error { return nil }
