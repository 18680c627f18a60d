package bench

import (
	"context"
	"runtime"
	"time"
)

// Pacer issues events on an open-loop schedule: event i is due at
// Start + i/Rate, whatever happened to earlier events. If the caller stalls,
// the events that fell due meanwhile are issued back to back as soon as it
// resumes, each still carrying its own due time, so a latency measured from
// the due time includes the stall (no coordinated omission). A Pacer is used
// by one goroutine.
type Pacer struct {
	// Rate is events per second (> 0).
	Rate float64
	// Now and Sleep replace the clock in tests; nil means time.Now and a
	// timer-based sleep that honours ctx.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
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
		sleep = sleepCtx
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

// sleepCtx sleeps for d or until ctx ends. Waits under 50us spin on the
// clock (yielding), because timers cannot wake that precisely.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d < 50*time.Microsecond {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			if err := ctx.Err(); err != nil {
				return err
			}
			runtime.Gosched()
		}
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
