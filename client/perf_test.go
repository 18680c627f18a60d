package client

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// TestPendQueue checks the pending-publish queue against a map model:
// in-order and out-of-order takes, ids with holes, unknown ids, growth,
// request ids wrapping around 2^32, and drain.
func TestPendQueue(t *testing.T) {
	for _, start := range []uint32{1, math.MaxUint32 - 100} {
		var q pendQueue
		model := map[uint32]uint64{}
		var ids []uint32
		id := start
		next := func() uint32 {
			id++
			if id == 0 {
				id++
			}
			return id
		}
		// 500 publishes; every third id is used by some other request.
		for i := range 500 {
			if i%3 == 0 {
				next()
			}
			n := next()
			q.push(n, pendEntry{ack: &PubAck{pos: uint64(i)}})
			model[n] = uint64(i)
			ids = append(ids, n)
		}
		take := func(n uint32) {
			t.Helper()
			pe, ok := q.take(n)
			want, inModel := model[n]
			if ok != inModel || (ok && pe.ack.pos != want) {
				t.Fatalf("start %d: take(%d) = %v %v, model %v %v", start, n, ok, pe.ack, inModel, want)
			}
			delete(model, n)
			if q.len() != len(model) {
				t.Fatalf("len %d, model %d", q.len(), len(model))
			}
		}
		// Out of order first (like ERRORs overtaking PUBACKs), then a
		// second take of the same ids, unknown ids, then in order.
		for _, i := range []int{250, 10, 499, 11, 1, 300} {
			take(ids[i])
		}
		for _, i := range []int{250, 10} {
			take(ids[i])
		}
		take(ids[0] - 1)
		take(ids[499] + 5)
		for _, n := range ids[:400] {
			take(n)
		}
		// Push more after the head moved, then drain the rest.
		for i := range 100 {
			n := next()
			q.push(n, pendEntry{ack: &PubAck{pos: uint64(1000 + i)}})
			model[n] = uint64(1000 + i)
		}
		rest := q.drain(nil)
		if len(rest) != len(model) || q.len() != 0 {
			t.Fatalf("drain: %d entries, model %d, len after %d", len(rest), len(model), q.len())
		}
		for i := 1; i < len(rest); i++ {
			if rest[i].ack.pos <= rest[i-1].ack.pos {
				t.Fatalf("drain out of order at %d", i)
			}
		}
		if _, ok := q.take(ids[450]); ok {
			t.Fatal("take after drain found an entry")
		}
	}
}

// TestPubAckReleaseReuse: a released PubAck is reused by a later
// PublishAsync and then describes only that publish, whether it was
// released after or before its outcome.
func TestPubAckReleaseReuse(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	for round := range 20 {
		a, err := c.PublishAsync(ctxT(t), "ch", []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		if a.Position() != 0 || a.Err() != nil {
			t.Fatalf("round %d: fresh PubAck shows %d %v", round, a.Position(), a.Err())
		}
		select {
		case <-a.Done():
			t.Fatalf("round %d: fresh PubAck is done", round)
		default:
		}
		id, _, _ := fc.expectPublish()
		early := round%2 == 1
		if early {
			a.Release() // before the outcome: recycled when it arrives
		}
		fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: uint64(100 + round)}}))
		if early {
			// The next publish's answer proves the previous ack was read.
			b, err := c.PublishAsync(ctxT(t), "ch", []byte("y"))
			if err != nil {
				t.Fatal(err)
			}
			id, _, _ := fc.expectPublish()
			fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 7}}))
			if pos, err := b.Wait(ctxT(t)); err != nil || pos != 7 {
				t.Fatalf("round %d: after early release: %d %v", round, pos, err)
			}
			b.Release()
			continue
		}
		pos, err := a.Wait(ctxT(t))
		if err != nil || pos != uint64(100+round) || a.Position() != pos {
			t.Fatalf("round %d: %d %v", round, pos, err)
		}
		<-a.Done() // a closed channel once the outcome is known
		a.Release()
	}
}

// TestPubAckDoneBeforeOutcome: Done asked for before the outcome is closed
// by it, and Wait returns the outcome.
func TestPubAckDoneBeforeOutcome(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	a, err := c.PublishAsync(ctxT(t), "ch", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	done := a.Done()
	id, _, _ := fc.expectPublish()
	fc.write(wire.AppendError(nil, id, wire.Error{Code: wire.CodeForbidden, Text: "no"}))
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("Done not closed")
	}
	wantServerCode(t, a.Err(), wire.CodeForbidden)
	if _, err := a.Wait(ctxT(t)); !errors.As(err, new(*ServerError)) {
		t.Fatalf("Wait: %v", err)
	}
}

// TestPublishNoAck: the frame carries no FlagAck, takes no window slot,
// an invalid channel is refused locally, and a refusal by the server does
// not end the connection.
func TestPublishNoAck(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome(), WithMaxPending(1))
	for _, p := range []string{"a", "b"} {
		if err := c.PublishNoAck(ctxT(t), "ch", []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(c.sem); got != 0 {
		t.Fatalf("window holds %d slots", got)
	}
	var lastID uint32
	for _, want := range []string{"a", "b"} {
		h, body := fc.expect(wire.TypePublish)
		if h.Flags&wire.FlagAck != 0 {
			t.Fatal("PublishNoAck sent FlagAck")
		}
		ch, p, err := wire.DecodePublish(body)
		if err != nil || string(ch) != "ch" || string(p) != want {
			t.Fatalf("frame %q %q %v, want ch %q", ch, p, err, want)
		}
		lastID = h.ID
	}
	if err := c.PublishNoAck(ctxT(t), "bad channel", nil); !errors.Is(err, ErrInvalidChannel) {
		t.Fatalf("invalid channel: %v", err)
	}
	// A refusal answers nobody; the session goes on.
	fc.write(wire.AppendError(nil, lastID, wire.Error{Code: wire.CodeForbidden, Text: "no"}))
	go func() {
		id, _, _ := fc.expectPublish()
		fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 3}}))
	}()
	if pos, err := c.Publish(ctxT(t), "ch", []byte("c")); err != nil || pos != 3 {
		t.Fatalf("Publish after refused no-ack publish: %d %v", pos, err)
	}
}

// TestPublishNoAckBounded: while the server does not read, PublishNoAck
// stops queueing once the output bound is reached and waits (here until
// its ctx ends) instead of buffering without limit.
func TestPublishNoAckBounded(t *testing.T) {
	f := newFakeServer(t)
	c, _ := connect(t, f, testWelcome())
	payload := make([]byte, 32<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var err error
	n := 0
	for ; n < 100000 && err == nil; n++ {
		err = c.PublishNoAck(ctx, "ch", payload)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after %d publishes to a peer that does not read: %v", n, err)
	}
	s := c.cur.Load()
	s.mu.Lock()
	queued := len(s.wbuf)
	s.mu.Unlock()
	if queued > noAckQueueLimit+len(payload)+64 {
		t.Fatalf("%d bytes queued, bound %d", queued, noAckQueueLimit)
	}
}
