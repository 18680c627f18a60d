package cluster

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/sluice-rtm/sluice/manager"
	"github.com/sluice-rtm/sluice/wire"
)

// TestStallClock: a follower that lags behind what was written and
// acknowledges nothing for the whole interval is reported once per
// interval; any progress, or catching up, restarts the clock.
func TestStallClock(t *testing.T) {
	const after = 100
	type obs struct {
		acked, written int
		now            int64
		want           bool
	}
	for _, tc := range []struct {
		name  string
		steps []obs
	}{
		{"caught up: never", []obs{{5, 5, 0, false}, {5, 5, 500, false}, {9, 9, 1000, false}}},
		{"lagging without progress: after the interval", []obs{{3, 5, 0, false}, {3, 5, 99, false}, {3, 5, 100, true}}},
		{"reported once per interval", []obs{{3, 5, 0, false}, {3, 5, 100, true}, {3, 6, 150, false}, {3, 6, 200, true}}},
		{"progress restarts the clock", []obs{{3, 5, 0, false}, {4, 5, 90, false}, {4, 5, 150, false}, {4, 5, 190, true}}},
		{"catching up resets it", []obs{{3, 5, 0, false}, {5, 5, 50, false}, {5, 7, 60, false}, {5, 7, 150, false}, {5, 7, 160, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sc stallClock
			for i, o := range tc.steps {
				if got := sc.observe(o.acked, o.written, o.now, after); got != o.want {
					t.Fatalf("step %d %+v: %v", i, o, got)
				}
			}
		})
	}
}

// TestNodeOps_Unreachable: UNREACHABLE's request and result decode to
// what was encoded; bad flags, a trailing byte and a lost result with a
// length or replicas are malformed.
func TestNodeOps_Unreachable(t *testing.T) {
	for _, req := range []unreachableReq{
		{Channel: "orders", ID: 77, Orderer: "b", Follower: "c"},
		{Channel: "x", ID: 1 << 60, Orderer: "a", Follower: "b"},
	} {
		var e wire.NodeEnc
		encUnreachable(&e, req)
		d := wire.NewNodeDec(wire.TypeNodeRequest, e.B)
		if got := decUnreachable(d); !reflect.DeepEqual(got, req) || d.Done() != nil {
			t.Fatalf("request %+v (%v), want %+v", got, d.Done(), req)
		}
	}
	var e wire.NodeEnc
	encUnreachable(&e, unreachableReq{Channel: "x", ID: 1, Orderer: "a", Follower: "b"})
	e.B = append(e.B, 0)
	d := wire.NewNodeDec(wire.TypeNodeRequest, e.B)
	if decUnreachable(d); d.Done() == nil {
		t.Fatal("a trailing byte decoded")
	}
	for _, r := range []manager.Recovered{
		{Len: 7, Replicas: []string{"b", "c"}},
		{Len: 3, Replicas: []string{"c"}},
		{Lost: true},
	} {
		var e wire.NodeEnc
		encRecovered(&e, r)
		if got, err := decRecovered(e.B); err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("result %+v %v, want %+v", got, err, r)
		}
	}
	for name, b := range map[string][]byte{
		"unknown flag":     {0x02, 0, 0, 0, 0, 0, 0},
		"lost with a len":  {0x01, 0, 0, 0, 5, 0, 0},
		"lost with a set":  {0x01, 0, 0, 0, 0, 0, 1, 1, 'a'},
		"truncated":        {0x00, 0, 0},
		"count past bytes": {0x00, 0, 0, 0, 1, 0, 3, 1, 'a'},
		"trailing":         {0x00, 0, 0, 0, 1, 0, 1, 1, 'a', 9},
		"no replica":       {0x00, 0, 0, 0, 1, 0, 0},
	} {
		if got, err := decRecovered(b); err == nil {
			t.Errorf("%s: decoded %+v", name, got)
		}
	}
}

// TestNodeOps_UnreachableGolden: UNREACHABLE's request and result as
// PROTOCOL.md 9.5 gives them byte by byte.
func TestNodeOps_UnreachableGolden(t *testing.T) {
	var e wire.NodeEnc
	encUnreachable(&e, unreachableReq{Channel: "orders", ID: 42, Orderer: "b", Follower: "c"})
	want := "000000144200000000051106" + "6f7264657273" + "000000000000002a" + "0162" + "0163"
	if got := fmt.Sprintf("%x", wire.AppendNodeRequest(nil, 5, wire.OpUnreachable, e.B)); got != want {
		t.Fatalf("request %s, want %s", got, want)
	}
	var r wire.NodeEnc
	encRecovered(&r, manager.Recovered{Len: 3000, Replicas: []string{"b", "c"}})
	want = "0000000c43000000000500" + "00" + "00000bb8" + "000201620163"
	if got := fmt.Sprintf("%x", wire.AppendNodeResponse(nil, 5, wire.NodeOK, r.B, "")); got != want {
		t.Fatalf("result %s, want %s", got, want)
	}
}
