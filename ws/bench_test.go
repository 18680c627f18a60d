package ws_test

import (
	"testing"

	"github.com/sluice-rtm/sluice/ws"
)

// BenchmarkReaderNext: the server's decoding of one masked 138-byte
// binary message (a 128-byte PUBLISH), unmasking included.
func BenchmarkReaderNext(b *testing.B) {
	msg := make([]byte, 138)
	f := ws.AppendMaskedFrame(nil, true, ws.OpBinary, msg, key)
	buf := make([]byte, len(f))
	r := ws.Reader{Max: 1 << 20}
	b.ReportAllocs()
	b.SetBytes(int64(len(f)))
	for b.Loop() {
		copy(buf, f)
		if _, _, err := r.Next(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMask(b *testing.B) {
	for _, n := range []int{128, 16 << 10} {
		p := make([]byte, n)
		b.Run(map[int]string{128: "128B", 16 << 10: "16KiB"}[n], func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			for b.Loop() {
				ws.Mask(p, key, 1)
			}
		})
	}
}
