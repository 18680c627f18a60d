package metalog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countFSM is the benchmarks' state machine: it counts commands and
// answers a constant, so the benchmarks measure the log, not the FSM.
type countFSM struct{ n atomic.Uint64 }

var okResult = []byte("ok")

func (f *countFSM) Apply(uint64, []byte) []byte { f.n.Add(1); return okResult }

func (f *countFSM) Snapshot() (Snapshot, error) { return countSnap(f.n.Load()), nil }

func (f *countFSM) Restore(r io.Reader) error {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return err
	}
	f.n.Store(binary.BigEndian.Uint64(b[:]))
	return nil
}

type countSnap uint64

func (s countSnap) Persist(w io.Writer) error {
	_, err := w.Write(binary.BigEndian.AppendUint64(nil, uint64(s)))
	return err
}

func (countSnap) Release() {}

// benchCmd is a ~100-byte command, the size of a streamlet change.
var benchCmd = make([]byte, 100)

// BenchmarkSingle_Propose: the single-node log, one proposer and all
// cores proposing; each op is one command applied.
func BenchmarkSingle_Propose(b *testing.B) {
	ctx := context.Background()
	b.Run("proposers=1", func(b *testing.B) {
		s := NewSingle("a", &countFSM{}, 0)
		b.ReportAllocs()
		b.SetBytes(int64(len(benchCmd)))
		for b.Loop() {
			if _, _, err := s.Propose(ctx, benchCmd); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		s := NewSingle("a", &countFSM{}, 0)
		b.ReportAllocs()
		b.SetBytes(int64(len(benchCmd)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := s.Propose(ctx, benchCmd); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkRaft3_Propose: three voters on loopback, each with its WAL and
// snapshots in a temporary directory (fsync on every append), the default
// timings; ~100-byte commands from many concurrent proposers on the
// leader. Each op is one command committed and applied on the leader;
// commits/s is the sustained rate, p50-ms and p99-ms the latency of one
// Propose. The sweep over proposers shows where it saturates.
func BenchmarkRaft3_Propose(b *testing.B) {
	c := newTestCluster(b, func(cfg *Config) {
		defaultTimings(cfg)
		cfg.StableAfter = 100 * time.Millisecond // a quick start; no effect on the rate
	})
	c.startAll(true, "a", "b", "c")
	c.waitVoters("a", "b", "c")
	for _, p := range []int{1, 16, 32, 64, 256, 1024} {
		b.Run(fmt.Sprintf("proposers=%d", p), func(b *testing.B) { benchPropose(b, c, p) })
	}
}

// benchPropose runs b.N proposals from p goroutines. A proposal that
// fails because the leadership moved (an election on an overloaded
// machine) is retried on the new leader and counted in retries.
func benchPropose(b *testing.B, c *testCluster, p int) {
	ctx := context.Background()
	var next, lost atomic.Int64
	var cur atomic.Pointer[Raft]
	cur.Store(c.leader().log)
	propose := func() {
		for {
			l := cur.Load()
			_, _, err := l.Propose(ctx, benchCmd)
			if err == nil {
				return
			}
			if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrLeadershipLost) {
				b.Error(err)
				return
			}
			lost.Add(1)
			cur.CompareAndSwap(l, c.leader().log)
		}
	}
	lat := make([][]time.Duration, p)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchCmd)))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range p {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				propose()
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(len(all))/elapsed.Seconds(), "commits/s")
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(lost.Load()), "retries")
	}
}

// defaultTimings makes a test cluster use the production timings (the
// test harness shortens them).
func defaultTimings(cfg *Config) {
	d := Config{}.withDefaults()
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout
	cfg.CommitTimeout, cfg.SegmentSize, cfg.DeadAfter = d.CommitTimeout, d.SegmentSize, d.DeadAfter
}

// BenchmarkRaft3_Failover: three voters with the default timings; each op
// shuts the leader down and waits until another node leads and has
// applied everything committed before (Barrier); then the old leader is
// restarted from its directory and caught up before the next op.
// failover-ms is the mean of those waits, max-ms the longest.
func BenchmarkRaft3_Failover(b *testing.B) {
	c := newTestCluster(b, func(cfg *Config) {
		defaultTimings(cfg)
		cfg.StableAfter = 100 * time.Millisecond
	})
	c.startAll(true, "a", "b", "c")
	c.waitVoters("a", "b", "c")
	var total, longest time.Duration
	n := 0
	for b.Loop() {
		old := c.leader()
		c.propose(setCmd("k", fmt.Sprint(n)))
		start := time.Now()
		c.kill(old)
		l := c.leader()
		d := time.Since(start)
		total += d
		longest = max(longest, d)
		n++
		b.StopTimer()
		if l == old {
			b.Fatal("the dead node leads")
		}
		c.start(old.name, true, nil)
		c.waitState(map[string]string{"k": fmt.Sprint(n - 1)})
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(n), "failover-ms")
	b.ReportMetric(float64(longest.Milliseconds()), "max-ms")
}

// BenchmarkRaft1_Restart100k: one node with its directory holds 100,000
// keys of ~150 bytes (one command each, then a snapshot, as the snapshot
// interval takes one); each op shuts it down and starts it again until its
// FSM holds every key. restore-ms is the time NewRaft took (it restores the
// latest snapshot), dir-MB the data directory's size, snapshots-MB the
// part of it that is snapshots (the rest is the WAL and its metadata).
func BenchmarkRaft1_Restart100k(b *testing.B) {
	const keys = 100_000
	c := newTestCluster(b, defaultTimings)
	a := c.start("a", true, nil)
	l := c.leader()
	val := strings.Repeat("v", 140)
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 256 {
		wg.Go(func() {
			for i := next.Add(1); i <= keys; i = next.Add(1) {
				if _, _, err := l.log.Propose(context.Background(), setCmd(fmt.Sprintf("k%06d", i), val)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := l.log.raft.Snapshot().Error(); err != nil { // as the snapshot interval would
		b.Fatal(err)
	}
	var restore time.Duration
	for b.Loop() {
		c.kill(a)
		start := time.Now()
		c.start("a", true, nil)
		restore += time.Since(start)
		waitFor(b, testTimeout, "every key back", func() bool { return len(a.fsm.state()) == keys })
	}
	b.ReportMetric(float64(restore.Milliseconds())/float64(b.N), "restore-ms")
	b.ReportMetric(float64(dirSize(b, a.dir))/(1<<20), "dir-MB")
	b.ReportMetric(float64(dirSize(b, filepath.Join(a.dir, "snapshots")))/(1<<20), "snapshots-MB")
}

func dirSize(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
