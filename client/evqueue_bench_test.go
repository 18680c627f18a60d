package client

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// BenchmarkNextQueued: the application side of Next alone, without a
// socket or a reader goroutine: items of 100 records are queued directly
// (one per 100 calls, under the queue's lock as the reader queues them)
// and Next returns their events. It measures what Next costs per message
// beyond what SubscribeFunc pays (the decode, the lock, the Event handed
// back), free of the network's noise.
func BenchmarkNextQueued(b *testing.B) {
	for _, size := range []int{16, 128} {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			const per = 100
			payloads := make([][]byte, per)
			for i := range payloads {
				payloads[i] = make([]byte, size)
			}
			_, _, records, err := wire.DecodeData(wire.AppendData(nil, 1, 1, payloads...)[wire.HeaderLen:])
			if err != nil {
				b.Fatal(err)
			}
			sub := &Subscription{stop: make(chan struct{})}
			sub.q.init(1<<30, "bench")
			ctx := context.Background()
			next := uint64(1)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i%per == 0 {
					sub.q.mu.Lock()
					sub.q.buf = append(sub.q.buf, qItem{first: next, recs: records, n: per})
					sub.q.queued += per
					sub.q.mu.Unlock()
					next += per
				}
				ev, err := sub.Next(ctx)
				if err != nil || ev.Kind != KindMessage || len(ev.Payload) != size {
					b.Fatalf("event %+v, %v", ev, err)
				}
			}
		})
	}
}
