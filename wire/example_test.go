package wire_test

import (
	"bytes"
	"fmt"

	"github.com/sluice-rtm/sluice/wire"
)

// A server-side read loop over a lent buffer: split whole frames, keep the
// incomplete tail for the next read.
func ExampleSplit() {
	in := wire.AppendPublish(nil, 1, wire.FlagAck, "prices.eu", []byte("42.1"))
	in = wire.AppendPing(in, 2)
	in = in[:len(in)-3] // the PING is not all there yet
	maxBody := wire.MaxBodyFor(1 << 20)
	for {
		h, body, n, err := wire.Split(in, maxBody)
		if err == wire.ErrIncomplete {
			fmt.Printf("keep %d bytes for the next read\n", len(in))
			return
		}
		if err != nil {
			fmt.Println("close:", err) // ERROR PROTOCOL_ERROR / FRAME_TOO_LARGE
			return
		}
		if h.Type == wire.TypePublish {
			ch, payload, err := wire.DecodePublish(body)
			fmt.Printf("%v id=%d ack=%v channel=%s payload=%s err=%v\n", h.Type, h.ID, h.Flags&wire.FlagAck != 0, ch, payload, err)
		}
		in = in[n:]
	}
	// Output:
	// PUBLISH id=1 ack=true channel=prices.eu payload=42.1 err=<nil>
	// keep 7 bytes for the next read
}

// The fan-out path: one record run, one prefix, a 10-byte header per
// subscriber.
func ExampleAppendDataHeader() {
	var run []byte
	run = wire.AppendRecord(run, []byte("a"))
	run = wire.AppendRecord(run, []byte("bc"))
	for _, subID := range []uint32{3, 8} {
		frame := append(wire.AppendDataHeader(nil, subID, 100, 2, len(run)), run...)
		h, body, _, _ := wire.Split(frame, wire.MinMaxBody)
		first, count, recs, _ := wire.DecodeData(body)
		fmt.Printf("sub %d: first=%d count=%d", h.ID, first, count)
		for pos := first; ; pos++ {
			p, rest, ok := wire.NextRecord(recs)
			if !ok {
				break
			}
			fmt.Printf(" %d:%s", pos, p)
			recs = rest
		}
		fmt.Println()
	}
	// Output:
	// sub 3: first=100 count=2 100:a 101:bc
	// sub 8: first=100 count=2 100:a 101:bc
}

// A client read loop: bounded buffering, handshake limit first.
func ExampleReader() {
	var conn bytes.Buffer // stands in for a net.Conn
	conn.Write(wire.AppendWelcome(nil, 1, wire.Welcome{Version: 1, MaxPayload: 1 << 20, MaxBody: wire.MaxBodyFor(1 << 20)}))
	conn.Write(wire.AppendGap(nil, 7, wire.Gap{From: 5, To: 9, Reason: wire.GapExpired}))

	r := wire.NewReader(&conn, wire.MinMaxBody)
	for {
		h, body, err := r.Next()
		if err != nil {
			fmt.Println("end:", err)
			return
		}
		switch h.Type {
		case wire.TypeWelcome:
			w, _ := wire.DecodeWelcome(body)
			r.SetMaxBody(w.MaxBody)
			fmt.Println("welcome, max body", w.MaxBody)
		case wire.TypeGap:
			g, _ := wire.DecodeGap(body)
			fmt.Printf("sub %d missed %d..%d (%v)\n", h.ID, g.From, g.To, g.Reason)
		}
	}
	// Output:
	// welcome, max body 1048832
	// sub 7 missed 5..9 (expired)
	// end: EOF
}
