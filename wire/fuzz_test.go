package wire_test

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/: the golden vectors and one
// seed per malformed class. Plain `go test` runs them as regression cases.

// take hands out fuzzer bytes as fields; past the end it yields zeros.
type take struct{ b []byte }

func (t *take) n(k int) []byte {
	k = max(0, min(k, len(t.b)))
	s := t.b[:k:k]
	t.b = t.b[k:]
	return s
}

func (t *take) u8() uint8 {
	if len(t.b) == 0 {
		return 0
	}
	v := t.b[0]
	t.b = t.b[1:]
	return v
}

func (t *take) u16() uint16 { return uint16(t.u8())<<8 | uint16(t.u8()) }
func (t *take) u32() uint32 { return uint32(t.u16())<<16 | uint32(t.u16()) }
func (t *take) u64() uint64 { return uint64(t.u32())<<32 | uint64(t.u32()) }

// channel returns a 1..255 byte channel (syntax is not the codec's business).
func (t *take) channel() []byte {
	c := t.n(int(t.u8()))
	if len(c) == 0 {
		return []byte{'c'}
	}
	return c
}

// buildFrame turns fuzzer bytes into one valid frame of a fuzzer-chosen type
// and returns the frame and its expected decoding.
func buildFrame(t *take) ([]byte, msg) {
	ty := wire.Type(t.u8()%14 + 1)
	id := t.u32()
	var f []byte
	var v any
	switch ty {
	case wire.TypeHello:
		h := wire.Hello{MinVersion: t.u16(), MaxVersion: t.u16(), Features: wire.Features(t.u32()),
			Name: string(t.n(int(t.u8()))), Token: t.n(int(t.u16() % (wire.MaxTokenLen + 1)))}
		f, v = wire.AppendHello(nil, id, h), helloV{h.MinVersion, h.MaxVersion, h.Features, h.Name, string(h.Token)}
	case wire.TypeWelcome:
		w := wire.Welcome{Version: t.u16(), Features: wire.Features(t.u32()), MaxPayload: t.u32(), MaxBody: t.u32(),
			MaxSubs: t.u16(), LimitMsgs: t.u32(), LimitSize: t.u32(),
			LimitLife: time.Duration(t.u32()) * time.Millisecond, TTL: time.Duration(t.u32()) * time.Millisecond,
			PingInterval: time.Duration(t.u32()) * time.Millisecond, ServerName: string(t.n(int(t.u8())))}
		for range t.u8() % 8 {
			w.Nodes = append(w.Nodes, string(t.n(int(t.u8()))))
		}
		if w.Features&wire.FeatureHeaders != 0 {
			w.DedupWindow, w.DedupIDs = time.Duration(t.u32())*time.Millisecond, t.u32()
		}
		f, v = wire.AppendWelcome(nil, id, w), w
	case wire.TypePublish:
		flags := wire.Flags(t.u8())
		ch := t.channel()
		p := t.n(int(t.u16()))
		f, v = wire.AppendPublish(nil, id, flags, string(ch), p), publishMsg{string(ch), string(p)}
	case wire.TypePubAck:
		acks := make([]wire.Ack, 1+int(t.u8()%16))
		for i := range acks {
			acks[i] = wire.Ack{ID: t.u32(), Position: t.u64()}
		}
		f, v = wire.AppendPubAck(nil, acks), acks
	case wire.TypeSubscribe:
		s := wire.Subscribe{SubID: t.u32(), Start: wire.StartKind(t.u8() % 5), Arg: t.u64(), Epoch: t.u64(), Channel: t.channel()}
		f, v = wire.AppendSubscribe(nil, id, s), subscribeV{s.SubID, s.Start, s.Arg, s.Epoch, string(s.Channel)}
	case wire.TypeSubscribed:
		s := wire.Subscribed{SubID: t.u32(), First: t.u64(), Earliest: t.u64(), Next: t.u64(), Epoch: t.u64()}
		f, v = wire.AppendSubscribed(nil, id, s), s
	case wire.TypeUnsubscribe:
		s := t.u32()
		f, v = wire.AppendUnsubscribe(nil, id, s), unsubMsg(s)
	case wire.TypeUnsubscribed:
		s := t.u32()
		f, v = wire.AppendUnsubscribed(nil, id, s), unsubdMsg(s)
	case wire.TypeData:
		d := dataMsg{First: t.u64()}
		payloads := make([][]byte, 1+int(t.u8()%8))
		for i := range payloads {
			payloads[i] = t.n(int(t.u8()))
			d.Payloads = append(d.Payloads, string(payloads[i]))
		}
		d.First = min(d.First, ^uint64(0)-uint64(len(payloads)-1))
		f, v = wire.AppendData(nil, id, d.First, payloads...), d
	case wire.TypeGap:
		g := wire.Gap{From: t.u64(), To: t.u64(), Reason: wire.GapReason(1 + t.u8()%3)}
		if g.From > g.To {
			g.From, g.To = g.To, g.From
		}
		f, v = wire.AppendGap(nil, id, g), g
	case wire.TypePing:
		f, v = wire.AppendPing(nil, id), pingMsg{}
	case wire.TypePong:
		f, v = wire.AppendPong(nil, id), pongMsg{}
	case wire.TypeError:
		e := wire.Error{Code: wire.Code(t.u16()), Retriable: t.u8()&1 == 1, Text: string(t.n(int(t.u8())))}
		f, v = wire.AppendError(nil, id, e), e
	case wire.TypeGoAway:
		g := wire.GoAway{Code: wire.Code(t.u16()), Text: string(t.n(int(t.u8())))}
		f, v = wire.AppendGoAway(nil, g), g
	}
	h, err := wire.ParseHeader(f, ^uint32(0))
	if err != nil {
		panic(err)
	}
	return f, msg{h, v}
}

