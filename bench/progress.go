package bench

import (
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"
)

// Progress counts a run's work for a live progress bar. Scenarios set Total
// (the expected number of operations) and add to Done; any goroutine may
// read them. A nil *Progress is valid and counts nothing.
type Progress struct {
	total atomic.Int64
	done  atomic.Int64
	phase atomic.Value // string
	label atomic.Value // string
}

// SetLabel sets a prefix shown before the phase, e.g. "nats pubsub".
func (p *Progress) SetLabel(label string) {
	if p != nil {
		p.label.Store(label)
	}
}

// reset starts a new phase of total operations.
func (p *Progress) reset(phase string, total int64) {
	if p == nil {
		return
	}
	p.phase.Store(phase)
	p.total.Store(total)
	p.done.Store(0)
}

// add counts n operations.
func (p *Progress) add(n int64) {
	if p != nil {
		p.done.Add(n)
	}
}

// Snapshot returns the current label and phase, operations done and
// expected.
func (p *Progress) Snapshot() (phase string, done, total int64) {
	if p == nil {
		return "", 0, 0
	}
	phase, _ = p.phase.Load().(string)
	if label, _ := p.label.Load().(string); label != "" {
		phase = label + " " + phase
	}
	return phase, p.done.Load(), p.total.Load()
}

// ShowProgress draws p as a one-line bar on w (a terminal: it rewrites the
// line with '\r') every interval, starting only after delay so short runs
// print nothing. The returned stop function erases the line and must be
// called once; it waits for the drawing goroutine to exit.
func ShowProgress(w io.Writer, p *Progress, delay, interval time.Duration) (stop func()) {
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		start := time.Now()
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-quit:
			return
		}
		tick := time.NewTicker(interval)
		defer tick.Stop()
		drawn := false
		var lastDone int64 // the first rate is the average since start
		lastT := start
		for {
			phase, done, total := p.Snapshot()
			now := time.Now()
			var rate float64
			if dt := now.Sub(lastT).Seconds(); dt > 0 && done >= lastDone {
				rate = float64(done-lastDone) / dt
			}
			lastDone, lastT = done, now
			fmt.Fprintf(w, "\r%s\r%s", strings.Repeat(" ", 79), progressLine(phase, done, total, rate, now.Sub(start)))
			drawn = true
			select {
			case <-tick.C:
			case <-quit:
				if drawn {
					fmt.Fprintf(w, "\r%s\r", strings.Repeat(" ", 79))
				}
				return
			}
		}
	}()
	return func() { close(quit); <-exited }
}

// progressLine renders one bar of at most 79 columns.
func progressLine(phase string, done, total int64, rate float64, elapsed time.Duration) string {
	const width = 24
	frac := 0.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	n := int(frac * width)
	bar := strings.Repeat("=", n) + strings.Repeat(" ", width-n)
	if n < width && n > 0 {
		bar = strings.Repeat("=", n-1) + ">" + strings.Repeat(" ", width-n)
	}
	if len(phase) > 24 {
		phase = phase[:24]
	}
	return fmt.Sprintf("%-24s [%s] %3.0f%% %8s/s %5.1fs", phase, bar, frac*100, humanCount(rate), elapsed.Seconds())
}

// humanCount formats n with a k/M/G suffix.
func humanCount(n float64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fG", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", n/1e3)
	}
	return fmt.Sprintf("%.0f", n)
}
