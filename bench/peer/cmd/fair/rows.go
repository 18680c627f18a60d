package main

import (
	"fmt"
	"time"

	"github.com/sluice-rtm/sluice/bench"
)

// A row is one line of the fair table: a workload (a package bench scenario
// spec), the receive path Sluice's subscribers use, and the regimes it is
// measured in. Every row runs in both states (fresh, steady) unless
// freshOnly.
type row struct {
	key  string // command-line name
	name string // table label
	spec string // bench.ParseSpec spec, without count
	recv bench.RecvMode
	// liveCount and overCount are the messages per publisher of the live
	// and overload regimes (0: the regime does not apply); count is the
	// count of a row without regimes (publish only).
	count, liveCount, overCount int
	// target is issue 27's Sluice/NATS target (0: none); lower is better
	// for latency and memory rows.
	target float64
	// loopback spreads the load generator's connections over this many
	// source addresses 127.0.0.1 ... (a client's ports to one server
	// address number about 28,000; Sluice limits connections per
	// address).
	loopback  int
	freshOnly bool
	note      string
}

// windowFor is the live regime's window for payloads of size bytes: 1 MiB
// of payload, at least 64 messages; far under NATS's 64 MB and Sluice's
// 8 MiB per-connection limits.
func windowFor(size int) int { return max(64, (1<<20)/max(size, 1)) }

// overMark is the backlog per subscriber (payload bytes) that marks a run
// as past the per-subscriber limits: 64 MB, NATS's max_pending and its
// client's pending-bytes limit, and eight times Sluice's outbound limit
// (past which its subscriber reads from history).
const overMark = 64 << 20

// latencyWarmup is the part of a latency run's schedule whose deliveries
// are not recorded; latencyDuration the whole schedule.
const (
	latencyWarmup   = 2 * time.Second
	latencyDuration = 12 * time.Second
)

// rows is the fair table, in order. The headline rows use Subscribe with
// Next (the SDK's default path); "1:1 128 B, Sluice Events" and "1:1
// 128 B, Sluice SubscribeFunc" are the other receive paths.
var rows = []row{
	{key: "pub16", name: "publish only 16 B", spec: "pub/size=16", recv: next, count: 4_000_000, target: 1.5},
	{key: "pubsub128", name: "1:1 128 B", spec: "pubsub/size=128", recv: next,
		liveCount: 2_000_000, overCount: 30_000_000, target: 2},
	{key: "pubsub1k", name: "1:1 1 KiB", spec: "pubsub/size=1024", recv: next,
		liveCount: 500_000, overCount: 6_000_000, target: 1.5},
	{key: "pubsub16k", name: "1:1 16 KiB", spec: "pubsub/size=16384", recv: next,
		liveCount: 60_000, overCount: 500_000, target: 1.2},
	{key: "fanout100", name: "1:100 fan-out 128 B", spec: "fanout/size=128,subs=100", recv: next,
		liveCount: 200_000, overCount: 3_000_000, target: 3},
	{key: "chan10k-conns", name: "10,000 channels, 10,000 connections (1 each) 128 B", spec: "nm/size=128,pubs=1,subs=10000,channels=10000",
		recv: next, liveCount: 1_000_000, target: 1.5, loopback: 16,
		note: "no overload regime: a connection gets one message in 10,000, so its backlog never nears a per-connection limit"},
	{key: "chan10k-subs", name: "10,000 channels, 20 connections x 500 subscriptions 128 B", spec: "nm/size=128,pubs=1,subs=20,channels=10000",
		recv: next, liveCount: 1_000_000, overCount: 30_000_000, target: 1.5},
	{key: "latency", name: "latency p99 @ 50,000 msg/s 128 B", spec: "latency/size=128,rate=50000", recv: next, target: 0.8},
	{key: "pubsub128-events", name: "1:1 128 B, Sluice Events", spec: "pubsub/size=128", recv: bench.RecvEvents,
		liveCount: 2_000_000, overCount: 30_000_000},
	{key: "pubsub128-func", name: "1:1 128 B, Sluice SubscribeFunc", spec: "pubsub/size=128", recv: bench.RecvFunc,
		liveCount: 2_000_000, overCount: 30_000_000},
	{key: "idle", name: "idle connection memory", spec: "idle/conns=2000", recv: next, loopback: 4, freshOnly: true},
}

// next is the headline rows' receive path.
const next = bench.RecvNext

// regime is one way a row is measured.
type regime string

const (
	regimeOnce     regime = "-" // rows without live/overload (publish only, latency, idle)
	regimeLive     regime = "live"
	regimeOverload regime = "overload"
)

// regimes returns the regimes r is measured in, of those wanted.
func (r row) regimes(want map[regime]bool) []regime {
	if r.liveCount == 0 && r.overCount == 0 {
		return []regime{regimeOnce}
	}
	var out []regime
	if r.liveCount > 0 && want[regimeLive] {
		out = append(out, regimeLive)
	}
	if r.overCount > 0 && want[regimeOverload] {
		out = append(out, regimeOverload)
	}
	return out
}

// config returns the bench scenario and configuration of r in regime g,
// with counts scaled by scale (--scale: shorter runs for a look).
func (r row) config(g regime, scale float64) (string, bench.Config, error) {
	name, c, err := bench.ParseSpec(r.spec, bench.Config{})
	if err != nil {
		return "", c, fmt.Errorf("row %s: %w", r.key, err)
	}
	n := func(v int) int { return max(1, int(float64(v)*scale)) }
	switch g {
	case regimeLive:
		c.Count, c.Live = n(r.liveCount), windowFor(c.Size)
	case regimeOverload:
		c.Count = n(r.overCount)
	default:
		if r.count > 0 {
			c.Count = n(r.count)
		}
	}
	c.OverMark = overMark
	c.Duration = 10 * time.Minute // the counts bound the runs, not time
	if name == "latency" {
		c.Duration, c.Warmup = latencyDuration, latencyWarmup
	}
	if name == "idle" {
		c.Conns = n(c.Conns)
	}
	c.Stall = 5 * time.Second
	return name, c, nil
}
