package fuzz

import (
	"bytes"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
	"github.com/sluice-rtm/sluice/ws"
)

// FuzzWSProtocol covers the WebSocket mapping of PROTOCOL.md: protocol
// frames of fuzzer-chosen types and contents, each in one binary message
// that the fuzzer may fragment, with pings between fragments and
// fuzzer-chosen masks, handed to the server's decoding (ws.Reader, then
// wire.Split on each message) in fuzzer-chosen pieces. Every message must
// come out as exactly the frame that went in, one frame per message.
// The raw input is also decoded as a client's byte stream as is: that
// must never panic, and a message that passes ws.Reader must be handled
// by wire.Split without panicking.
func FuzzWSProtocol(f *testing.F) {
	f.Add([]byte("\x01\x05\x00chan\x05hello\x02\x00\x03\x01"), []byte{3, 9, 1})
	f.Add([]byte("\x04\x00\x00\x00\x00"), []byte{})
	f.Add(ws.AppendMaskedFrame(nil, true, ws.OpBinary, wire.AppendPing(nil, 7), [4]byte{1, 2, 3, 4}), []byte{0})
	f.Fuzz(func(t *testing.T, spec, cuts []byte) {
		tk := &tape{b: spec}
		var frames [][]byte
		var stream []byte
		for len(tk.b) > 0 && len(frames) < 32 {
			fr := tk.frame()
			frames = append(frames, fr)
			key := [4]byte{tk.u8(), tk.u8(), tk.u8(), tk.u8()}
			// Fragments: up to 3 cuts, a ping after the first fragment.
			nfrag := int(tk.u8() % 4)
			rest := fr
			op := ws.OpBinary
			for i := 0; i < nfrag && len(rest) > 0; i++ {
				k := int(tk.u8()) % (len(rest) + 1)
				stream = ws.AppendMaskedFrame(stream, false, op, rest[:k], key)
				op, rest = ws.OpContinuation, rest[k:]
				if i == 0 {
					stream = ws.AppendMaskedFrame(stream, true, ws.OpPing, []byte("p"), key)
				}
			}
			stream = ws.AppendMaskedFrame(stream, true, op, rest, key)
		}
		limit := wire.HeaderLen + int(wire.MinMaxBody)
		got := decodeMessages(t, stream, cuts, limit, true)
		if len(got) != len(frames) {
			t.Fatalf("%d frames in, %d messages out", len(frames), len(got))
		}
		for i := range frames {
			if !bytes.Equal(got[i], frames[i]) {
				t.Fatalf("message %d = % x, want % x", i, got[i], frames[i])
			}
		}
		decodeMessages(t, append([]byte(nil), spec...), cuts, limit, false)
	})
}

// decodeMessages decodes a client stream handed over in pieces and
// returns the binary messages; strict fails the test on any error.
func decodeMessages(t *testing.T, in, cuts []byte, limit int, strict bool) [][]byte {
	r := ws.Reader{Max: limit}
	var out [][]byte
	var pend []byte
	off := 0
	for i := 0; ; i++ {
		k := len(in) - off
		if i < len(cuts) {
			k = min(k, int(cuts[i])+1)
		}
		pend = append(pend, in[off:off+k]...)
		off += k
		for {
			ev, n, err := r.Next(pend)
			if err == ws.ErrIncomplete {
				break
			}
			if err != nil {
				if strict {
					t.Fatalf("valid stream: %v", err)
				}
				return out
			}
			pend = pend[n:]
			if ev.Op != ws.OpBinary {
				continue
			}
			_, body, m, err := wire.Split(ev.Payload, wire.MinMaxBody)
			if err != nil || m != len(ev.Payload) {
				if strict {
					t.Fatalf("message of %d bytes: split n=%d err=%v", len(ev.Payload), m, err)
				}
				continue
			}
			_ = body
			out = append(out, append([]byte(nil), ev.Payload...))
		}
		if off == len(in) {
			if strict && (len(pend) > 0 || r.InMessage()) {
				t.Fatalf("%d bytes left over (in message: %v)", len(pend), r.InMessage())
			}
			return out
		}
	}
}

// tape hands out fuzzer bytes; past the end it yields zeros.
type tape struct{ b []byte }

func (t *tape) u8() byte {
	if len(t.b) == 0 {
		return 0
	}
	v := t.b[0]
	t.b = t.b[1:]
	return v
}

func (t *tape) n(k int) []byte {
	k = min(k, len(t.b))
	s := t.b[:k:k]
	t.b = t.b[k:]
	return s
}

// frame builds one valid client frame of a fuzzer-chosen type.
func (t *tape) frame() []byte {
	id := uint32(t.u8())
	switch t.u8() % 5 {
	case 0:
		return wire.AppendHello(nil, id, wire.Hello{MinVersion: 1, MaxVersion: 1, Token: t.n(int(t.u8()))})
	case 1:
		ch := string(t.n(int(t.u8()%32) + 1))
		if ch == "" {
			ch = "c"
		}
		return wire.AppendPublish(nil, id, wire.Flags(t.u8())&wire.FlagAck, ch, t.n(int(t.u8())*8))
	case 2:
		return wire.AppendUnsubscribe(nil, id, uint32(t.u8()))
	case 3:
		return wire.AppendPong(nil, id)
	}
	return wire.AppendPing(nil, id)
}
