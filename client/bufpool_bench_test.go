package client

import (
	"testing"

	"github.com/valyala/bytebufferpool"

	"github.com/sluice-rtm/sluice/wire"
)

// These benchmarks compare ways to hold the variable-size buffers the SDK
// builds outside any ring buffer (issue 18, BENCHMARKS.md "bytebufferpool"):
// the publish batch the writer takes in one write, and the scratch of an
// S2-compressed publish. "reused" is what the SDK does (a buffer owned by
// the session, kept across flushes: two swapped for the batch), "pool" is
// github.com/valyala/bytebufferpool (Get per batch, Put after the write),
// "fresh" allocates per batch.

const benchBatch = 64 // publishes per flush

func fillBatch(dst []byte, payload []byte) []byte {
	for i := range benchBatch {
		dst = wire.AppendPublish(dst, uint32(i+1), wire.FlagAck, "bench.channel", payload)
	}
	return dst
}

var sinkLen int

func BenchmarkBatchBuffer(b *testing.B) {
	payload := make([]byte, 128)
	b.Run("reused", func(b *testing.B) {
		b.ReportAllocs()
		var cur, spare []byte
		for b.Loop() {
			cur = fillBatch(cur[:0], payload)
			sinkLen += len(cur) // the "write"
			cur, spare = spare, cur
		}
	})
	b.Run("pool", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			bb := bytebufferpool.Get()
			bb.B = fillBatch(bb.B, payload)
			sinkLen += len(bb.B)
			bytebufferpool.Put(bb)
		}
	})
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf := fillBatch(nil, payload)
			sinkLen += len(buf)
		}
	})
	b.Run("pool-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bb := bytebufferpool.Get()
				bb.B = fillBatch(bb.B, payload)
				bytebufferpool.Put(bb)
			}
		})
	})
	b.Run("reused-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var cur, spare []byte
			for pb.Next() {
				cur = fillBatch(cur[:0], payload)
				cur, spare = spare, cur
			}
		})
	})
}

func BenchmarkCompressScratch(b *testing.B) {
	payload := jsonPayload(4096)
	b.Run("reused", func(b *testing.B) {
		b.ReportAllocs()
		var frame, scratch []byte
		for b.Loop() {
			frame, scratch = wire.AppendPublishS2(frame[:0], 1, wire.FlagAck, "ch", payload, scratch)
		}
		sinkLen += len(frame)
	})
	b.Run("pool", func(b *testing.B) {
		b.ReportAllocs()
		var frame []byte
		for b.Loop() {
			bb := bytebufferpool.Get()
			frame, bb.B = wire.AppendPublishS2(frame[:0], 1, wire.FlagAck, "ch", payload, bb.B)
			bytebufferpool.Put(bb)
		}
		sinkLen += len(frame)
	})
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		var frame []byte
		for b.Loop() {
			frame, _ = wire.AppendPublishS2(frame[:0], 1, wire.FlagAck, "ch", payload, nil)
		}
		sinkLen += len(frame)
	})
}
