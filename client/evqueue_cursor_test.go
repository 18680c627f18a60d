package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// Tests of the queue's application-side cursor without a socket: items
// are queued with push, as the reader queues them, by a session that only
// has what push uses (done, blocked).

// queuedSub returns a queued (not SubscribeFunc) subscription to channel
// "q" with a queue bound of limit events, and a session to push with.
func queuedSub(limit int) (*Subscription, *session) {
	sub := &Subscription{channel: "q", stop: make(chan struct{}), ready: make(chan struct{})}
	sub.q.init(limit, sub.channel)
	return sub, &session{done: make(chan struct{})}
}

// rec is one record of a test item: a plain payload, or (id or hs set)
// an extended body.
type rec struct {
	payload string
	id      string
	hs      []Header
}

// dataItem returns the item of the records rs at positions from first,
// built as the reader builds it (the records of a DATA frame).
func dataItem(first uint64, rs ...rec) qItem {
	var recs []byte
	for _, r := range rs {
		if r.id == "" && r.hs == nil {
			recs = wire.AppendRecord(recs, []byte(r.payload))
			continue
		}
		var id []byte
		if r.id != "" {
			id = []byte(r.id)
		}
		recs = wire.AppendRecordExt(recs, wire.AppendExt(nil, id, r.hs, []byte(r.payload)), true)
	}
	return qItem{first: first, recs: recs, n: len(rs)}
}

// plainItem is dataItem of n plain records "m<pos>".
func plainItem(first uint64, n int) qItem {
	rs := make([]rec, n)
	for i := range rs {
		rs[i].payload = fmt.Sprintf("m%d", first+uint64(i))
	}
	return dataItem(first, rs...)
}

func mustPush(t *testing.T, sub *Subscription, s *session, it qItem) {
	t.Helper()
	if !sub.push(s, it) {
		t.Fatal("push refused")
	}
}

func gapItem(from, to uint64) qItem {
	return qItem{ev: &Event{Kind: KindGap, Channel: "q", Gap: GapInfo{From: from, To: to, Reason: wire.GapLost}}}
}

// wantExt checks an extended message event: payload, id and headers.
func wantExt(t *testing.T, ev Event, pos uint64, r rec) {
	t.Helper()
	wantMessage(t, ev, pos, r.payload)
	if string(ev.MsgID) != r.id || (r.id == "") != (ev.MsgID == nil) {
		t.Fatalf("position %d: MsgID %q, want %q", pos, ev.MsgID, r.id)
	}
	if fmt.Sprint(ev.Headers) != fmt.Sprint(r.hs) {
		t.Fatalf("position %d: headers %v, want %v", pos, ev.Headers, r.hs)
	}
	if ev.Channel != "q" || cap(ev.Payload) != len(ev.Payload) {
		t.Fatalf("position %d: channel %q, payload capacity %d over length %d", pos, ev.Channel, cap(ev.Payload), len(ev.Payload))
	}
}

// TestNextCursorWalksMixedRecords: Next decodes an item's records one per
// call from its cursor, plain and extended alike (id, headers, both),
// then a gap queued between two items, then the next item; Buffered
// counts what the cursor has not passed; every payload stays intact after
// the item is used up.
func TestNextCursorWalksMixedRecords(t *testing.T) {
	sub, s := queuedSub(100)
	rs := []rec{
		{payload: "a"},
		{payload: "b", id: "id-b"},
		{payload: "c", hs: []Header{{Key: "k", Value: "v"}, {Key: "k2", Value: ""}}},
		{payload: ""},
		{payload: "e", id: "id-e", hs: []Header{{Key: "x", Value: "y"}}},
		{payload: "f"},
	}
	mustPush(t, sub, s, dataItem(1, rs...))
	mustPush(t, sub, s, gapItem(7, 9))
	mustPush(t, sub, s, plainItem(10, 2))
	var got []Event
	for i := range rs {
		if n := sub.Buffered(); n != 9-i {
			t.Fatalf("before event %d: Buffered = %d, want %d", i, n, 9-i)
		}
		ev := nextEvent(t, sub)
		wantExt(t, ev, uint64(i+1), rs[i])
		got = append(got, ev)
	}
	wantGap(t, nextEvent(t, sub), 7, 9, wire.GapLost)
	wantMessage(t, nextEvent(t, sub), 10, "m10")
	wantMessage(t, nextEvent(t, sub), 11, "m11")
	if n := sub.Buffered(); n != 0 {
		t.Fatalf("Buffered = %d at the end", n)
	}
	for i, ev := range got {
		wantExt(t, ev, uint64(i+1), rs[i])
	}
}

// TestEventsContinuesFromTheCursor: Events called while Next stopped in
// the middle of an item of extended records carries on at the cursor,
// not at the item's start or its next item.
func TestEventsContinuesFromTheCursor(t *testing.T) {
	sub, s := queuedSub(100)
	rs := []rec{{payload: "a", id: "1"}, {payload: "b"}, {payload: "c", hs: []Header{{Key: "h", Value: "3"}}}, {payload: "d", id: "4"}}
	mustPush(t, sub, s, dataItem(1, rs...))
	mustPush(t, sub, s, plainItem(5, 2))
	wantExt(t, nextEvent(t, sub), 1, rs[0])
	wantExt(t, nextEvent(t, sub), 2, rs[1])
	ch := sub.Events()
	if n := sub.Buffered(); n != 4 {
		t.Fatalf("Buffered = %d after Events, want 4", n)
	}
	wantExt(t, <-ch, 3, rs[2])
	wantExt(t, <-ch, 4, rs[3])
	wantMessage(t, <-ch, 5, "m5")
	wantMessage(t, <-ch, 6, "m6")
	mustPush(t, sub, s, dataItem(7, rec{payload: "g", id: "7"}))
	wantExt(t, <-ch, 7, rec{payload: "g", id: "7"})
}

