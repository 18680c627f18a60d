package client

import (
	"errors"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// TestSubscribeFuncLendsEvents: SubscribeFunc calls its callback on the
// reader goroutine with every event in order, payloads aliasing the read
// buffer (lent, not copied); the callback may Unsubscribe, after which it
// is not called again; Events is closed when the subscription ends.
func TestSubscribeFuncLendsEvents(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	type got struct {
		ev      Event
		payload string
	}
	evs := make(chan got, 16)
	var sub *Subscription
	ready := make(chan struct{})
	fn := func(ev Event) {
		<-ready
		evs <- got{ev, string(ev.Payload)}
		if ev.Kind == KindMessage && string(ev.Payload) == "stop" {
			if err := sub.Unsubscribe(ctxT(t)); err != nil { // from fn: does not wait
				t.Error(err)
			}
		}
	}
	type res struct {
		s   *Subscription
		err error
	}
	rc := make(chan res, 1)
	go func() {
		s, err := c.SubscribeFunc(ctxT(t), "ch", fn, FromEarliest(), WithBuffer(8))
		rc <- res{s, err}
	}()
	id, s := fc.expectSubscribe()
	fc.write(wire.AppendSubscribed(nil, id, wire.Subscribed{SubID: s.SubID, First: 1, Earliest: 1, Next: 9, Epoch: 7}))
	r := <-rc
	if r.err != nil {
		t.Fatal(r.err)
	}
	sub = r.s
	close(ready)
	fc.write(wire.AppendData(nil, s.SubID, 1, []byte("m1"), []byte("m2")))
	fc.write(wire.AppendGap(nil, s.SubID, wire.Gap{From: 3, To: 4, Reason: wire.GapExpired}))
	fc.write(wire.AppendData(nil, s.SubID, 5, []byte("stop"), []byte("after")))
	fc.write(wire.AppendData(nil, s.SubID, 7, []byte("later")))
	want := []struct {
		kind    EventKind
		pos     uint64
		payload string
	}{{KindMessage, 1, "m1"}, {KindMessage, 2, "m2"}, {KindGap, 0, ""}, {KindMessage, 5, "stop"}}
	for i, w := range want {
		g := <-evs
		if g.ev.Kind != w.kind || g.ev.Kind == KindMessage && (g.ev.Position != w.pos || g.payload != w.payload) {
			t.Fatalf("event %d: %v %d %q, want %v %d %q", i, g.ev.Kind, g.ev.Position, g.payload, w.kind, w.pos, w.payload)
		}
		if g.ev.Kind == KindGap && g.ev.Gap != (GapInfo{3, 4, wire.GapExpired}) {
			t.Fatalf("gap %+v", g.ev.Gap)
		}
	}
	// The UNSUBSCRIBE went out; nothing after "stop" reached fn.
	_, body := fc.expect(wire.TypeUnsubscribe)
	if id, err := wire.DecodeUnsubscribe(body); err != nil || id != s.SubID {
		t.Fatalf("UNSUBSCRIBE %d %v", id, err)
	}
	c.Close()
	if _, ok := <-sub.Events(); ok {
		t.Fatal("Events delivered an event")
	}
	select {
	case g := <-evs:
		t.Fatalf("called after Unsubscribe with %v %q", g.ev.Kind, g.payload)
	default:
	}
	if !errors.Is(sub.Err(), ErrUnsubscribed) {
		t.Fatalf("Err %v", sub.Err())
	}
	if _, err := c.SubscribeFunc(ctxT(t), "ch", nil); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("nil callback: %v", err)
	}
}
