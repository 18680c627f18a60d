package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/wire"
)

// BenchmarkClusterChanges measures the rate of streamlet changes the whole
// path sustains on three voters: changeChannels channels rolled over by
// P workers at once, each asking a non-leader gateway (b or c, in turn)
// for a write grant after the channel's current streamlet. Each such
// grant is one change: the leader's manager seals the open streamlet at
// its host and commits one OPEN (the close and the new streamlet) while
// the next is hosted. Every node keeps its log in a data directory (fsync
// per append); closed streamlets live for changeTTL, so expiry runs too,
// and leases for a minute (no lease ends during a run: every change is a
// grant's).
//
// Reported per sub-benchmark: changes/s (grants that rolled a channel
// over, per second of the run), log-entries/s (entries the leader
// applied: the OPENs plus the expiry batches), the median and 99th
// percentile latency of one change as its gateway saw it, the process's
// CPU time per change, the share of grants that failed (a gateway would
// ask again) and the terms the log went through (a leader that lost its
// lease under the load). Each node's goroutines carry the pprof label
// node=a|b|c, so a CPU profile (-cpuprofile) splits by node: go tool
// pprof -tagfocus node=a.
func BenchmarkClusterChanges(b *testing.B) {
	dir := b.TempDir()
	nodes := startLabelled(b, []string{"a", "b", "c"}, func(o *Options) {
		o.Logger, o.TTL, o.LimitLife = nil, changeTTL, time.Minute
		o.Cluster.DataDir = filepath.Join(dir, o.ServerName)
		o.Cluster.RaftTimeout = 0 // the default, 1 s
	})
	a := nodes[0]
	lead(b, a, "a")
	eventually(b, 6*waitFor, "three voters", func() bool { return len(a.clu().Status().Raft.Voters) == 3 })
	gws := nodes[1:]
	n := 0
	b.Run("new/P=64", func(b *testing.B) {
		// New channels, 64 at once: each grant creates its channel (an
		// OPEN that takes a new epoch).
		lat := make([]time.Duration, b.N)
		var failed atomic.Int64
		base := n
		n += b.N
		applied := a.state.Applied()
		b.ResetTimer()
		t0, cpu0 := time.Now(), cpuTime()
		_ = runWorkers(64, b.N, func(w, op int) error {
			s := time.Now()
			if _, err := gws[w%2].clu().WriteGrant(fmt.Sprintf("new.%d", base+op), 0); err != nil {
				failed.Add(1)
			}
			lat[op] = time.Since(s)
			return nil
		})
		el := time.Since(t0)
		b.StopTimer()
		reportChanges(b, lat, el, cpu0, float64(b.N-int(failed.Load())), a.state.Applied()-applied)
		b.ReportMetric(float64(failed.Load())/float64(b.N), "failed-share")
	})
	chans := make([]string, changeChannels)
	grants := make([]atomic.Uint64, changeChannels) // each channel's current streamlet
	for i := range chans {
		chans[i] = fmt.Sprintf("roll.%d", i)
	}
	// Create them, 64 at a time, then one by one those that failed.
	_ = runWorkers(64, len(chans), func(_, i int) error {
		g, _ := gws[i%2].clu().WriteGrant(chans[i], 0)
		grants[i].Store(g.Streamlet)
		return nil
	})
	for i := range chans {
		for try := 0; grants[i].Load() == 0; try++ {
			g, err := gws[i%2].clu().WriteGrant(chans[i], 0)
			if err != nil && try == 10 {
				b.Fatalf("creating %s: %v", chans[i], err)
			}
			grants[i].Store(g.Streamlet)
		}
	}
	for _, p := range []int{1, 4, 16, 64, 256} {
		b.Run(fmt.Sprintf("rollover/P=%d", p), func(b *testing.B) {
			lead(b, a, "a") // back to a, had the last run's load moved it
			lat := make([]time.Duration, b.N)
			var next atomic.Int64
			var failed atomic.Int64
			term := a.clu().Leadership().Term
			applied := a.state.Applied()
			b.ResetTimer()
			t0, cpu0 := time.Now(), cpuTime()
			_ = runWorkers(p, b.N, func(w, op int) error {
				// Each worker takes the next channel in turn; the workers
				// never hold one channel at once (P <= changeChannels).
				i := int(next.Add(1)-1) % changeChannels
				s := time.Now()
				g, err := gws[w%2].clu().WriteGrant(chans[i], grants[i].Load())
				lat[op] = time.Since(s)
				if err != nil {
					// A gateway asks again at the next publish; counted.
					if failed.Add(1) == 1 {
						b.Logf("rollover of %s: %v (the first failure)", chans[i], err)
					}
					return nil
				}
				grants[i].Store(g.Streamlet)
				return nil
			})
			el := time.Since(t0)
			b.StopTimer()
			reportChanges(b, lat, el, cpu0, float64(b.N-int(failed.Load())), a.state.Applied()-applied)
			b.ReportMetric(float64(failed.Load())/float64(b.N), "failed-share")
			b.ReportMetric(float64(a.clu().Leadership().Term-term), "terms")
		})
	}
}

