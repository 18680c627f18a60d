package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// BenchmarkTransport measures the cost of TLS: through one connection, a
// window of 64 acknowledged publishes per op, each also delivered back to
// the connection's own subscription, over plain TCP and over the TLS
// bridge, in the same run. Bytes are the payload bytes published per op
// (each crosses the connection twice: in the PUBLISH and in DATA).
func BenchmarkTransport(b *testing.B) {
	set := newCerts(b)
	s := startTLSTest(b, set, func(o *Options) { o.Loops = 1 })
	const window = 64
	for _, size := range []int{128, 4 << 10, 64 << 10} {
		for _, transport := range []string{"plain", "tls"} {
			b.Run(fmt.Sprintf("size=%d/transport=%s", size, transport), func(b *testing.B) {
				var c *rawConn
				if transport == "tls" {
					var err error
					if c, err = dialTLS(b, s.TLSAddr(), set.ClientConfig()); err != nil {
						b.Fatal(err)
					}
					if _, err := c.handshakeErr(); err != nil {
						b.Fatal(err)
					}
				} else {
					c, _ = helloRaw(b, s.Addr())
				}
				ch := fmt.Sprintf("bench.%d.%s", size, transport)
				c.subscribe(1, ch, wire.StartLive, 0)
				payload := make([]byte, size)
				var frames []byte
				for i := 0; i < window; i++ {
					frames = wire.AppendPublish(frames, uint32(i+1), wire.FlagAck, ch, payload)
				}
				b.ReportAllocs()
				b.SetBytes(int64(window * size))
				b.ResetTimer()
				start := time.Now()
				for b.Loop() {
					c.write(frames)
					acks, msgs := 0, 0
					for acks < window || msgs < window {
						_ = c.nc.SetReadDeadline(time.Now().Add(waitFor))
						h, body, err := c.r.Next()
						if err != nil {
							b.Fatal(err)
						}
						switch h.Type {
						case wire.TypePubAck:
							acks += (len(body) - 2) / 12
						case wire.TypeData:
							_, n, _, err := wire.DecodeData(body)
							if err != nil {
								b.Fatal(err)
							}
							msgs += int(n)
						default:
							b.Fatalf("unexpected %s", describe(h, body))
						}
					}
				}
				b.ReportMetric(float64(b.N*window)/time.Since(start).Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkConnect measures connection setup: dial, (TLS handshake,
// bridge enrolment,) HELLO/WELCOME, close; plain and TLS in the same run.
func BenchmarkConnect(b *testing.B) {
	set := newCerts(b)
	s := startTLSTest(b, set, func(o *Options) { o.Loops = 1 })
	for _, transport := range []string{"plain", "tls"} {
		b.Run("transport="+transport, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var c *rawConn
				var err error
				if transport == "tls" {
					c, err = dialTLS(b, s.TLSAddr(), set.ClientConfig())
				} else {
					c, err = dialErr(b, s.Addr(), 0)
				}
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.handshakeErr(); err != nil {
					b.Fatal(err)
				}
				c.nc.Close()
			}
		})
	}
}
