package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// PacerMode says how a Pacer waits for an event's due time.
type PacerMode uint8

const (
	// PacerSleep (the default) runs the schedule on a goroutine locked to
	// its OS thread, whose timer slack is set to 1 ns, and waits in
	// nanosleep: the thread sleeps in the kernel, so the pacer takes no CPU
	// from the systems under test, and wakes within a few microseconds of
	// the due time (Go's timers may be a millisecond late, and a thread's
	// default timer slack is 50 us).
	PacerSleep PacerMode = iota
	// PacerSpin spins on the clock without yielding while the process has
	// more than one P (GOMAXPROCS > 1), for waits under 50 us. It takes a
	// core from the systems under test: kept only to reproduce results
	// measured with it before 2026-12-01 (BENCHMARKS.md).
	PacerSpin
	// PacerYield spins calling runtime.Gosched between clock reads (the
	// generator's behaviour until 2026-11-29). Each Gosched puts the pacer
	// on the global run queue, where a P looking for work finds it before
	// it would poll the network; measured, both clients then receive later.
	PacerYield
)

// String returns "sleep", "spin" or "yield".
func (m PacerMode) String() string {
	switch m {
	case PacerSpin:
		return "spin"
	case PacerYield:
		return "yield"
	}
	return "sleep"
}

// MarshalText encodes the mode as its name (JSON results).
func (m PacerMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText decodes a mode's name.
func (m *PacerMode) UnmarshalText(b []byte) error {
	v, err := ParsePacerMode(string(b))
	*m = v
	return err
}

// ParsePacerMode parses "sleep", "spin" or "yield".
func ParsePacerMode(s string) (PacerMode, error) {
	switch s {
	case "sleep":
		return PacerSleep, nil
	case "spin":
		return PacerSpin, nil
	case "yield":
		return PacerYield, nil
	}
	return 0, fmt.Errorf("%w: pacer %q (sleep, spin or yield)", ErrConfig, s)
}

// spinBelow: with PacerSpin and PacerYield, waits shorter than this are
// spun, longer ones sleep on a timer. (Spinning longer waits too, to beat the timer's lateness of up
// to a millisecond, was measured at 10k msg/s: it made both systems' p99
// worse, 1.3 -> 4 ms, by taking a core from them.)
const spinBelow = 50 * time.Microsecond

// Pacer issues events on an open-loop schedule: event i is due at
// Start + i/Rate, whatever happened to earlier events. If the caller stalls,
// the events that fell due meanwhile are issued back to back as soon as it
// resumes, each still carrying its own due time, so a latency measured from
// the due time includes the stall (no coordinated omission). A Pacer is used
// by one goroutine.
type Pacer struct {
	// Rate is events per second (> 0).
	Rate float64
	// Mode is how waits too short for a timer are spent.
	Mode PacerMode
	// Now and Sleep replace the clock in tests; nil means time.Now and a
	// wait that honours ctx and Mode.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// yield replaces runtime.Gosched in tests.
	yield func()
}

// Due returns the due time of event i for a schedule that starts at start.
func (p *Pacer) Due(start time.Time, i int) time.Time {
	return start.Add(time.Duration(float64(i) * float64(time.Second) / p.Rate))
}

// Run calls fn(i, due) for i = 0..n-1, each no earlier than its due time,
// starting the schedule at start. It stops early when ctx ends or fn returns
// an error, and returns that error. It returns the largest lag seen between
// an event's due time and the moment fn was called.
func (p *Pacer) Run(ctx context.Context, start time.Time, n int, fn func(i int, due time.Time) error) (maxLag time.Duration, err error) {
	now, sleep := p.Now, p.Sleep
	if now == nil {
		now = time.Now
	}
	if sleep == nil {
		sleep = p.wait
		if p.Mode == PacerSleep {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			restore := preciseSleep()
			defer restore()
		}
	}
	for i := 0; i < n; i++ {
		due := p.Due(start, i)
		t := now()
		if d := due.Sub(t); d > 0 {
			if err := sleep(ctx, d); err != nil {
				return maxLag, err
			}
			t = now()
		} else if err := ctx.Err(); err != nil {
			return maxLag, err
		}
		maxLag = max(maxLag, t.Sub(due))
		if err := fn(i, due); err != nil {
			return maxLag, err
		}
	}
	return maxLag, nil
}

// wait sleeps for d or until ctx ends, spending the time as p.Mode says.
func (p *Pacer) wait(ctx context.Context, d time.Duration) error {
	if p.Mode == PacerSleep {
		return nanosleep(ctx, d)
	}
	yield := p.yield
	if yield == nil {
		yield = runtime.Gosched
	}
	if d >= spinBelow {
		return sleepTimer(ctx, d)
	}
	if p.Mode == PacerSpin && runtime.GOMAXPROCS(0) > 1 {
		yield = nil
	}
	end := time.Now().Add(d)
	for n := 0; time.Now().Before(end); n++ {
		if n&63 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if yield != nil {
			yield()
		}
	}
	return ctx.Err()
}

// sleepTimer sleeps for d on a timer, or until ctx ends.
func sleepTimer(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// preciseSleep sets the calling thread's timer slack to 1 ns (the caller
// has locked the goroutine to its thread) and returns a function that
// restores the previous slack.
func preciseSleep() (restore func()) {
	old, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil || unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) != nil {
		return func() {}
	}
	return func() { _ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(old), 0, 0, 0) }
}

// nanosleep sleeps for d in the kernel (the thread sleeps, taking no CPU),
// in pieces of at most 10 ms so that ctx is honoured.
func nanosleep(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		ts := unix.NsecToTimespec(int64(min(left, 10*time.Millisecond)))
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
	}
}
