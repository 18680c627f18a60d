package engine

import (
	"encoding/binary"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// BenchmarkPresenceJoin measures a join and a leave on one node (one
// loop) as a client makes them: SUBSCRIBE with FlagPresence, SUBSCRIBED,
// UNSUBSCRIBE, UNSUBSCRIBED; with w event subscriptions watching the
// channel on another connection, whose reader takes the PRESENCE_EVENT
// frames. "plain" is the same subscription without FlagPresence, the
// baseline; "paused" has w watchers and more members than EventsMax, so
// the watchers get OCCUPANCY once per interval instead of events. It
// reports the process's CPU per join and leave (server and clients, from
// getrusage), and the changes and frames the watchers got per join.
func BenchmarkPresenceJoin(b *testing.B) {
	for _, c := range []struct {
		name     string
		flags    wire.Flags
		watchers int
		paused   bool
	}{
		{"plain", 0, 0, false},
		{"watchers=0", wire.FlagPresence, 0, false},
		{"watchers=1", wire.FlagPresence, 1, false},
		{"watchers=100", wire.FlagPresence, 100, false},
		{"watchers=1000", wire.FlagPresence, 1000, false},
		{"watchers=1000/paused", wire.FlagPresence, 1000, true},
	} {
		b.Run(c.name, func(b *testing.B) { benchJoin(b, c.flags, c.watchers, c.paused) })
	}
}

func benchJoin(b *testing.B, flags wire.Flags, watchers int, paused bool) {
	s := startTest(b, func(o *Options) {
		o.Presence.EventsMax, o.Presence.MaxMembers = 1_000_000, 1_000_000
		if paused {
			o.Presence.EventsMax = 10
		}
		o.Loops = 1
	})
	if paused {
		for range 20 { // members past EventsMax
			presHello(b, s.Addr()).psubscribe(1, "bench.room", wire.FlagPresence)
		}
	}
	var changes, frames atomic.Int64
	if watchers > 0 {
		wc := presHello(b, s.Addr())
		for i := range watchers {
			wc.psubscribe(uint32(i+1), "bench.room", wire.FlagPresenceEvents)
		}
		go func() {
			for {
				h, body, err := wc.r.Next()
				if err != nil {
					return
				}
				if h.Type == wire.TypePresenceEvent && len(body) >= 2 {
					frames.Add(1)
					changes.Add(int64(binary.BigEndian.Uint16(body)))
				}
			}
		}()
	}
	j := presHello(b, s.Addr())
	cpu0 := cpuNow()
	b.ResetTimer()
	for range b.N {
		j.psubscribe(1, "bench.room", flags)
		j.unsubscribe(1)
	}
	if watchers > 0 && !paused {
		want := int64(2 * b.N * watchers)
		eventually(b, waitFor, "every watcher got every join and leave", func() bool { return changes.Load() >= want })
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuNow()-cpu0)/float64(b.N), "cpu-ns/join")
	b.ReportMetric(float64(changes.Load())/float64(b.N), "changes/join")
	b.ReportMetric(float64(frames.Load())/float64(b.N), "frames/join")
}

// cpuNow returns the process's CPU time (user and system), in ns.
func cpuNow() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
