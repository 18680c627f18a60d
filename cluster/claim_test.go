package cluster

import (
	"fmt"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// TestNodeOps_ClaimGolden: CLAIM's request and result as PROTOCOL.md 9.5
// gives them byte by byte.
func TestNodeOps_ClaimGolden(t *testing.T) {
	var e wire.NodeEnc
	encClaim(&e, "orders", 42, "b", 7)
	want := "0000001a4200000000051206" + "6f7264657273" + "000000000000002a" + "0162" + "0000000000000007"
	if got := fmt.Sprintf("%x", wire.AppendNodeRequest(nil, 5, wire.OpClaim, e.B)); got != want {
		t.Fatalf("request %s, want %s", got, want)
	}
	var r wire.NodeEnc
	r.U64(42)
	r.Str8("b")
	want = "0000000b43000000000500" + "000000000000002a" + "0162"
	if got := fmt.Sprintf("%x", wire.AppendNodeResponse(nil, 5, wire.NodeOK, r.B, "")); got != want {
		t.Fatalf("result %s, want %s", got, want)
	}
	if id, host, err := decClaimHeld(r.B); err != nil || id != 42 || host != "b" {
		t.Fatalf("decoded %d %q %v", id, host, err)
	}
	for name, b := range map[string][]byte{
		"empty":       nil,
		"truncated":   {0, 0, 0, 0, 0, 0, 0, 42, 1},
		"streamlet 0": {0, 0, 0, 0, 0, 0, 0, 0, 1, 'b'},
		"no host":     {0, 0, 0, 0, 0, 0, 0, 42, 0},
		"trailing":    {0, 0, 0, 0, 0, 0, 0, 42, 1, 'b', 9},
	} {
		if id, host, err := decClaimHeld(b); err == nil {
			t.Errorf("%s: decoded %d %q", name, id, host)
		}
	}
}

// FuzzClaimHeld: a CLAIM result from a peer never panics the decoder, and
// what decodes re-encodes to the same bytes.
func FuzzClaimHeld(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 42, 1, 'b'})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 'b'})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 42, 3, 'b'})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, host, err := decClaimHeld(b)
		if err != nil {
			return
		}
		if id == 0 || host == "" {
			t.Fatalf("decoded streamlet %d on %q", id, host)
		}
		var e wire.NodeEnc
		e.U64(id)
		e.Str8(host)
		if string(e.B) != string(b) {
			t.Fatalf("re-encoded %x, want %x", e.B, b)
		}
	})
}
