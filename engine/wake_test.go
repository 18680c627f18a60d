package engine

import (
	"fmt"
	"net"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// loopOf returns the loop of the server's side of client connection nc.
func loopOf(t *testing.T, s *Server, nc net.Conn) *loop {
	t.Helper()
	var found *loop
	onLoops(t, s, func(l *loop) {
		for c := range l.conns {
			if !c.closed && c.gc.RemoteAddr().String() == nc.LocalAddr().String() {
				found = l
			}
		}
	})
	if found == nil {
		t.Fatalf("no server connection for %v", nc.LocalAddr())
	}
	return found
}

// TestCrossLoopWakesCoalescePerIteration: publishes to many channels read
// on another loop, read by the publisher's loop in one iteration, wake
// that loop with one task (loop.postWakes), not one per channel, and every
// subscription gets its message.
func TestCrossLoopWakesCoalescePerIteration(t *testing.T) {
	s := startTest(t, nil) // two loops
	pub, _ := helloRaw(t, s.Addr())
	pl := loopOf(t, s, pub.nc)
	var sub *rawConn
	for range 4 { // gnet spreads connections over the loops
		c, _ := helloRaw(t, s.Addr())
		if loopOf(t, s, c.nc) != pl {
			sub = c
			break
		}
	}
	if sub == nil {
		t.Fatal("every connection landed on the publisher's loop")
	}
	const n = 200
	sbs := make([]wire.Subscribe, n)
	for i := range sbs {
		sbs[i] = wire.Subscribe{SubID: uint32(i + 1), Channel: []byte(fmt.Sprintf("wake.%d", i)), Start: wire.StartLive}
	}
	if _, _, err := sub.subscribeMany(sbs); err != nil {
		t.Fatal(err)
	}
	var before uint64
	onLoops(t, s, func(l *loop) {
		if l == pl {
			before = l.stats.wakeTasks
		}
	})
	var out []byte
	for i := range n {
		out = wire.AppendPublish(out, 0, 0, fmt.Sprintf("wake.%d", i), []byte(fmt.Sprintf("p%d", i)))
	}
	pub.write(out) // about 5 KB: one read of the publisher's loop
	evs := sub.events(n)
	got := make(map[uint32]string)
	for _, e := range evs {
		if e.gap != nil {
			t.Fatalf("event %v, want messages only", e)
		}
		got[e.sub] = e.payload
	}
	for i := range n {
		if got[uint32(i+1)] != fmt.Sprintf("p%d", i) {
			t.Fatalf("subscription %d got %q", i+1, got[uint32(i+1)])
		}
	}
	var after uint64
	onLoops(t, s, func(l *loop) {
		if l == pl {
			after = l.stats.wakeTasks
		}
	})
	if d := after - before; d == 0 || d > 10 {
		t.Fatalf("%d wake-up tasks posted for %d channels published to in one write, want a few", d, n)
	}
}