// reportChanges reports done changes and entries log entries applied over
// el, the process's CPU time per change since cpu0 (the three nodes and
// the workers asking), and the median and 99th percentile of lat.
func reportChanges(b *testing.B, lat []time.Duration, el, cpu0 time.Duration, done float64, entries uint64) {
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/done, "cpu-µs/change")
	slices.Sort(lat)
	b.ReportMetric(done/el.Seconds(), "changes/s")
	b.ReportMetric(float64(entries)/el.Seconds(), "log-entries/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

const (
	// changeChannels is the number of channels BenchmarkClusterChanges
	// rolls over, the design's 10,000.
	changeChannels = 10000
	// changeTTL is how long their closed streamlets live (short, so that
	// expiry runs during a run of a few seconds).
	changeTTL = 5 * time.Second
)

// cpuTime returns the CPU time this process used so far (user and
// system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runWorkers runs op for ops 0..n-1 on p goroutines (op gets the worker's
// index and the op's) and returns the first error.
func runWorkers(p, n int, op func(w, i int) error) error {
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for w := range p {
		wg.Add(1)
		go func() { // awaited below
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil {
					return
				}
				if err := op(w, i); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return *e
	}
	return nil
}

// startLabelled starts a cluster of the named nodes like startCluster,
// each node started under the pprof label node=NAME, which every goroutine
// it starts inherits (a CPU profile then splits by node).
func startLabelled(t testing.TB, names []string, mutate func(*Options)) []*Server {
	t.Helper()
	var nodes []*Server
	var seed []string
	for _, name := range names {
		pprof.Do(context.Background(), pprof.Labels("node", name), func(context.Context) {
			nodes = append(nodes, startNode(t, name, seed, mutate))
		})
		if seed == nil {
			seed = []string{nodes[0].clu().GossipAddr()}
		}
	}
	eventually(t, waitFor, "all members everywhere", func() bool {
		for _, s := range nodes {
			if s.clu().Alive() != len(nodes) {
				return false
			}
		}
		return true
	})
	waitUsable(t, nodes...)
	return nodes
}

// BenchmarkClusterLeases runs the design's case on three voters with the
// default limits: leaseChannels channels, each published to once a second
// through a non-leader gateway (20 connections, 10 on each of b and c,
// every one publishing to its channels in one write per second and
// reading their acks), so every channel's streamlet rolls over as its 4 s
// lease ends: 2,500 channels a second. The leader's tick closes a
// streamlet whose lease ended (SEAL, CLOSE) if no publish asked first
// (the grant after it then opens the next: OPEN), so a rollover is one or
// two commits. Each iteration runs leaseRun; use -benchtime 1x.
//
// Reported: rollovers/s (streamlets opened), log-entries/s, the rounds'
// latency (one connection's publishes to the last ack) p50 and p99,
// failed publishes, the process's CPU in cores, and the terms.
func BenchmarkClusterLeases(b *testing.B) {
	dir := b.TempDir()
	nodes := startLabelled(b, []string{"a", "b", "c"}, func(o *Options) {
		o.Logger, o.LimitMsgs, o.LimitLife, o.TTL = nil, 5000, 4*time.Second, 10*time.Second
		o.Cluster.DataDir = filepath.Join(dir, o.ServerName)
		o.Cluster.RaftTimeout = 0 // the default, 1 s
	})
	a := nodes[0]
	lead(b, a, "a")
	eventually(b, 6*waitFor, "three voters", func() bool { return len(a.clu().Status().Raft.Voters) == 3 })
	const conns = 20
	pubs := make([]*rawConn, conns)
	chans := make([][]string, conns)
	for i := range pubs {
		pubs[i], _ = helloRaw(b, nodes[1+i%2].Addr())
		for j := i; j < leaseChannels; j += conns {
			chans[i] = append(chans[i], fmt.Sprintf("lease.%d", j))
		}
	}
	// The channels are created first, 64 at a time (as in
	// BenchmarkClusterChanges), then one round publishes to each.
	t0 := time.Now()
	if err := runWorkers(64, leaseChannels, func(w, i int) error {
		_, err := nodes[1+w%2].clu().WriteGrant(fmt.Sprintf("lease.%d", i), 0)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d channels created in %v", leaseChannels, time.Since(t0))
	if err := runWorkers(conns, conns, func(_, i int) error { _, _, err := leaseRound(pubs[i], chans[i]); return err }); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		seq0 := seqs(a)
		applied, term := a.state.Applied(), a.clu().Leadership().Term
		t0, cpu0 := time.Now(), cpuTime()
		var mu sync.Mutex
		var rounds []time.Duration
		var failed int
		_ = runWorkers(conns, conns, func(_, i int) error {
			tk := time.NewTicker(time.Second)
			defer tk.Stop()
			for time.Since(t0) < leaseRun {
				d, f, err := leaseRound(pubs[i], chans[i])
				if err != nil {
					// Counted whole (the acks not read may come in the
					// next round: leaseRound skips earlier ones).
					d, f = time.Since(t0), len(chans[i])
					b.Logf("a round on connection %d: %v", i, err)
				}
				mu.Lock()
				rounds, failed = append(rounds, d), failed+f
				mu.Unlock()
				<-tk.C
			}
			return nil
		})
		el := time.Since(t0)
		slices.Sort(rounds)
		b.ReportMetric(float64(opened(a, seq0))/el.Seconds(), "rollovers/s")
		b.ReportMetric(float64(a.state.Applied()-applied)/el.Seconds(), "log-entries/s")
		b.ReportMetric(float64(rounds[len(rounds)/2].Milliseconds()), "round-p50-ms")
		b.ReportMetric(float64(rounds[len(rounds)*99/100].Milliseconds()), "round-p99-ms")
		b.ReportMetric(float64(failed), "failed")
		b.ReportMetric((cpuTime()-cpu0).Seconds()/el.Seconds(), "cpu-cores")
		b.ReportMetric(float64(a.clu().Leadership().Term-term), "terms")
	}
}

const (
	// leaseChannels is the design's 10,000 channels; leaseRun how long
	// one iteration of BenchmarkClusterLeases publishes.
	leaseChannels = 10000
	leaseRun      = 20 * time.Second
)

// leaseRound publishes one message to each of chans through c in one
// write and reads every answer: how long that took, and how many were
// refused (ERROR).
func leaseRound(c *rawConn, chans []string) (time.Duration, int, error) {
	t0 := time.Now()
	var out []byte
	first := c.id + 1
	for _, ch := range chans {
		out = wire.AppendPublish(out, c.nextID(), wire.FlagAck, ch, []byte("x"))
	}
	if err := c.writeErr(out); err != nil {
		return 0, 0, err
	}
	failed := 0
	for got := 0; got < len(chans); {
		h, body, err := c.tryNext(waitFor)
		if err != nil {
			return 0, 0, fmt.Errorf("waiting for acks (%d of %d): %w", got, len(chans), err)
		}
		switch h.Type {
		case wire.TypePubAck:
			acks, err := wire.DecodePubAck(body, nil)
			if err != nil {
				return 0, 0, err
			}
			for _, a := range acks {
				if a.ID >= first {
					got++
				}
			}
		case wire.TypeError:
			if h.ID >= first {
				failed++
				got++
			}
		case wire.TypeGoAway:
			return 0, 0, fmt.Errorf("publish answered by %s", describe(h, body))
		}
	}
	return time.Since(t0), failed, nil
}

// seqs returns how many streamlets each channel's incarnation opened, as
// s's state holds them.
func seqs(s *Server) map[string]uint64 {
	m := make(map[string]uint64)
	s.state.Range(func(c *meta.Channel) bool { m[c.Name] = c.Seq; return true })
	return m
}

// opened returns how many streamlets the channels opened since seqs
// returned before.
func opened(s *Server, before map[string]uint64) uint64 {
	var n uint64
	for name, seq := range seqs(s) {
		if seq > before[name] {
			n += seq - before[name]
		}
	}
	return n
}
