package wsdial

import (
	"testing"

	"github.com/valyala/bytebufferpool"

	"github.com/sluice-rtm/sluice/wire"
	"github.com/sluice-rtm/sluice/ws"
)

// BenchmarkWriteBuffer compares ways to hold the buffer Conn.Write builds:
// every protocol frame written becomes one masked binary message, copied
// and masked into an output buffer that goes to the socket in one write
// (issue 18, BENCHMARKS.md "bytebufferpool"). "reused" is what Conn did
// (the buffer kept by the connection, dropped above 1 MiB), "pool" is
// github.com/valyala/bytebufferpool (Get per Write, Put after the socket
// write; what Conn does), "fresh" allocates per Write. A Write is the SDK's flush: 64
// PUBLISH frames of 128 bytes, or one of 16 KiB.
func BenchmarkWriteBuffer(b *testing.B) {
	key := [4]byte{1, 2, 3, 4}
	for _, shape := range []struct {
		name   string
		frames int
		size   int
	}{{"64x128B", 64, 128}, {"1x16KiB", 1, 16 << 10}} {
		var in []byte
		for i := range shape.frames {
			in = wire.AppendPublish(in, uint32(i+1), wire.FlagAck, "bench.channel", make([]byte, shape.size))
		}
		frames := func(dst []byte) []byte {
			for off := 0; off < len(in); {
				_, _, n, err := wire.Split(in[off:], 1<<31)
				if err != nil {
					b.Fatal(err)
				}
				dst = ws.AppendMaskedFrame(dst, true, ws.OpBinary, in[off:off+n], key)
				off += n
			}
			return dst
		}
		b.Run(shape.name+"/reused", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			var out []byte
			for b.Loop() {
				out = frames(out[:0])
				sinkLen += len(out) // the socket write
			}
		})
		b.Run(shape.name+"/pool", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				bb := bytebufferpool.Get()
				bb.B = frames(bb.B)
				sinkLen += len(bb.B)
				bytebufferpool.Put(bb)
			}
		})
		b.Run(shape.name+"/fresh", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				sinkLen += len(frames(nil))
			}
		})
		b.Run(shape.name+"/reused-parallel", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var out []byte
				for pb.Next() {
					out = frames(out[:0])
				}
			})
		})
		b.Run(shape.name+"/pool-parallel", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					bb := bytebufferpool.Get()
					bb.B = frames(bb.B)
					bytebufferpool.Put(bb)
				}
			})
		})
	}
}

var sinkLen int