// FuzzRoundTrip: fuzzer bytes -> a frame value of a fuzzer-chosen type ->
// encode -> Split -> decode must give the same value back, and the header
// must carry the encoder's type and the body length.
func FuzzRoundTrip(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		frame, want := buildFrame(&take{data})
		h, body, n, err := wire.Split(frame, ^uint32(0))
		if err != nil || n != len(frame) {
			t.Fatalf("Split: n=%d of %d, %v", n, len(frame), err)
		}
		v, err := decodeAny(h, body)
		if err != nil {
			t.Fatalf("decode %v: %v\nframe % x", h.Type, err, frame)
		}
		if got := (msg{h, v}); !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip\n got %#v\nwant %#v", got, want)
		}
	})
}

// splitAll is the reference: Split over the whole stream. It returns the
// frames (bodies copied) and the final outcome as a Reader would report it.
func splitAll(stream []byte, maxBody uint32) ([]wire.Header, [][]byte, error) {
	var hs []wire.Header
	var bodies [][]byte
	for {
		if len(stream) == 0 {
			return hs, bodies, io.EOF
		}
		h, body, n, err := wire.Split(stream, maxBody)
		if err == wire.ErrIncomplete {
			return hs, bodies, io.ErrUnexpectedEOF
		}
		if err != nil {
			return hs, bodies, err
		}
		hs = append(hs, h)
		bodies = append(bodies, bytes.Clone(body))
		stream = stream[n:]
	}
}

// FuzzStreamPieces: several frames built from fuzzer bytes, followed by a
// fuzzer-chosen raw tail (possibly garbage), fed to Reader in
// fuzzer-chosen pieces, yield exactly the frames and the final error that
// Split yields on the whole stream.
func FuzzStreamPieces(f *testing.F) {
	f.Fuzz(func(t *testing.T, fields, tail, cuts []byte) {
		const maxBody = 512
		var stream []byte
		src := &take{fields}
		for i := 0; i < 8 && len(src.b) > 0; i++ {
			frame, _ := buildFrame(src)
			if len(frame)-wire.HeaderLen <= maxBody {
				stream = append(stream, frame...)
			}
		}
		stream = append(stream, tail...)
		wantH, wantB, wantErr := splitAll(stream, maxBody)

		sizes := make([]int, len(cuts))
		for i, c := range cuts {
			sizes[i] = 1 + int(c)%97
		}
		r := wire.NewReader(&chunkReader{data: stream, sizes: sizes}, maxBody)
		for i := 0; ; i++ {
			h, body, err := r.Next()
			if err != nil {
				if i != len(wantH) {
					t.Fatalf("Reader stopped after %d frames with %v; Split found %d", i, err, len(wantH))
				}
				if err != wantErr && err.Error() != wantErr.Error() {
					t.Fatalf("Reader error %v, Split error %v", err, wantErr)
				}
				return
			}
			if i >= len(wantH) {
				t.Fatalf("Reader returned frame %d (%+v); Split found only %d", i, h, len(wantH))
			}
			if h != wantH[i] || !bytes.Equal(body, wantB[i]) || len(body) > maxBody {
				t.Fatalf("frame %d: Reader %+v % x, Split %+v % x", i, h, body, wantH[i], wantB[i])
			}
		}
	})
}

