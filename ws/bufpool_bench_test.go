package ws

import (
	"runtime"
	"testing"

	"github.com/valyala/bytebufferpool"
)

// BenchmarkReassembly compares ways to hold the buffer a Reader gathers a
// fragmented message in (issue 18, BENCHMARKS.md "bytebufferpool"):
// "reused" is a buffer of the Reader's own, kept up to 64 KiB between
// messages (what Reader did before), "pool" takes a
// github.com/valyala/bytebufferpool buffer per message and puts it back
// once the message was handed on (what Reader does), "fresh" allocates per
// message. "idle" reports what 1,000 Readers that each gathered one such
// message hold afterwards (retained-B/reader). A message of 16 KiB in 4 masked fragments, as a
// browser may send a large PUBLISH.
func BenchmarkReassembly(b *testing.B) {
	const size, parts = 16 << 10, 4
	key := [4]byte{9, 8, 7, 6}
	var stream []byte
	payload := make([]byte, size/parts)
	for i := range parts {
		op := OpBinary
		if i > 0 {
			op = OpContinuation
		}
		stream = AppendMaskedFrame(stream, i == parts-1, op, payload, key)
	}
	// gather unmasks each fragment (in a copy of the stream) and appends it.
	work := make([]byte, len(stream))
	gather := func(dst []byte) []byte {
		copy(work, stream)
		for b := work; len(b) > 0; {
			h, hn, err := ParseHeader(b, 1<<30)
			if err != nil {
				panic(err)
			}
			p := b[hn : hn+int(h.Len)]
			Mask(p, h.Mask, 0)
			dst = append(dst, p...)
			b = b[hn+int(h.Len):]
		}
		return dst
	}
	b.Run("reused", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		var frag []byte
		for b.Loop() {
			frag = gather(frag[:0])
			sink += len(frag)
			if cap(frag) > 64<<10 {
				frag = nil
			}
		}
	})
	b.Run("pool", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			bb := bytebufferpool.Get()
			bb.B = gather(bb.B)
			sink += len(bb.B)
			bytebufferpool.Put(bb)
		}
	})
	b.Run("fresh", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			sink += len(gather(nil))
		}
	})
}

var sink int

// BenchmarkReassemblyIdle: what Readers hold once each gathered one
// fragmented 16 KiB message and its payload was handed on (a connection
// that then goes quiet). Next(nil) is "done with the payload" for every
// version of Reader: it reports ErrIncomplete after the release step.
func BenchmarkReassemblyIdle(b *testing.B) {
	const readers, size, parts = 1000, 16 << 10, 4
	key := [4]byte{9, 8, 7, 6}
	var stream []byte
	for i := range parts {
		op := OpBinary
		if i > 0 {
			op = OpContinuation
		}
		stream = AppendMaskedFrame(stream, i == parts-1, op, make([]byte, size/parts), key)
	}
	b.ReportAllocs()
	for b.Loop() {
		rs := make([]Reader, readers)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range rs {
			rs[i].Max = 1 << 20
			buf := append([]byte(nil), stream...)
			for off := 0; off < len(buf); {
				ev, n, err := rs[i].Next(buf[off:])
				if err != nil {
					b.Fatal(err)
				}
				off += n
				if ev.Assembled {
					sink += len(ev.Payload)
				}
			}
			if _, _, err := rs[i].Next(nil); err != ErrIncomplete {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/readers, "retained-B/reader")
		runtime.KeepAlive(rs)
	}
}