// TestNextCloseWhileCursorInItem: a subscription that ends while Next is
// in the middle of an item still returns the rest of that item and every
// item queued behind it, then reports the end; a push after the end is
// refused.
func TestNextCloseWhileCursorInItem(t *testing.T) {
	sub, s := queuedSub(100)
	mustPush(t, sub, s, plainItem(1, 3))
	mustPush(t, sub, s, gapItem(4, 4))
	mustPush(t, sub, s, plainItem(5, 2))
	wantMessage(t, nextEvent(t, sub), 1, "m1")
	sub.terminate(ErrUnsubscribed)
	if sub.push(s, plainItem(7, 1)) {
		t.Fatal("push accepted after the end")
	}
	wantMessage(t, nextEvent(t, sub), 2, "m2")
	wantMessage(t, nextEvent(t, sub), 3, "m3")
	wantGap(t, nextEvent(t, sub), 4, 4, wire.GapLost)
	wantMessage(t, nextEvent(t, sub), 5, "m5")
	wantMessage(t, nextEvent(t, sub), 6, "m6")
	for range 2 {
		if _, err := sub.Next(ctxT(t)); !errors.Is(err, ErrUnsubscribed) {
			t.Fatalf("Next after the end: %v", err)
		}
	}
}

// TestNextWaitsAndResumes: a Next that used up the queue waits, and a
// later push (a frame after a quiet spell, or after a reconnect resumed
// the subscription) wakes it with the next event; a Next whose context
// ends returns its error and leaves the queue as it was.
func TestNextWaitsAndResumes(t *testing.T) {
	sub, s := queuedSub(100)
	mustPush(t, sub, s, plainItem(1, 2))
	wantMessage(t, nextEvent(t, sub), 1, "m1")
	wantMessage(t, nextEvent(t, sub), 2, "m2")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sub.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with an ended context: %v", err)
	}
	got := make(chan Event)
	go func() {
		for range 3 {
			ev, err := sub.Next(ctxT(t))
			if err != nil {
				t.Error(err)
				return
			}
			got <- ev
		}
	}()
	mustPush(t, sub, s, plainItem(3, 1))
	wantMessage(t, <-got, 3, "m3")
	mustPush(t, sub, s, gapItem(4, 5)) // the resume's gap, then its data
	mustPush(t, sub, s, plainItem(6, 1))
	wantGap(t, <-got, 4, 5, wire.GapLost)
	wantMessage(t, <-got, 6, "m6")
}

// TestPushWaitsForRoomUntilNextTakes: with the queue at its bound the
// reader's push waits; Next taking the queued items (not the last event)
// gives it room, and the waiting item comes out after them, in order.
func TestPushWaitsForRoomUntilNextTakes(t *testing.T) {
	sub, s := queuedSub(4)
	mustPush(t, sub, s, plainItem(1, 3))
	mustPush(t, sub, s, plainItem(4, 3)) // past the bound: one item may be
	pushed := make(chan bool)
	go func() { pushed <- sub.push(s, plainItem(7, 2)) }()
	for !s.blocked.Load() {
		select {
		case ok := <-pushed:
			t.Fatalf("push returned %v with the queue at its bound", ok)
		default:
		}
		runtime.Gosched()
	}
	wantMessage(t, nextEvent(t, sub), 1, "m1")
	if !<-pushed {
		t.Fatal("push refused")
	}
	for pos := uint64(2); pos <= 8; pos++ {
		wantMessage(t, nextEvent(t, sub), pos, fmt.Sprintf("m%d", pos))
	}
}

// TestNextConcurrentWithClose: callers of Next racing the end of the
// subscription and pushes of items get every queued event exactly once
// and then the end (run with -race).
func TestNextConcurrentWithClose(t *testing.T) {
	for round := range 20 {
		sub, s := queuedSub(1 << 20)
		const items, per = 50, 7
		var (
			mu   sync.Mutex
			seen = make(map[uint64]int)
			wg   sync.WaitGroup
		)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					ev, err := sub.Next(ctxT(t))
					if err != nil {
						if !errors.Is(err, ErrUnsubscribed) {
							t.Error(err)
						}
						return
					}
					if string(ev.Payload) != fmt.Sprintf("m%d", ev.Position) {
						t.Errorf("round %d: event %d payload %q", round, ev.Position, ev.Payload)
					}
					mu.Lock()
					seen[ev.Position]++
					mu.Unlock()
				}
			}()
		}
		pushed := 0
		for i := range items {
			if i == items/2 {
				go sub.terminate(ErrUnsubscribed)
			}
			if !sub.push(s, plainItem(uint64(1+i*per), per)) {
				break
			}
			pushed++
		}
		sub.terminate(ErrUnsubscribed)
		wg.Wait()
		if len(seen) != pushed*per {
			t.Fatalf("round %d: %d distinct events, want %d", round, len(seen), pushed*per)
		}
		for p, n := range seen {
			if n != 1 || p < 1 || p > uint64(pushed*per) {
				t.Fatalf("round %d: position %d returned %d times", round, p, n)
			}
		}
	}
}