// FuzzDecode: arbitrary bytes through Split (small limit) and through every
// decoder never panic, never yield a body over the limit, and fail only with
// ErrIncomplete (Split) or errors wrapping ErrMalformed. Whatever decodes
// successfully re-encodes to the same bytes (or a prefix, for the bodies that
// may carry unknown trailing fields).
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxBody = 64
		for rest := data; ; {
			h, body, n, err := wire.Split(rest, maxBody)
			if err == wire.ErrIncomplete {
				break
			}
			if err != nil {
				if !errors.Is(err, wire.ErrMalformed) {
					t.Fatalf("Split error %v is not malformed", err)
				}
				if !errors.Is(err, wire.ErrTooLarge) {
					t.Fatalf("Split error %v: only the length can be wrong in a header", err)
				}
				break
			}
			if len(body) > maxBody || len(body) != int(h.Len) || n != wire.HeaderLen+len(body) || cap(body) != len(body) {
				t.Fatalf("Split: h=%+v len(body)=%d cap=%d n=%d", h, len(body), cap(body), n)
			}
			checkDecoders(t, h, body)
			rest = rest[n:]
		}
		// Every decoder on the raw bytes too, whatever the header says.
		checkDecoders(t, wire.Header{Flags: wire.FlagRetriable}, data)
	})
}

func checkDecoders(t *testing.T, h wire.Header, body []byte) {
	t.Helper()
	check := func(name string, err error, reenc []byte, prefixOnly bool) {
		t.Helper()
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrTooLarge) {
				t.Fatalf("%s: error %v does not wrap ErrMalformed", name, err)
			}
			return
		}
		got := reenc[wire.HeaderLen:]
		if prefixOnly {
			if !bytes.HasPrefix(body, got) {
				t.Fatalf("%s: re-encoded % x is not a prefix of % x", name, got, body)
			}
		} else if !bytes.Equal(got, body) {
			t.Fatalf("%s: re-encoded % x != body % x", name, got, body)
		}
	}
	hello, err := wire.DecodeHello(body)
	check("HELLO", err, wire.AppendHello(nil, 0, hello), true)
	welcome, err := wire.DecodeWelcome(body)
	check("WELCOME", err, wire.AppendWelcome(nil, 0, welcome), true)
	ch, p, err := wire.DecodePublish(body)
	check("PUBLISH", err, wire.AppendPublish(nil, 0, 0, string(ch), p), false)
	acks, err := wire.DecodePubAck(body, nil)
	check("PUBACK", err, wire.AppendPubAck(nil, acks), false)
	sub, err := wire.DecodeSubscribe(body)
	check("SUBSCRIBE", err, wire.AppendSubscribe(nil, 0, sub), false)
	subd, err := wire.DecodeSubscribed(body)
	check("SUBSCRIBED", err, wire.AppendSubscribed(nil, 0, subd), true)
	u, err := wire.DecodeUnsubscribe(body)
	check("UNSUBSCRIBE", err, wire.AppendUnsubscribe(nil, 0, u), false)
	u, err = wire.DecodeUnsubscribed(body)
	check("UNSUBSCRIBED", err, wire.AppendUnsubscribed(nil, 0, u), false)
	first, count, recs, err := wire.DecodeData(body)
	var payloads [][]byte
	if err == nil {
		for {
			p, rest, ok := wire.NextRecord(recs)
			if !ok {
				break
			}
			payloads, recs = append(payloads, p), rest
		}
		if len(recs) != 0 || len(payloads) != int(count) {
			t.Fatalf("DATA: %d of %d records iterated, %d bytes left", len(payloads), count, len(recs))
		}
	}
	check("DATA", err, wire.AppendData(nil, 0, first, payloads...), false)
	gap, err := wire.DecodeGap(body)
	check("GAP", err, wire.AppendGap(nil, 0, gap), false)
	check("PING", wire.DecodePing(body), wire.AppendPing(nil, 0), false)
	check("PONG", wire.DecodePong(body), wire.AppendPong(nil, 0), false)
	e, err := wire.DecodeError(h, body)
	check("ERROR", err, wire.AppendError(nil, 0, e), false)
	if err == nil && e.Retriable != (h.Flags&wire.FlagRetriable != 0) {
		t.Fatalf("ERROR: Retriable %v with flags %x", e.Retriable, h.Flags)
	}
	g, err := wire.DecodeGoAway(body)
	check("GOAWAY", err, wire.AppendGoAway(nil, g), false)
	tok, err := wire.DecodeRefresh(body)
	check("REFRESH", err, wire.AppendRefresh(nil, 0, tok), false)
	au, err := wire.DecodeAuthed(body)
	check("AUTHED", err, wire.AppendAuthed(nil, 0, au), false)
	fs, flt, err := wire.DecodeSubscribeFilter(body)
	check("SUBSCRIBE+FILTER", err, wire.AppendSubscribeFilter(nil, 0, fs, string(flt)), false)
	_, entries, err := wire.DecodeFData(body)
	var frecs []wire.FRecord
	for pos, b, ext, rest, ok := wire.NextFEntry(entries); ok; pos, b, ext, rest, ok = wire.NextFEntry(rest) {
		frecs = append(frecs, wire.FRecord{Pos: pos, Body: b, Ext: ext})
	}
	check("FDATA", err, wire.AppendFData(nil, 0, frecs), false)
}
