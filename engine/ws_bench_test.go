package engine

import (
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// BenchmarkWSWrap: framing one flush of output as WebSocket messages:
// 64 DATA frames (header, shared prefix, one record run each) and a
// PUBACK, as a fan-out flush to one subscriber looks.
func BenchmarkWSWrap(b *testing.B) {
	var iov [][]byte
	rec := wire.AppendRecord(nil, make([]byte, 128))
	prefix := make([]byte, 12)
	for i := 0; i < 64; i++ {
		iov = append(iov, wire.AppendHeader(nil, wire.TypeData, 0, 1, len(prefix)+len(rec)), prefix, rec)
	}
	iov = append(iov, wire.AppendPubAck(nil, []wire.Ack{{ID: 1, Position: 2}}))
	w := &wsConn{up: true}
	b.ReportAllocs()
	for b.Loop() {
		out := w.wrap(iov)
		if len(out) != 4*64+2 {
			b.Fatalf("%d vectors", len(out))
		}
		w.written()
	}
}
