package bench

import (
	"context"
	"sync/atomic"
	"time"
)

// Two regimes of a throughput run (runThroughput), set by Config.Live:
//
//   - live (Live > 0): the publishers never run more than Live messages
//     ahead of the subscriber that is furthest behind (on one channel), or
//     of the average subscriber (over many channels), so no subscriber's
//     backlog grows past Live messages: with Live*Size under both systems'
//     per-subscriber limits, nothing is dropped, skipped or read from
//     history for being slow. It measures the rate at which a system
//     delivers everything while keeping up.
//   - overload (Live == 0): the publishers publish as fast as the system
//     takes the messages. Backlogs grow past the per-subscriber limits;
//     Config.OverMark (bytes of backlog per subscriber) marks when a run is
//     past them, and Result.Overload says for how long it was.
//
// A flowMonitor samples the counters every flowTick during the run: it
// publishes the live regime's allowance, and times the overload.

// flowTick is how often a flowMonitor samples the counters.
const flowTick = 500 * time.Microsecond

// flowMonitor watches one throughput run.
type flowMonitor struct {
	published atomic.Int64 // messages published so far, by every publisher
	allowed   atomic.Int64 // live: publishers may publish while published < allowed
	counters  []*counter
	oneChan   bool    // one channel: every subscriber gets every message
	perPub    float64 // deliveries expected per message published, per subscriber
	live      int64
	overMark  float64 // bytes of backlog per subscriber past which the run is overloaded
	size      float64

	overload   time.Duration // time with a backlog past overMark (monitor goroutine, then read after stop)
	maxBacklog float64       // largest backlog per subscriber seen, bytes
	stopped    chan struct{}
	done       chan struct{}
}

// newFlowMonitor makes the monitor of a run of c with these subscriber
// counters, expecting expected deliveries of total messages published.
func newFlowMonitor(c Config, counters []*counter, expected, total int64) *flowMonitor {
	m := &flowMonitor{counters: counters, oneChan: c.Channels == 1, live: int64(c.Live),
		overMark: float64(c.OverMark), size: float64(c.Size), stopped: make(chan struct{}), done: make(chan struct{})}
	if len(counters) > 0 && total > 0 {
		m.perPub = float64(expected) / float64(total) / float64(len(counters))
	}
	m.allowed.Store(max(m.live, 1))
	return m
}

// start runs the monitor until stop.
func (m *flowMonitor) start() {
	go func() {
		defer close(m.done)
		t := time.NewTicker(flowTick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-m.stopped:
				return
			case now := <-t.C:
				m.sample(now.Sub(last))
				last = now
			}
		}
	}()
}

// stop ends the monitor and waits for it; its fields are then final.
func (m *flowMonitor) stop() {
	close(m.stopped)
	<-m.done
}

// sample updates the allowance and the overload time from the counters;
// dt is the time since the last sample.
func (m *flowMonitor) sample(dt time.Duration) {
	if len(m.counters) == 0 {
		m.allowed.Store(1 << 62)
		return
	}
	pub := m.published.Load()
	// behind: messages the subscriber furthest behind (one channel) or the
	// average subscriber (many channels) has yet to receive.
	var behind float64
	if m.oneChan {
		least := m.counters[0].n.Load()
		for _, k := range m.counters[1:] {
			least = min(least, k.n.Load())
		}
		behind = float64(pub) - float64(least)
	} else {
		var sum int64
		for _, k := range m.counters {
			sum += k.n.Load()
		}
		behind = float64(pub)*m.perPub - float64(sum)/float64(len(m.counters))
	}
	if m.live > 0 {
		// Published may grow while at most live messages per subscriber
		// are still to be delivered.
		room := float64(m.live) - max(behind, 0)
		if m.perPub > 0 && !m.oneChan {
			room /= m.perPub
		}
		m.allowed.Store(pub + int64(max(room, 0)))
	}
	backlog := max(behind, 0) * m.size
	m.maxBacklog = max(m.maxBacklog, backlog)
	if m.overMark > 0 && backlog > m.overMark {
		m.overload += dt
	}
}

// wait blocks a publisher of the live regime until published is below the
// allowance, or ctx ends; it reports false in the latter case.
func (m *flowMonitor) wait(ctx context.Context) bool {
	if m.live <= 0 {
		return true
	}
	for m.published.Load() >= m.allowed.Load() {
		if ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
	return true
}
