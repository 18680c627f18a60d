package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// PacerMode says how a Pacer spends a wait too short for a timer.
type PacerMode uint8

const (
	// PacerSpin spins on the clock without yielding while the process has
	// more than one P (GOMAXPROCS > 1): the pacer keeps one P, and the
	// others stay free to run the client under test and to wait in the
	// network poller, so a socket that becomes readable is served at once.
	// With one P it behaves as PacerYield (a spin that never yields would
	// starve the client).
	PacerSpin PacerMode = iota
	// PacerYield spins calling runtime.Gosched between clock reads (the
	// generator's only behaviour until 2026-11-29; BENCHMARKS.md compares
	// the two). Each Gosched puts the pacer on the global run queue, where
	// a P looking for work finds it before it would poll the network;
	// measured, both clients then receive later (at 50k msg/s p50 1.2-1.8
	// ms instead of 0.2-0.9 ms).
	PacerYield
)

// String returns "spin" or "yield".
func (m PacerMode) String() string {
	if m == PacerYield {
		return "yield"
	}
	return "spin"
}

// MarshalText encodes the mode as its name (JSON results).
func (m PacerMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText decodes a mode's name.
func (m *PacerMode) UnmarshalText(b []byte) error {
	v, err := ParsePacerMode(string(b))
	*m = v
	return err
}

// ParsePacerMode parses "spin" or "yield".
func ParsePacerMode(s string) (PacerMode, error) {
	switch s {
	case "spin":
		return PacerSpin, nil
	case "yield":
		return PacerYield, nil
	}
	return 0, fmt.Errorf("%w: pacer %q (spin or yield)", ErrConfig, s)
}

// spinBelow: waits shorter than this are spun, longer ones sleep on a
// timer. (Spinning longer waits too, to beat the timer's lateness of up
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
