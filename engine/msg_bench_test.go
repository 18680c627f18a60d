package engine

import (
	"context"
	"encoding/binary"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client"
)

// BenchmarkPublishExt measures the publish path through a real single-node
// server with the SDK (PublishMsgAsync, a window of 1024, Release): plain
// 128-byte messages against the same with two headers (a W3C traceparent
// and a content type), with an explicit message id per message, and with
// WithIdempotence (automatic ids, frames kept for a resend). Each
// sub-benchmark gets a fresh server (history costs fresh pages, which
// would tax whichever mode runs later); compare them within one run
// (BENCHMARKS.md), ideally over several runs in rotated order
// (SLUICE_BENCH_ROTATE=k starts with the k-th mode).
func BenchmarkPublishExt(b *testing.B) {
	payload := make([]byte, 128)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	hdrs := []client.Header{
		{Key: "traceparent", Value: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{Key: "content-type", Value: "application/json"},
	}
	type modeT struct {
		name    string
		opts    []client.Option
		headers bool
		id      bool
	}
	modes := []modeT{
		{"plain", nil, false, false},
		{"headers", nil, true, false},
		{"msgid", nil, false, true},
		{"idempotent", []client.Option{client.WithIdempotence(0)}, false, false},
	}
	if k, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_ROTATE")); err == nil {
		k %= len(modes)
		modes = append(modes[k:], modes[:k]...)
	}
	for _, mode := range modes {
		b.Run(mode.name, func(b *testing.B) {
			s := startTest(b, func(o *Options) { o.Logger = nil })
			ctx := context.Background()
			cl, err := client.Dial(ctx, s.Addr(), append(mode.opts, client.WithMaxPending(1024))...)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			ch := "bench.ext." + mode.name
			id := make([]byte, 16)
			copy(id, "bench-id-")
			m := client.Msg{Payload: payload}
			if mode.headers {
				m.Headers = hdrs
			}
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			start := time.Now()
			n := 0
			for b.Loop() {
				if mode.id {
					binary.BigEndian.PutUint64(id[8:], uint64(n))
					m.ID = id // copied by PublishMsgAsync before it returns
				}
				a, err := cl.PublishMsgAsync(ctx, ch, m)
				if err != nil {
					b.Fatal(err)
				}
				a.Release()
				n++
			}
			if _, err := cl.Publish(ctx, ch, payload); err != nil { // every earlier PUBACK is in
				b.Fatal(err)
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
