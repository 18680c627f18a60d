package wire

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// slowCheckValue is the rule of PROTOCOL.md 2.14 written plainly: valid
// UTF-8, no control character but tab.
func slowCheckValue(v []byte) bool {
	for _, c := range v {
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return utf8.Valid(v)
}

// TestCheckValueAgainstModel: the word-at-a-time check agrees with the
// plain one on random values of every length up to 40 around the edges
// (bytes near 0x20, 0x7f, 0x80, tab, multi-byte UTF-8), at every offset.
func TestCheckValueAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	edges := []byte{0, 0x08, '\t', 0x0a, 0x1f, 0x20, 0x21, 'a', 0x7e, 0x7f, 0x80, 0xbf, 0xc3, 0xe2, 0xff}
	for n := 0; n < 200_000; n++ {
		v := make([]byte, r.IntN(41))
		for i := range v {
			if r.IntN(4) == 0 {
				v[i] = edges[r.IntN(len(edges))]
			} else {
				v[i] = byte(0x20 + r.IntN(0x5f))
			}
		}
		if got, want := checkValue(v) == nil, slowCheckValue(v); got != want {
			t.Fatalf("checkValue(%q) ok %v, want %v", v, got, want)
		}
		if got := checkValueString(string(v)) == nil; got != slowCheckValue(v) {
			t.Fatalf("checkValue(string %q) ok %v", v, got)
		}
	}
	for _, v := range []string{"", strings.Repeat("x", 64), strings.Repeat("x", 63) + "\x7f", "héllo wörld, ça va",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", strings.Repeat("a", 16) + "\t" + strings.Repeat("b", 16)} {
		if got := checkValueString(v) == nil; got != slowCheckValue([]byte(v)) {
			t.Fatalf("checkValue(%q) ok %v", v, got)
		}
	}
}

// TestExtMsgIDOf: on every body ParseExt accepts, the shortcut returns
// ParseExt's message id; on any bytes it stays inside the body.
func TestExtMsgIDOf(t *testing.T) {
	hs := []HeaderField{{Key: "k", Value: "v"}}
	for _, b := range [][]byte{
		AppendExt(nil, []byte("id-1"), nil, []byte("p")),
		AppendExt(nil, []byte("x"), hs, nil),
		AppendExt(nil, nil, hs, []byte("payload")),
		AppendExt(nil, []byte(strings.Repeat("i", 255)), hs, []byte("p")),
	} {
		e, err := ParseExt(b, TypePublish)
		if err != nil {
			t.Fatal(err)
		}
		if got := ExtMsgIDOf(b); string(got) != string(e.MsgID) || (got == nil) != (e.MsgID == nil) {
			t.Fatalf("ExtMsgIDOf %q, ParseExt %q", got, e.MsgID)
		}
	}
	for _, b := range [][]byte{nil, {1}, {1, 0}, {1, 5, 'a'}, {2, 3, 'a', 'b', 'c'}, {3, 1}} {
		if got := ExtMsgIDOf(b); len(got) > len(b) {
			t.Fatalf("%x: %q", b, got)
		}
	}
}
