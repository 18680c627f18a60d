//go:build !linux

package main

import "time"

// threadTimer falls back to wall time where per-thread CPU time is not
// available.
type threadTimer struct{ start time.Time }

func startThreadTimer() *threadTimer { return &threadTimer{start: time.Now()} }

func (t *threadTimer) stop() (time.Duration, bool) { return time.Since(t.start), false }
