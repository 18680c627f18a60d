package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// BenchmarkDrainCopy measures how fast a draining node's history moves
// to the other nodes (the copies of its sealed streamlets, OP_COPY over
// NODE_READ/NODE_FEED), against, in the same run, a subscriber on another
// node replaying the whole channel from its start over the same node
// links (its node's copies read from both hosts). Each iteration builds a
// 3-node cluster on loopback, publishes mb MiB of 1 KiB messages to a
// channel managed by a (so its streamlets are on b and c), then replays
// the channel from node a (baseline) and drains c. Reported: copy MB/s
// (bytes c held / drain time), replay MB/s (all bytes / replay time), and
// their ratio. Run with -benchtime=1x.
func BenchmarkDrainCopy(b *testing.B) {
	for _, mb := range []int{16, 64} {
		b.Run(fmt.Sprintf("MiB=%d", mb), func(b *testing.B) {
			b.ReportAllocs()
			var copyRate, readRate float64
			for range b.N {
				c, r := drainCopyOnce(b, mb)
				copyRate += c
				readRate += r
			}
			copyRate /= float64(b.N)
			readRate /= float64(b.N)
			b.ReportMetric(copyRate, "copy-MB/s")
			b.ReportMetric(readRate, "replay-MB/s")
			b.ReportMetric(copyRate/readRate, "copy/replay")
		})
	}
}

func drainCopyOnce(b *testing.B, mb int) (copyMBps, replayMBps float64) {
	b.StopTimer()
	nodes := startCluster3(b, func(o *Options) {
		o.LimitMsgs, o.LimitSize, o.LimitLife, o.TTL = 5000, 2<<20, 10*time.Second, 5*time.Minute
		o.MaxRetained = 1 << 30
	})
	a, c := nodes[0], nodes[2]
	ch := channelManagedBy(b, a, "a", "drainbench")
	pub, _ := helloRaw(b, a.Addr())
	payload := make([]byte, 1024)
	n := mb << 10
	batch := make([][]byte, 1024)
	for i := range batch {
		batch[i] = payload
	}
	var first, last uint64
	for k := 0; k < n; k += len(batch) {
		pos, err := pub.publishBatch(ch, batch)
		if err != nil {
			b.Fatal(err)
		}
		if first == 0 {
			first = pos[0]
		}
		last = pos[len(pos)-1]
	}
	// Close the last streamlet too: everything is sealed history.
	if _, err := a.clu().WriteGrant(ch, 0); err != nil {
		b.Fatal(err)
	}
	info, _ := stateInfo(a, ch)
	var onC int64
	for _, r := range info.Streamlets {
		if r.Host == "c" && r.Closed {
			if s := c.host.Streamlet(r.ID); s != nil {
				onC += int64(s.Buf().Bytes())
			}
		}
	}
	b.StartTimer()

	sub, _ := helloRaw(b, a.Addr())
	t0 := time.Now()
	sub.subscribe(1, ch, wire.StartPosition, first)
	if _, err := sub.eventsUntil(1, last); err != nil {
		b.Fatal(err)
	}
	replay := time.Since(t0)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 = time.Now()
	if err := c.Drain(ctx); err != nil {
		b.Fatal(err)
	}
	drain := time.Since(t0)
	b.StopTimer()
	replayMBps = float64(n) * 1024 / 1e6 / replay.Seconds()
	copyMBps = float64(onC) / 1e6 / drain.Seconds()
	b.Logf("%d MiB: c held %.1f MB, drained in %v (%.0f MB/s); replay from a in %v (%.0f MB/s)", mb, float64(onC)/1e6,
		drain.Round(time.Millisecond), copyMBps, replay.Round(time.Millisecond), replayMBps)
	for _, s := range nodes {
		_ = s.Shutdown(context.Background())
	}
	return copyMBps, replayMBps
}
