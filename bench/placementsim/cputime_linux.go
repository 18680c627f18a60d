//go:build linux

package main

import (
	"runtime"
	"syscall"
	"time"
)

// rusageThread is RUSAGE_THREAD: the calling thread only.
const rusageThread = 1

// threadTimer measures the CPU time of the calling goroutine's thread, so
// decision costs are not inflated by other processes on a shared machine.
// The goroutine stays locked to its thread until stop.
type threadTimer struct{ start time.Duration }

func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startThreadTimer() *threadTimer {
	runtime.LockOSThread()
	return &threadTimer{start: threadCPU()}
}

// stop returns the thread CPU time since start, and whether it is CPU time
// (false: wall time could not be replaced).
func (t *threadTimer) stop() (time.Duration, bool) {
	end := threadCPU()
	runtime.UnlockOSThread()
	if end < 0 || t.start < 0 {
		return 0, false
	}
	return end - t.start, true
}
