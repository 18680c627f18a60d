package engine

import (
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

func TestUnsubscribeStopsDelivery(t *testing.T) {
	s := startTest(t, nil)
	const ch = "unsub"
	c, _ := helloRaw(t, s.Addr())
	c.subscribe(1, ch, wire.StartLive, 0)
	c.subscribe(2, ch, wire.StartLive, 0)
	pub, _ := helloRaw(t, s.Addr())
	p := pub.publish(ch, []byte("both"))
	evs, err := c.readUntil(nil, p, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint32{1, 2} {
		if _, _, err := checkStream(evs, id, p, p); err != nil {
			t.Fatal(err)
		}
	}
	c.write(wire.AppendUnsubscribe(nil, 77, 1))
	for {
		h, body := c.next()
		if h.Type == wire.TypeUnsubscribed {
			if id, err := wire.DecodeUnsubscribed(body); err != nil || h.ID != 77 || id != 1 {
				t.Fatalf("UNSUBSCRIBED id=%d sub %d %v", h.ID, id, err)
			}
			break
		}
		if h.Type != wire.TypeData && h.Type != wire.TypeGap {
			t.Fatalf("got %s before UNSUBSCRIBED", describe(h, body))
		}
	}
	var more [][]byte
	for i := range 10 {
		more = append(more, payloadOf(i))
	}
	pos, err := pub.publishBatch(ch, more)
	if err != nil {
		t.Fatal(err)
	}
	evs, err = c.readUntil(nil, pos[9], 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.sub != 2 {
			t.Fatalf("got %v after UNSUBSCRIBED", e)
		}
	}
	if _, _, err := checkStream(evs, 2, pos[0], pos[9]); err != nil {
		t.Fatal(err)
	}
	// The id may be reused at once.
	if sb := c.subscribe(1, ch, wire.StartPosition, pos[0]); sb.First != pos[0] {
		t.Fatalf("resubscribed %+v", sb)
	}
}

func TestReplayPausesForSlowReaderWithoutGap(t *testing.T) {
	// A replay is not a live subscriber: when its connection is over the
	// outbound limit it waits instead of skipping, so a reader with a tiny
	// receive buffer still gets the whole history.
	s := startTest(t, func(o *Options) { o.OutboundLimit = 64 << 10 })
	const ch, n = "replay", 2000
	pub, _ := helloRaw(t, s.Addr())
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = append(payloadOf(i), make([]byte, 1000)...)
	}
	pos, err := pub.publishBatch(ch, payloads) // ~2 MB of history
	if err != nil {
		t.Fatal(err)
	}
	c := helloSmallBuffer(t, s.Addr())
	c.subscribe(1, ch, wire.StartEarliest, 0)
	evs, err := c.eventsUntil(1, pos[n-1])
	if err != nil {
		t.Fatal(err)
	}
	msgs, gaps, err := checkStream(evs, 1, pos[0], pos[n-1])
	if err != nil || len(gaps) > 0 {
		t.Fatalf("replay: %v, gaps %v", err, gaps)
	}
	for i, p := range pos {
		if msgs[p] != string(payloads[i]) {
			t.Fatalf("position %d differs", p)
		}
	}
	// Having caught up it is live: the next message arrives too.
	p := pub.publish(ch, []byte("live"))
	if ev := c.events(1)[0]; ev.pos != p || ev.payload != "live" {
		t.Fatalf("got %v, want the live message at %d", ev, p)
	}
}

func TestPingPong(t *testing.T) {
	s := startTest(t, nil)
	c, w := helloRaw(t, s.Addr())
	if w.Version != wire.Version1 || w.MaxBody != wire.MaxBodyFor(uint32(DefaultOptions().MaxPayload)) ||
		w.LimitMsgs != 5000 || len(w.Nodes) != 1 || w.Nodes[0] != s.Addr() {
		t.Fatalf("WELCOME %+v", w)
	}
	for _, id := range []uint32{0, 1, 1 << 31} {
		c.write(wire.AppendPing(nil, id))
		if h, body := c.next(); h.Type != wire.TypePong || h.ID != id || len(body) != 0 {
			t.Fatalf("PING %d answered by %s", id, describe(h, body))
		}
	}
	c.write(wire.AppendPong(nil, 5)) // an unsolicited PONG is ignored
	c.expectUsable()
}

func TestBehaviour7_ReplayIntoExpiredRangeGetsGap(t *testing.T) {
	// A replay paused by a reader that does not read resumes after its
	// streamlets expired: the reader gets what had been sent, then GAP
	// expired for exactly the range it missed, then live data.
	s := startTest(t, func(o *Options) {
		o.OutboundLimit = 64 << 10
		o.LimitMsgs = 200
		o.LimitLife = 50 * time.Millisecond
		o.TTL = time.Second
	})
	const ch, n = "replay.expired", 6000
	pub, _ := helloRaw(t, s.Addr())
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = append(payloadOf(i), make([]byte, 1000)...)
	}
	pos, err := pub.publishBatch(ch, payloads) // ~6 MB: more than the socket buffers take
	if err != nil {
		t.Fatal(err)
	}
	keep, _ := helloRaw(t, s.Addr())
	keep.subscribe(1, ch, wire.StartLive, 0) // keeps the channel
	c := helloSmallBuffer(t, s.Addr())
	sb := c.subscribe(1, ch, wire.StartEarliest, 0)
	waitExpired(t, s, ch, pos[n-1]+1)
	p := pub.publish(ch, []byte("live"))
	evs, err := c.eventsUntil(1, p)
	if err != nil {
		t.Fatal(err)
	}
	msgs, gaps, err := checkStream(evs, 1, sb.First, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(gaps) != 1 || gaps[0].Reason != wire.GapExpired || gaps[0].To != pos[n-1] {
		t.Fatalf("gaps %+v, want one GAP expired ending at %d", gaps, pos[n-1])
	}
	for q, m := range msgs {
		if q != p && m != string(payloads[q-pos[0]]) {
			t.Fatalf("position %d differs", q)
		}
	}
	if msgs[p] != "live" {
		t.Fatalf("live message missing: %q", msgs[p])
	}
}
