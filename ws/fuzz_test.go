package ws_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sluice-rtm/sluice/ws"
)

type event struct {
	op     ws.Op
	p      string
	code   ws.Code
	reason string
}

// decodeAll runs a server-side Reader over in, handed over in pieces cut
// at the offsets in cuts, and returns the events and the final error.
func decodeAll(in []byte, cuts []byte, limit int) ([]event, error) {
	r := ws.Reader{Max: limit}
	var evs []event
	var pend []byte
	off := 0
	feed := func(k int) {
		k = min(k, len(in)-off)
		pend = append(pend, in[off:off+k]...)
		off += k
	}
	for i := 0; off < len(in) || len(pend) > 0; i++ {
		if off < len(in) {
			k := len(in)
			if i < len(cuts) {
				k = int(cuts[i]) + 1
			}
			feed(k)
		}
		for {
			ev, n, err := r.Next(pend)
			if err == ws.ErrIncomplete {
				break
			}
			if err != nil {
				return evs, err
			}
			if n <= 0 || n > len(pend) {
				panic("Next consumed an impossible count")
			}
			if ev.Op != 0 {
				evs = append(evs, event{ev.Op, string(ev.Payload), ev.Code, ev.Reason})
			}
			pend = pend[n:]
		}
		if off >= len(in) {
			break
		}
	}
	return evs, nil
}

// FuzzReader: arbitrary client bytes never panic, every error carries a
// close code of its class, and a stream handed over in fuzzer-chosen
// pieces decodes to the same events and error as in one piece.
func FuzzReader(f *testing.F) {
	f.Add(cat(cframe(false, ws.OpBinary, "he"), cframe(true, ws.OpPing, "p"), cframe(true, ws.OpContinuation, "llo")), []byte{0, 3, 7})
	f.Add(cframe(true, ws.OpText, "x"), []byte{1})
	f.Add(ws.AppendHeader(nil, true, ws.OpBinary, 1<<20, &key), []byte{})
	f.Add(cframe(true, ws.OpClose, "\x03\xe9going"), []byte{2, 2})
	f.Fuzz(func(t *testing.T, in, cuts []byte) {
		whole, err1 := decodeAll(append([]byte(nil), in...), nil, 300)
		parts, err2 := decodeAll(append([]byte(nil), in...), cuts, 300)
		if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
			t.Fatalf("whole: %v; in pieces: %v", err1, err2)
		}
		if len(whole) != len(parts) {
			t.Fatalf("whole %d events, in pieces %d", len(whole), len(parts))
		}
		for i := range whole {
			if whole[i] != parts[i] {
				t.Fatalf("event %d: %+v vs %+v", i, whole[i], parts[i])
			}
			if whole[i].op == ws.OpBinary && len(whole[i].p) > 300 {
				t.Fatalf("message of %d bytes passed the limit", len(whole[i].p))
			}
		}
		if err1 != nil {
			var e *ws.Error
			if !errors.As(err1, &e) {
				t.Fatalf("error %v is not a *ws.Error", err1)
			}
			want := map[ws.Code]error{ws.CodeProtocolError: ws.ErrProtocol, ws.CodeTooBig: ws.ErrTooLarge,
				ws.CodeUnsupportedData: ws.ErrUnsupportedData, ws.CodeInvalidPayload: ws.ErrInvalidPayload}[e.Code]
			if want == nil || !errors.Is(err1, want) {
				t.Fatalf("error %v has code %d", err1, e.Code)
			}
		}
		_, _, _ = ws.ParseRequest(in, 512)
		if bytes.HasPrefix(in, []byte("GET ")) {
			if _, n, err := ws.ParseRequest(in, ws.MaxRequest); err == nil && (n <= 0 || n > len(in)) {
				t.Fatalf("ParseRequest n=%d of %d", n, len(in))
			}
		}
	})
}
