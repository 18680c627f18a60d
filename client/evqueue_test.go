package client

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// dataFrames writes frames DATA frames of per messages each from position
// first ("m<pos>"), then a PING, and waits for its PONG: the reader has
// dispatched every frame before it (frames are read in order).
func dataFrames(t *testing.T, fc *fakeConn, subID uint32, first uint64, frames, per int) {
	t.Helper()
	pos := first
	for range frames {
		ps := make([][]byte, per)
		for i := range ps {
			ps[i] = fmt.Appendf(nil, "m%d", pos+uint64(i))
		}
		fc.write(wire.AppendData(nil, subID, pos, ps...))
		pos += uint64(per)
	}
	fc.write(wire.AppendPing(nil, 4242))
	for {
		h, _ := fc.read()
		if h.Type == wire.TypePong && h.ID == 4242 {
			return
		}
	}
}

// TestNextTakesQueuedFramesInOrder: frames queued while the application
// does not read (one queue item each) come out of Next one event per
// call, in position order, an overlapping frame's duplicates dropped, and
// every payload stays valid after later frames were read (the copies are
// never reused).
func TestNextTakesQueuedFramesInOrder(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1}, WithBuffer(10_000))
	dataFrames(t, fc, s.SubID, 1, 40, 25)  // 1..1000
	dataFrames(t, fc, s.SubID, 990, 1, 20) // 990..1009: 990..1000 are duplicates
	dataFrames(t, fc, s.SubID, 1010, 1, 1) // 1010
	if n := sub.Buffered(); n != 1010 {
		t.Fatalf("Buffered = %d, want 1010", n)
	}
	var evs []Event
	for range 1010 {
		evs = append(evs, nextEvent(t, sub))
	}
	if n := sub.Buffered(); n != 0 {
		t.Fatalf("Buffered = %d after reading everything", n)
	}
	for i, ev := range evs {
		wantMessage(t, ev, uint64(i+1), fmt.Sprintf("m%d", i+1))
		if cap(ev.Payload) != len(ev.Payload) {
			t.Fatalf("payload %d: capacity %d over its length %d", i+1, cap(ev.Payload), len(ev.Payload))
		}
	}
}

// TestEventsTakesWhatNextHeld: Events, called after Next took a batch of
// queued frames and returned part of one, carries on from the next event:
// the rest of the batch, then what was still queued, then new frames.
func TestEventsTakesWhatNextHeld(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	dataFrames(t, fc, s.SubID, 1, 3, 4) // 1..12
	wantMessage(t, nextEvent(t, sub), 1, "m1")
	wantMessage(t, nextEvent(t, sub), 2, "m2")
	dataFrames(t, fc, s.SubID, 13, 1, 3) // 13..15, queued behind the batch Next took
	ch := sub.Events()
	if n := sub.Buffered(); n != 13 {
		t.Fatalf("Buffered = %d, want 13", n)
	}
	for pos := uint64(3); pos <= 15; pos++ {
		wantMessage(t, <-ch, pos, fmt.Sprintf("m%d", pos))
	}
	dataFrames(t, fc, s.SubID, 16, 1, 2)
	wantMessage(t, <-ch, 16, "m16")
	wantMessage(t, nextEvent(t, sub), 17, "m17") // Next reads the channel now
}

// TestNextConcurrentCallers: Next called from several goroutines at once
// hands every event to exactly one of them.
func TestNextConcurrentCallers(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	const n = 5000
	got := make(chan uint64, n)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ev, err := sub.Next(ctxT(t))
				if err != nil {
					return
				}
				if ev.Kind != KindMessage || string(ev.Payload) != fmt.Sprintf("m%d", ev.Position) {
					t.Errorf("event %+v", ev)
				}
				got <- ev.Position
			}
		}()
	}
	dataFrames(t, fc, s.SubID, 1, 100, n/100)
	seen := make(map[uint64]bool, n)
	for range n {
		p := <-got
		if seen[p] || p < 1 || p > n {
			t.Fatalf("position %d twice or out of range", p)
		}
		seen[p] = true
	}
	unsubscribeFake(t, fc, sub, s.SubID)
	wg.Wait() // every caller returned once the subscription ended
}

// unsubscribeFake unsubscribes sub, answering its UNSUBSCRIBE.
func unsubscribeFake(t *testing.T, fc *fakeConn, sub *Subscription, subID uint32) {
	t.Helper()
	go func() {
		h, _ := fc.expect(wire.TypeUnsubscribe)
		fc.write(wire.AppendUnsubscribed(nil, h.ID, subID))
	}()
	if err := sub.Unsubscribe(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestNextAfterEndDrainsQueue: events queued when the subscription ends
// are still returned by Next, then Next returns why it ended.
func TestNextAfterEndDrainsQueue(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	dataFrames(t, fc, s.SubID, 1, 2, 3)
	wantMessage(t, nextEvent(t, sub), 1, "m1")
	unsubscribeFake(t, fc, sub, s.SubID)
	for pos := uint64(2); pos <= 6; pos++ {
		wantMessage(t, nextEvent(t, sub), pos, fmt.Sprintf("m%d", pos))
	}
	if _, err := sub.Next(ctxT(t)); !errors.Is(err, ErrUnsubscribed) {
		t.Fatalf("Next after the end: %v", err)
	}
}
