package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// TestNodeOps_RelayGolden: RELAY's request as PROTOCOL.md 9.5 gives it
// byte by byte (a relayed INFO of "orders", create 1), and what decRelay
// accepts.
func TestNodeOps_RelayGolden(t *testing.T) {
	var inner wire.NodeEnc
	inner.Str8("orders")
	inner.U8(1)
	req := appendRelay(nil, wire.OpInfo, inner.B)
	want := "0000000a420000000005" + "14" + "02" + "06" + "6f7264657273" + "01"
	if got := fmt.Sprintf("%x", wire.AppendNodeRequest(nil, 5, wire.OpRelay, req)); got != want {
		t.Fatalf("request %s, want %s", got, want)
	}
	op, body, err := decRelay(req)
	if err != nil || op != wire.OpInfo || string(body) != string(inner.B) || cap(body) != len(body) {
		t.Fatalf("decoded op %d body %x (cap %d), %v", op, body, cap(body), err)
	}
	for name, b := range map[string][]byte{
		"empty":        nil,
		"op 0":         {0},
		"HOST":         {byte(wire.OpHost), 0, 0},
		"RELAY itself": {byte(wire.OpRelay), byte(wire.OpInfo)},
		"unknown op":   {200},
	} {
		if op, _, err := decRelay(b); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: decoded op %d, err %v", name, op, err)
		}
	}
	for _, op := range []wire.NodeOp{wire.OpWriteGrant, wire.OpInfo, wire.OpInterest, wire.OpExpire} {
		if got, _, err := decRelay([]byte{byte(op)}); err != nil || got != op {
			t.Errorf("manager op %d: %d, %v", op, got, err)
		}
	}
}

// FuzzRelay: a RELAY request from a peer never panics the decoder; what
// decodes is a manager op and re-encodes to the same bytes.
func FuzzRelay(f *testing.F) {
	f.Add([]byte{byte(wire.OpInfo), 6, 'o', 'r', 'd', 'e', 'r', 's', 1})
	f.Add([]byte{byte(wire.OpHost)})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		op, body, err := decRelay(b)
		if err != nil {
			return
		}
		if !isManagerOp(op) {
			t.Fatalf("relayed op %d", op)
		}
		if got := appendRelay(nil, op, body); string(got) != string(b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}
