package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// benchSubscriber reads DATA for one subscription and counts messages and
// gaps until want messages have been accounted for.
var gapped atomic.Int64

func benchSubscriber(b *testing.B, addr, ch string, want int, ready, done *sync.WaitGroup, got *atomic.Int64) {
	c, _ := helloRaw(b, addr)
	c.subscribe(1, ch, wire.StartLive, 0)
	ready.Done()
	go func() {
		defer done.Done()
		n := 0
		for n < want {
			_ = c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
			h, body, err := c.r.Next()
			if err != nil {
				b.Logf("subscriber: %v after %d", err, n)
				return
			}
			switch h.Type {
			case wire.TypeData:
				_, count, _, err := wire.DecodeData(body)
				if err != nil {
					return
				}
				n += int(count)
				got.Add(int64(count))
			case wire.TypeGap:
				g, _ := wire.DecodeGap(body)
				n += int(g.To - g.From + 1)
				gapped.Add(int64(g.To - g.From + 1))
			case wire.TypeError:
				e, _ := wire.DecodeError(h, body)
				b.Logf("subscriber: %v", e)
			}
		}
	}()
}

// publishNoAckBatched publishes b.N messages of payload to ch on pub
// without acks, in frames written 64 at a time, then one acknowledged
// publish, and returns when its ack arrived: the server handles a
// connection's frames in order, so the ack means it has taken everything.
// What else the server sends pub is read and dropped.
func publishNoAckBatched(b *testing.B, pub *rawConn, ch string, payload []byte) {
	_ = pub.nc.SetDeadline(time.Time{})
	acked := make(chan struct{})
	go func() {
		for {
			h, _, err := pub.r.Next()
			if err != nil {
				return
			}
			if h.Type == wire.TypePubAck {
				close(acked)
				return
			}
		}
	}()
	var buf []byte
	for i := 0; i < b.N; {
		buf = buf[:0]
		for k := 0; k < 64 && i < b.N; k++ {
			buf = wire.AppendPublish(buf, 0, 0, ch, payload)
			i++
		}
		if _, err := pub.nc.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pub.nc.Write(wire.AppendPublish(nil, 1, wire.FlagAck, ch, payload)); err != nil {
		b.Fatal(err)
	}
	<-acked
}

// BenchmarkFanout measures publish-to-delivery throughput through a real
// server on loopback: one publisher (no acks, frames written in batches of
// 64) and subs subscribers on separate connections.
func BenchmarkFanout(b *testing.B) {
	for _, subs := range []int{0, 1, 10, 100} {
		for _, size := range []int{16, 128} {
			b.Run(fmt.Sprintf("subs=%d/size=%d", subs, size), func(b *testing.B) {
				s := startTest(b, nil)
				ch := "bench"
				var ready, done sync.WaitGroup
				var got atomic.Int64
				for i := 0; i < subs; i++ {
					ready.Add(1)
					done.Add(1)
					benchSubscriber(b, s.Addr(), ch, b.N+1, &ready, &done, &got)
				}
				ready.Wait()
				pub, _ := helloRaw(b, s.Addr())
				b.ReportAllocs()
				b.SetBytes(int64(size))
				b.ResetTimer()
				publishNoAckBatched(b, pub, ch, make([]byte, size))
				done.Wait()
				b.StopTimer()
				if subs > 0 {
					b.ReportMetric(float64(got.Load())/b.Elapsed().Seconds(), "delivered/s")
					b.ReportMetric(float64(gapped.Swap(0))/float64(subs*(b.N+1)), "gapped-frac")
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "published/s")
			})
		}
	}
}

// BenchmarkPublishBesideStalledSubscriber measures a publisher's rate
// (1 KiB, no acks, batches of 64, until a final ack) with and without a
// subscriber that never reads, under the default slow-consumer policy
// (lag): the stalled subscriber leaves the live stream, so the publisher's
// rate should not depend on it. Compare the published/s of the two
// sub-benchmarks of one run; nothing is asserted.
func BenchmarkPublishBesideStalledSubscriber(b *testing.B) {
	for _, stalled := range []int{0, 1} {
		b.Run(fmt.Sprintf("stalled=%d", stalled), func(b *testing.B) {
			s := startTest(b, nil)
			ch := "bench.stalled"
			for range stalled {
				c := helloSmallBuffer(b, s.Addr())
				c.subscribe(1, ch, wire.StartLive, 0) // and never read again
			}
			pub, _ := helloRaw(b, s.Addr())
			b.ReportAllocs()
			b.SetBytes(1024)
			b.ResetTimer()
			publishNoAckBatched(b, pub, ch, make([]byte, 1024))
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "published/s")
			b.ReportMetric(float64(s.slowLags.Load()), "lags")
		})
	}
}
