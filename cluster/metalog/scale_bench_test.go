package metalog

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/metaload"
)

// envInt reads an integer knob of the scale benchmark from the
// environment.
func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// paced proposes at rate commands/s for d from p goroutines and returns
// each proposal's latency from when it was due (so a stall of the log
// shows in the latency of everything due meanwhile), the worst latency of
// the proposals due in each second of the run, and how many were due
// while a second of them already waited (dropped).
func (pr *proposer) paced(tb testing.TB, rate int, d time.Duration, p int) (lat, worst []time.Duration, dropped int) {
	tb.Helper()
	due := make(chan time.Time, rate)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs atomic.Int64
	start := time.Now()
	worst = make([]time.Duration, int(d/time.Second)+1)
	for range p {
		wg.Go(func() {
			var mine []time.Duration
			for t := range due {
				b, _ := pr.next(0)
				if err := pr.propose(b); err != nil {
					errs.Add(1)
					continue
				}
				l := time.Since(t)
				mine = append(mine, l)
				sec := min(int(t.Sub(start)/time.Second), len(worst)-1)
				mu.Lock()
				worst[sec] = max(worst[sec], l)
				mu.Unlock()
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	const tick = 10 * time.Millisecond
	tk := time.NewTicker(tick)
	sent := 0
	for now := range tk.C {
		el := now.Sub(start)
		if el >= d {
			break
		}
		for want := int(el.Seconds() * float64(rate)); sent < want; sent++ {
			select {
			case due <- now:
			default:
				dropped++
			}
		}
	}
	tk.Stop()
	close(due)
	wg.Wait()
	if n := errs.Load(); n > 0 {
		tb.Fatalf("%d proposals failed", n)
	}
	slices.Sort(lat)
	return lat, worst, dropped
}

// dirStats follows the nodes' data directories and logs: sampled every
// second by sample's goroutine, stopped by stop.
type dirStats struct {
	mu                       sync.Mutex
	maxTotal, maxSeg, maxSnp int64
	maxSegs, maxSnaps        int
	maxPartial               int
	maxLog                   uint64 // entries in a log store
	maxAfterSnap             uint64 // entries after the latest snapshot
	lines                    []string
}

func (s *dirStats) sample(tb testing.TB, c *testCluster, every time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tk := time.NewTicker(every)
	defer tk.Stop()
	start := time.Now()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		var parts []string
		for _, n := range c.live() {
			if n.log == nil {
				continue
			}
			d := measureDir(tb, n.dir)
			st := n.log.Status()
			s.mu.Lock()
			s.maxTotal, s.maxSeg, s.maxSnp = max(s.maxTotal, d.total), max(s.maxSeg, d.segBytes), max(s.maxSnp, d.snapBytes)
			s.maxSegs, s.maxSnaps, s.maxPartial = max(s.maxSegs, d.segments), max(s.maxSnaps, d.snapshots), max(s.maxPartial, d.partial)
			if st.FirstIndex > 0 {
				s.maxLog = max(s.maxLog, st.LastIndex-st.FirstIndex+1)
			}
			s.maxAfterSnap = max(s.maxAfterSnap, st.LastIndex-st.SnapshotIndex)
			s.mu.Unlock()
			parts = append(parts, fmt.Sprintf("%s: %.1f MB (%d seg, %d snap%s) log %d..%d snap %d", n.name, float64(d.total)/1e6,
				d.segments, d.snapshots, strings.Repeat("+tmp", d.partial), st.FirstIndex, st.LastIndex, st.SnapshotIndex))
		}
		s.mu.Lock()
		s.lines = append(s.lines, fmt.Sprintf("%4.0fs  %s", time.Since(start).Seconds(), strings.Join(parts, " | ")))
		s.mu.Unlock()
	}
}

// BenchmarkRaft3_Meta100k: three voters at the production settings
// (timings, SnapshotInterval 20 s, SnapshotThreshold 16,384, TrailingLogs
// 10,240, SnapshotRetain 2, 16 MiB segments) with package meta's state
// machine, on loopback, each in a data directory of its own; run once
// (-benchtime 1x), it takes several minutes. Knobs (environment):
// METALOG_SCALE_CHANNELS (100,000), _KEEP (streamlets per channel, 6),
// _RATE (rollovers/s in the steady phases, 2,500), _STEADY (seconds per
// steady phase, 90).
//
//  1. fill: every channel opens Keep streamlets of two replicas
//     (metaload; names of 22 bytes), 256 proposals in flight;
//     then every node's snapshot catches up with it (settle);
//  2. steady: every channel keeps rolling over at _RATE (an OPEN each,
//     and EXPIREs of 256), the data directories sampled every second;
//     once with snapshots as package cluster takes them (a pointer per
//     channel captured, encoded by Persist) and once encoding on the FSM
//     goroutine (the way before), the same run; the worst latency of
//     each second's proposals shows when the log stalled;
//  3. restart: a follower shut down and started again with its
//     directory: restart-s until it has applied what the leader had;
//  4. wipe: a follower shut down, its directory removed, started again
//     (a new server, brought up by a snapshot install): wiped-s likewise.
func BenchmarkRaft3_Meta100k(b *testing.B) {
	chans := envInt(b, "METALOG_SCALE_CHANNELS", 100_000)
	keep := envInt(b, "METALOG_SCALE_KEEP", 6)
	rate := envInt(b, "METALOG_SCALE_RATE", 2500)
	steady := time.Duration(envInt(b, "METALOG_SCALE_STEADY", 90)) * time.Second
	for b.Loop() {
		scaleRun(b, chans, keep, rate, steady)
	}
}

func scaleRun(b *testing.B, chans, keep, rate int, steady time.Duration) {
	c := newTestCluster(b, func(cfg *Config) {
		defaultTimings(cfg)
		cfg.StableAfter = 100 * time.Millisecond
	})
	c.newApp = func() FSM { return newMetaFSM() }
	c.startAll(true, "a", "b", "c")
	c.waitVoters("a", "b", "c")
	pr := newProposer(metaload.New(metaload.Config{Channels: chans, Keep: keep}), func() Log { return c.leader().log })

	// 1. Fill.
	start := time.Now()
	last := pr.run(b, 0, uint64(chans*keep), 256)
	fill := time.Since(start)
	b.Logf("fill: %d commands (%d OPENs) in %v: %.0f commits/s, %d retried on a new leader", last, chans*keep, fill.Round(time.Millisecond),
		float64(last)/fill.Seconds(), pr.retries.Load())
	// The fill outruns the snapshots (a log of 200,000 entries and more
	// behind each): every node takes one of the whole state before the
	// steady phases, so that the first does not inherit the fill's
	// backlog.
	settle := time.Now()
	threshold := Config{}.withDefaults().SnapshotThreshold
	waitFor(b, 5*time.Minute, "every node's snapshot to catch up with the fill", func() bool {
		for _, n := range c.live() {
			if st := n.log.Status(); st.LastIndex-st.SnapshotIndex >= threshold {
				return false
			}
		}
		return true
	})
	b.Logf("settle: every node's latest snapshot within %d entries of its log's end after %v", threshold, time.Since(settle).Round(time.Millisecond))

	// 2. Steady, both ways.
	for _, eager := range []bool{false, true} {
		scaleSteady(b, c, pr, rate, steady, eager)
	}
	for _, n := range c.live() {
		n.app.(*metaFSM).eager.Store(false)
	}
	// 3. A follower restarted with its directory; 4. one that lost it.
	for _, wipe := range []bool{false, true} {
		scaleRestart(b, c, wipe)
	}
}

// quantile returns the q quantile of the sorted l (0 when empty).
func quantile(l []time.Duration, q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(int(float64(len(l))*q), len(l)-1)]
}

// scaleSteady runs a steady phase of BenchmarkRaft3_Meta100k: snapshots
// captured (eager false) or encoded on the FSM goroutine (eager true).
func scaleSteady(b *testing.B, c *testCluster, pr *proposer, rate int, steady time.Duration, eager bool) {
	for _, n := range c.live() {
		n.app.(*metaFSM).eager.Store(eager)
	}
	var ds dirStats
	stop, done := make(chan struct{}), make(chan struct{})
	capBefore := map[string]int{}
	for _, n := range c.live() {
		cp, _, _ := n.app.(*metaFSM).timings()
		capBefore[n.name] = len(cp)
	}
	go ds.sample(b, c, time.Second, stop, done)
	lat, worst, dropped := pr.paced(b, rate, steady, 256)
	close(stop)
	<-done
	var captures, persists []time.Duration
	for _, n := range c.live() {
		cp, ps, _ := n.app.(*metaFSM).timings()
		captures = append(captures, cp[capBefore[n.name]:]...)
		persists = append(persists, ps[min(capBefore[n.name], len(ps)):]...)
	}
	slices.Sort(captures)
	slices.Sort(persists)
	way := "captured"
	if eager {
		way = "eager"
	}
	b.Logf("steady (%s): %d proposals at %d/s for %v (%d dropped: more than a second behind); latency p50 %v p99 %v p999 %v max %v",
		way, len(lat), rate, steady, dropped, quantile(lat, 0.5), quantile(lat, 0.99), quantile(lat, 0.999), quantile(lat, 1))
	b.Logf("steady (%s): %d snapshots on the three nodes; capture (no Apply meanwhile) median %v max %v; persist median %v max %v",
		way, len(captures), quantile(captures, 0.5), quantile(captures, 1), quantile(persists, 0.5), quantile(persists, 1))
	b.Logf("steady (%s): per node at most %.1f MB in all, %.1f MB of WAL in %d segments, %.1f MB of snapshots in %d (+%d partial); log entries at most %d, after the latest snapshot at most %d",
		way, float64(ds.maxTotal)/1e6, float64(ds.maxSeg)/1e6, ds.maxSegs, float64(ds.maxSnp)/1e6, ds.maxSnaps, ds.maxPartial, ds.maxLog, ds.maxAfterSnap)
	var ws []string
	for _, w := range worst {
		ws = append(ws, strconv.FormatInt(w.Milliseconds(), 10))
	}
	b.Logf("steady (%s): the worst latency of the proposals due in each second, ms: %s", way, strings.Join(ws, " "))
	for i, l := range ds.lines {
		if i%10 == 0 || i == len(ds.lines)-1 {
			b.Log(l)
		}
	}
	if !eager {
		b.ReportMetric(float64(ds.maxTotal)/1e6, "dir-max-MB")
		b.ReportMetric(float64(quantile(captures, 1).Microseconds())/1000, "capture-max-ms")
		b.ReportMetric(float64(quantile(lat, 0.999).Microseconds())/1000, "p999-ms")
	} else {
		b.ReportMetric(float64(quantile(captures, 1).Microseconds())/1000, "eager-capture-max-ms")
		b.ReportMetric(float64(quantile(lat, 0.999).Microseconds())/1000, "eager-p999-ms")
	}
}

// scaleRestart shuts a follower down and starts it again, with its
// directory or (wipe) without it, and waits until it has applied what
// the leader had.
func scaleRestart(b *testing.B, c *testCluster, wipe bool) {
	l := c.leader()
	var f *testNode
	for _, n := range c.live() {
		if n != l {
			f = n
		}
	}
	target := l.app.(*metaFSM).st.Applied()
	c.kill(f)
	if wipe {
		if err := os.RemoveAll(f.dir); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	c.start(f.name, true, nil)
	opened := time.Since(start)
	st := f.app.(*metaFSM).st
	snapIdx := f.log.Status().SnapshotIndex
	waitFor(b, 10*time.Minute, "the node to apply what the leader had", func() bool { return st.Applied() >= target })
	took := time.Since(start)
	_, _, restores := f.app.(*metaFSM).timings()
	snapIdxNow := f.log.Status().SnapshotIndex
	what, unit := "restart with its directory", "restart-s"
	if wipe {
		what, unit = "restart without its directory (a new server)", "wiped-s"
		snapIdx = snapIdxNow
	}
	b.Logf("%s: NewRaft %v, applied the leader's index %d after %v; snapshot at %d restored in %v, %d entries after it replayed; %d channels",
		what, opened.Round(time.Millisecond), target, took.Round(time.Millisecond), snapIdx, restores, target-snapIdx, st.Len())
	b.ReportMetric(took.Seconds(), unit)
	if st.Len() != l.app.(*metaFSM).st.Len() {
		b.Fatalf("%d channels, the leader has %d", st.Len(), l.app.(*metaFSM).st.Len())
	}
}
