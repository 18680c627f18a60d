package wire_test

import (
	"fmt"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

var benchSizes = []int{16, 128, 1024}

const benchChannel = "prices.eu.btc-usd"

func BenchmarkAppendPublish(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			payload := make([]byte, size)
			buf := make([]byte, 0, 2048)
			b.SetBytes(int64(len(wire.AppendPublish(nil, 1, wire.FlagAck, benchChannel, payload))))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				buf = wire.AppendPublish(buf[:0], uint32(i), wire.FlagAck, benchChannel, payload)
			}
		})
	}
}

func BenchmarkDecodePublish(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			frame := wire.AppendPublish(nil, 1, wire.FlagAck, benchChannel, make([]byte, size))
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				_, body, _, err := wire.Split(frame, wire.MaxBodyFor(1<<20))
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := wire.DecodePublish(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendData encodes whole DATA frames of batch records.
func BenchmarkAppendData(b *testing.B) {
	for _, batch := range []int{1, 16} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("batch=%d/size=%d", batch, size), func(b *testing.B) {
				payloads := make([][]byte, batch)
				for i := range payloads {
					payloads[i] = make([]byte, size)
				}
				buf := make([]byte, 0, batch*(size+4)+64)
				b.SetBytes(int64(len(wire.AppendData(nil, 7, 1, payloads...))))
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					buf = wire.AppendData(buf[:0], 7, uint64(i)+1, payloads...)
				}
			})
		}
	}
}

// BenchmarkAppendDataHeader is the fan-out path: the record run is shared,
// only the 22 bytes of header and prefix are encoded per subscriber.
func BenchmarkAppendDataHeader(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.SetBytes(wire.HeaderLen + wire.DataPrefixLen)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = wire.AppendDataHeader(buf[:0], uint32(i), 1000, 16, 16*132)
	}
}

// BenchmarkDecodeData splits a DATA frame, validates it and walks its records.
func BenchmarkDecodeData(b *testing.B) {
	for _, batch := range []int{1, 16} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("batch=%d/size=%d", batch, size), func(b *testing.B) {
				payloads := make([][]byte, batch)
				for i := range payloads {
					payloads[i] = make([]byte, size)
				}
				frame := wire.AppendData(nil, 7, 1, payloads...)
				b.SetBytes(int64(len(frame)))
				b.ReportAllocs()
				for b.Loop() {
					_, body, _, err := wire.Split(frame, wire.MaxBodyFor(1<<20))
					if err != nil {
						b.Fatal(err)
					}
					_, count, recs, err := wire.DecodeData(body)
					if err != nil {
						b.Fatal(err)
					}
					for n := uint32(0); n < count; n++ {
						_, recs, _ = wire.NextRecord(recs)
					}
				}
			})
		}
	}
}

// BenchmarkSplit splits a buffer of 64 mixed frames (PUBLISH 128 B, PING,
// SUBSCRIBE, PUBACK) into frames.
func BenchmarkSplit(b *testing.B) {
	var stream []byte
	for i := range 16 {
		stream = wire.AppendPublish(stream, uint32(i), wire.FlagAck, benchChannel, make([]byte, 128))
		stream = wire.AppendPing(stream, uint32(i))
		stream = wire.AppendSubscribe(stream, uint32(i), wire.Subscribe{SubID: uint32(i), Channel: []byte(benchChannel)})
		stream = wire.AppendPubAck(stream, []wire.Ack{{ID: uint32(i), Position: uint64(i)}})
	}
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		for rest := stream; len(rest) > 0; {
			_, _, n, err := wire.Split(rest, wire.MaxBodyFor(1<<20))
			if err != nil {
				b.Fatal(err)
			}
			rest = rest[n:]
		}
	}
}

// BenchmarkReader reads DATA frames (16 records of 128 B) from a stream
// through Reader.Next.
func BenchmarkReader(b *testing.B) {
	payloads := make([][]byte, 16)
	for i := range payloads {
		payloads[i] = make([]byte, 128)
	}
	var stream []byte
	for i := range 32 {
		stream = wire.AppendData(stream, 7, uint64(i*16+1), payloads...)
	}
	r := wire.NewReader(&loopReader{data: stream}, wire.MaxBodyFor(1<<20))
	b.SetBytes(int64(len(stream) / 32))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := r.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidChannel(b *testing.B) {
	for _, name := range []string{benchChannel, "цены.日本.🚀"} {
		b.Run(fmt.Sprintf("len=%d", len(name)), func(b *testing.B) {
			ch := []byte(name)
			b.SetBytes(int64(len(ch)))
			b.ReportAllocs()
			for b.Loop() {
				if err := wire.ValidChannel(ch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSeal and BenchmarkOpen measure the node record layer (seal.go)
// per plaintext byte at the sizes a node link writes per loop iteration:
// a lone NODE_APPENDED, a small batch, a full record; AES-256-GCM.
func BenchmarkSeal(b *testing.B) {
	k := testKeys()
	for _, n := range []int{23, 1024, 16 << 10, wire.MaxSealedPlain, 4 * wire.MaxSealedPlain} {
		b.Run(fmt.Sprintf("bytes=%d", n), func(b *testing.B) {
			s := wire.NewSealer(k.DialerToAcceptor)
			plain := make([]byte, n)
			vec := [][]byte{plain[:n/2], plain[n/2:]}
			var out []byte
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				out, _ = s.SealVec(out[:0], vec)
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	k := testKeys()
	for _, n := range []int{23, 1024, 16 << 10, wire.MaxSealedPlain} {
		b.Run(fmt.Sprintf("bytes=%d", n), func(b *testing.B) {
			// 64 records per iteration, opened by a fresh Opener in step
			// with the Sealer that made them (its setup is amortized).
			const recs = 64
			s := wire.NewSealer(k.DialerToAcceptor)
			var stream []byte
			for range recs {
				stream, _ = s.Seal(stream, make([]byte, n))
			}
			var plain []byte
			b.SetBytes(int64(recs * n))
			b.ReportAllocs()
			for b.Loop() {
				o := wire.NewOpener(k.DialerToAcceptor)
				var err error
				plain, _, err = o.OpenAll(plain[:0], stream)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
