package ws

import (
	"bytes"
	"testing"
)

// TestReassemblyBufferReturned: a fragmented message is gathered in a
// pooled buffer that the Reader holds only until Release (or its next
// Next): a quiet connection keeps none, and a message gathered after it is
// whole and correct.
func TestReassemblyBufferReturned(t *testing.T) {
	key := [4]byte{1, 2, 3, 4}
	msg := func(s string) []byte {
		var b []byte
		for i := 0; i < len(s); i += 3 {
			op := OpBinary
			if i > 0 {
				op = OpContinuation
			}
			b = AppendMaskedFrame(b, i+3 >= len(s), op, []byte(s[i:min(i+3, len(s))]), key)
		}
		return b
	}
	var r Reader
	r.Max = 1 << 10
	for _, want := range []string{"fragmented message", "another, longer fragmented message"} {
		b := msg(want)
		var got []byte
		for off := 0; off < len(b); {
			ev, n, err := r.Next(b[off:])
			if err != nil {
				t.Fatal(err)
			}
			if ev.Assembled {
				got = append([]byte(nil), ev.Payload...)
			}
			off += n
		}
		if !bytes.Equal(got, []byte(want)) {
			t.Fatalf("got %q, want %q", got, want)
		}
		if r.frag == nil {
			t.Fatal("no reassembly buffer held before Release")
		}
		r.Release()
		if r.frag != nil || r.release {
			t.Fatal("the reassembly buffer is held after Release")
		}
		r.Release() // a second Release does nothing
	}
}
