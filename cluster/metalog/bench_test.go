package metalog

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
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
		d := Config{}.withDefaults()
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout
		cfg.CommitTimeout, cfg.ReconcileInterval, cfg.SegmentSize = d.CommitTimeout, 50*time.Millisecond, d.SegmentSize
		cfg.StableAfter = 100 * time.Millisecond // a quick start; no effect on the rate
		cfg.Logger = nil
	})
	c.startAll(true, "a", "b", "c")
	c.waitVoters("a", "b", "c")
	l := c.leader()
	for _, p := range []int{1, 16, 64, 256, 1024} {
		b.Run(fmt.Sprintf("proposers=%d", p), func(b *testing.B) { benchPropose(b, l.log, p) })
	}
}

// benchPropose runs b.N proposals from p goroutines.
func benchPropose(b *testing.B, log Log, p int) {
	ctx := context.Background()
	var next atomic.Int64
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
				if _, _, err := log.Propose(ctx, benchCmd); err != nil {
					b.Error(err)
					return
				}
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
	}
}
