package client

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

func TestHandshake(t *testing.T) {
	f := newFakeServer(t)
	w := testWelcome()
	w.Nodes = []string{"127.0.0.1:1", f.addr()}
	c, fc := connect(t, f, w, WithName("tester"), WithToken([]byte("secret")))
	if fc.hello.MinVersion != wire.Version1 || fc.hello.MaxVersion != wire.Version1 ||
		fc.hello.Name != "tester" || string(fc.hello.Token) != "secret" || fc.hello.Features != wire.FeatureHeaders|wire.FeatureRefresh|wire.FeaturePresence|wire.FeatureFilters {
		t.Fatalf("HELLO %+v", fc.hello)
	}
	got, ok := c.Welcome()
	if !ok || got.ServerName != "fake" || got.MaxPayload != 1<<20 {
		t.Fatalf("Welcome() = %+v, %v", got, ok)
	}
	if addrs := c.Addrs(); !slices.Equal(addrs, []string{f.addr(), "127.0.0.1:1"}) {
		t.Fatalf("Addrs() = %v", addrs)
	}
}

func TestHandshakeServerError(t *testing.T) {
	f := newFakeServer(t)
	errc := make(chan error, 1)
	go func() {
		_, err := Dial(ctxT(t), f.addr(), WithReconnect(false))
		errc <- err
	}()
	fc := f.accept()
	h, _ := fc.expect(wire.TypeHello)
	fc.write(wire.AppendError(nil, h.ID, wire.Error{Code: wire.CodeUnauthenticated, Text: "bad token"}))
	err := <-errc
	wantServerCode(t, err, wire.CodeUnauthenticated)
	var se *ServerError
	if !errors.As(err, &se) || se.Op != "hello" {
		t.Fatalf("err %v, want *ServerError op hello", err)
	}
}

func TestHandshakeBadWelcome(t *testing.T) {
	f := newFakeServer(t)
	errc := make(chan error, 1)
	go func() {
		_, err := Dial(ctxT(t), f.addr())
		errc <- err
	}()
	fc := f.accept()
	h, _ := fc.expect(wire.TypeHello)
	w := testWelcome()
	w.Version = 2
	fc.write(wire.AppendWelcome(nil, h.ID, w))
	if err := <-errc; !errors.Is(err, ErrProtocol) {
		t.Fatalf("err %v, want ErrProtocol", err)
	}
}

func TestDialSeedList(t *testing.T) {
	dead := newFakeServer(t)
	deadAddr := dead.addr()
	_ = dead.ln.Close() // nothing listens there any more
	f := newFakeServer(t)
	wait := dialAsync(t, deadAddr+", "+f.addr())
	f.acceptWelcome(testWelcome())
	c := wait()
	if addrs := c.Addrs(); !slices.Equal(addrs, []string{deadAddr, f.addr()}) {
		t.Fatalf("Addrs() = %v", addrs)
	}
}

func TestPublishAcksBatchedOutOfOrder(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	var acks []*PubAck
	for _, p := range []string{"a", "b", "c"} {
		a, err := c.PublishAsync(ctxT(t), "ch", []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
	}
	ids := map[string]uint32{}
	for range 3 {
		id, ch, p := fc.expectPublish()
		if ch != "ch" {
			t.Fatalf("channel %q", ch)
		}
		ids[p] = id
	}
	// One PUBACK, acks in reverse order.
	fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: ids["c"], Position: 30}, {ID: ids["a"], Position: 10}, {ID: ids["b"], Position: 20}}))
	for i, want := range []uint64{10, 20, 30} {
		pos, err := acks[i].Wait(ctxT(t))
		if err != nil || pos != want || acks[i].Position() != want || acks[i].Err() != nil {
			t.Fatalf("ack %d: %d %v, want %d", i, pos, err, want)
		}
	}
}

func TestPublishSync(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	go func() {
		id, _, p := fc.expectPublish()
		if p != "hello" {
			t.Errorf("payload %q", p)
		}
		fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 7}}))
	}()
	pos, err := c.Publish(ctxT(t), "ch", []byte("hello"))
	if err != nil || pos != 7 {
		t.Fatalf("Publish = %d, %v", pos, err)
	}
}

func TestPublishFuncAndServerError(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	type res struct {
		pos uint64
		err error
	}
	got := make(chan res, 2)
	cb := func(pos uint64, err error) { got <- res{pos, err} }
	for range 2 {
		if err := c.PublishFunc(ctxT(t), "ch", []byte("x"), cb); err != nil {
			t.Fatal(err)
		}
	}
	id1, _, _ := fc.expectPublish()
	id2, _, _ := fc.expectPublish()
	fc.write(wire.AppendError(nil, id1, wire.Error{Code: wire.CodeForbidden, Text: "no"}))
	fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id2, Position: 5}}))
	r := <-got
	wantServerCode(t, r.err, wire.CodeForbidden)
	if r = <-got; r.err != nil || r.pos != 5 {
		t.Fatalf("second publish: %+v", r)
	}
}

func TestPublishLocalValidation(t *testing.T) {
	f := newFakeServer(t)
	w := testWelcome()
	w.MaxPayload = 4
	c, _ := connect(t, f, w)
	if _, err := c.PublishAsync(ctxT(t), "bad channel", nil); !errors.Is(err, ErrInvalidChannel) || !errors.Is(err, wire.ErrInvalidChannel) {
		t.Fatalf("invalid channel: %v", err)
	}
	if _, err := c.PublishAsync(ctxT(t), "ch", []byte("12345")); !errors.Is(err, ErrPayloadTooLarge) {
		t.Fatalf("large payload: %v", err)
	}
	// Nothing was queued: the whole window is still free.
	if got := len(c.sem); got != 0 {
		t.Fatalf("window holds %d slots", got)
	}
}

func TestPublishWindowBlocks(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome(), WithMaxPending(1))
	a, err := c.PublishAsync(ctxT(t), "ch", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.PublishAsync(ctx, "ch", []byte("2")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("full window: %v", err)
	}
	id, _, _ := fc.expectPublish()
	fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 1}}))
	if _, err := a.Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishAsync(ctxT(t), "ch", []byte("3")); err != nil {
		t.Fatalf("after ack: %v", err)
	}
	if _, _, p := fc.expectPublish(); p != "3" {
		t.Fatalf("payload %q: the refused publish was sent", p)
	}
}

// subscribeFake subscribes through the fake server, answering SUBSCRIBED.
func subscribeFake(t *testing.T, c *Conn, fc *fakeConn, info wire.Subscribed, opts ...SubOption) (*Subscription, wire.Subscribe) {
	t.Helper()
	wait := subscribeAsync(t, c, "ch", opts...)
	id, s := fc.expectSubscribe()
	info.SubID = s.SubID
	fc.write(wire.AppendSubscribed(nil, id, info))
	sub, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	return sub, s
}

func TestSubscribeDataAndGap(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Earliest: 1, Next: 9, Epoch: 77}, FromEarliest())
	if s.Start != wire.StartEarliest || string(s.Channel) != "ch" || s.Epoch != 0 {
		t.Fatalf("SUBSCRIBE %+v", s)
	}
	if info := sub.Info(); info != (SubInfo{First: 1, Earliest: 1, Next: 9, Epoch: 77}) {
		t.Fatalf("Info() = %+v", info)
	}
	fc.write(wire.AppendData(nil, s.SubID, 1, []byte("m1"), []byte("m2"), []byte("")))
	fc.write(wire.AppendGap(nil, s.SubID, wire.Gap{From: 4, To: 5, Reason: wire.GapSlow}))
	fc.write(wire.AppendData(nil, s.SubID, 6, []byte("m6")))
	fc.write(wire.AppendData(nil, s.SubID+1, 7, []byte("other sub"))) // unknown subID: ignored
	wantMessage(t, nextEvent(t, sub), 1, "m1")
	wantMessage(t, nextEvent(t, sub), 2, "m2")
	wantMessage(t, nextEvent(t, sub), 3, "")
	wantGap(t, nextEvent(t, sub), 4, 5, wire.GapSlow)
	ev := <-sub.Events()
	wantMessage(t, ev, 6, "m6")
	if ev.Channel != "ch" {
		t.Fatalf("channel %q", ev.Channel)
	}
}

func TestSubscribeStartOptions(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	for _, tc := range []struct {
		opt  SubOption
		kind wire.StartKind
		arg  uint64
	}{
		{FromLive(), wire.StartLive, 0},
		{FromPosition(42), wire.StartPosition, 42},
		{Last(10), wire.StartLast, 10},
		{Since(1500 * time.Millisecond), wire.StartSince, 1500},
	} {
		_, s := subscribeFake(t, c, fc, wire.Subscribed{First: 42, Next: 42, Epoch: 1}, tc.opt)
		if s.Start != tc.kind || s.Arg != tc.arg {
			t.Fatalf("SUBSCRIBE %v %d, want %v %d", s.Start, s.Arg, tc.kind, tc.arg)
		}
	}
	if _, err := c.Subscribe(ctxT(t), "ch", FromPosition(0)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("FromPosition(0): %v", err)
	}
}

func TestSubscribeFromPositionGap(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	// Asked for 5, the server starts at 8: 5..7 are reported missing.
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 8, Earliest: 8, Next: 9, Epoch: 3}, FromPosition(5))
	fc.write(wire.AppendData(nil, s.SubID, 8, []byte("m8")))
	wantGap(t, nextEvent(t, sub), 5, 7, wire.GapExpired)
	wantMessage(t, nextEvent(t, sub), 8, "m8")
}

func TestSubscribeServerError(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	wait := subscribeAsync(t, c, "ch", FromPosition(3))
	id, _ := fc.expectSubscribe()
	fc.write(wire.AppendError(nil, id, wire.Error{Code: wire.CodeInvalidStart, Text: "nope"}))
	sub, err := wait()
	if sub != nil {
		t.Fatal("got a subscription")
	}
	wantServerCode(t, err, wire.CodeInvalidStart)
	// The Conn is still usable.
	subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
}

func TestUnsubscribe(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	fc.write(wire.AppendData(nil, s.SubID, 1, []byte("m1")))
	wantMessage(t, nextEvent(t, sub), 1, "m1")
	done := make(chan error, 1)
	go func() { done <- sub.Unsubscribe(ctxT(t)) }()
	h, body := fc.expect(wire.TypeUnsubscribe)
	subID, err := wire.DecodeUnsubscribe(body)
	if err != nil || subID != s.SubID {
		t.Fatalf("UNSUBSCRIBE sub %d %v, want %d", subID, err, s.SubID)
	}
	fc.write(wire.AppendData(nil, s.SubID, 2, []byte("late"))) // before UNSUBSCRIBED: dropped
	fc.write(wire.AppendUnsubscribed(nil, h.ID, subID))
	if err := <-done; err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	if _, err := sub.Next(ctxT(t)); !errors.Is(err, ErrUnsubscribed) {
		t.Fatalf("Next after Unsubscribe: %v", err)
	}
	if err := sub.Unsubscribe(ctxT(t)); err != nil {
		t.Fatalf("second Unsubscribe: %v", err)
	}
}

// TestServerEndsSubscription: an UNSUBSCRIBED with id 0 (the server
// ended the subscription: its permission was revoked) ends it with
// FORBIDDEN, and a reconnect does not subscribe it again; the Conn's other
// subscription is resumed.
func TestServerEndsSubscription(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	gone, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	kept, k := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	fc.write(wire.AppendUnsubscribed(nil, 0, s.SubID))
	_, err := gone.Next(ctxT(t))
	wantServerCode(t, err, wire.CodeForbidden)
	wantServerCode(t, gone.Err(), wire.CodeForbidden)

	fc.close()
	fc2 := f.acceptWelcome(testWelcome())
	id, sb := fc2.expectSubscribe()
	if sb.SubID != k.SubID {
		t.Fatalf("resubscribed sub %d, want only %d", sb.SubID, k.SubID)
	}
	fc2.write(wire.AppendSubscribed(nil, id, wire.Subscribed{SubID: k.SubID, First: 1, Next: 1, Epoch: 1}))
	// Resubscriptions go out before anything else: the answer to a PING
	// coming next shows there was no second one.
	fc2.write(wire.AppendPing(nil, 42))
	if h, _ := fc2.expect(wire.TypePong); h.ID != 42 {
		t.Fatalf("PONG id %d", h.ID)
	}
	fc2.write(wire.AppendData(nil, k.SubID, 1, []byte("still here")))
	wantMessage(t, nextEvent(t, kept), 1, "still here")
}

// TestResumeAfterDrop: the fake server drops the connection; the client
// reconnects, re-subscribes from the last delivered position + 1 with the
// epoch, drops duplicates, and fails the unacked publish without resending.
func TestResumeAfterDrop(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 77})
	fc.write(wire.AppendData(nil, s.SubID, 1, []byte("m1"), []byte("m2"), []byte("m3")))
	for i, p := range []string{"m1", "m2", "m3"} {
		wantMessage(t, nextEvent(t, sub), uint64(i+1), p)
	}
	a, err := c.PublishAsync(ctxT(t), "ch", []byte("unacked"))
	if err != nil {
		t.Fatal(err)
	}
	fc.expectPublish()
	fc.close()

	if _, err := a.Wait(ctxT(t)); !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("unacked publish: %v, want ErrUnknownOutcome", err)
	}
	fc2 := f.acceptWelcome(testWelcome())
	id, s2 := fc2.expectSubscribe()
	if s2.SubID != s.SubID || s2.Start != wire.StartPosition || s2.Arg != 4 || s2.Epoch != 77 || string(s2.Channel) != "ch" {
		t.Fatalf("resume SUBSCRIBE %+v, want position 4 epoch 77", s2)
	}
	fc2.write(wire.AppendSubscribed(nil, id, wire.Subscribed{SubID: s2.SubID, First: 2, Earliest: 1, Next: 6, Epoch: 77}))
	fc2.write(wire.AppendData(nil, s2.SubID, 2, []byte("m2"), []byte("m3"), []byte("m4"), []byte("m5")))
	fc2.write(wire.AppendGap(nil, s2.SubID, wire.Gap{From: 3, To: 4, Reason: wire.GapExpired})) // old: dropped
	fc2.write(wire.AppendData(nil, s2.SubID, 6, []byte("m6")))
	wantMessage(t, nextEvent(t, sub), 4, "m4")
	wantMessage(t, nextEvent(t, sub), 5, "m5")
	wantMessage(t, nextEvent(t, sub), 6, "m6")
	if info := sub.Info(); info.First != 2 || info.Next != 6 {
		t.Fatalf("Info after resume %+v", info)
	}

	// The next frame after the SUBSCRIBE is a new publish, not the old one.
	go func() {
		id, _, p := fc2.expectPublish()
		if p != "new" {
			t.Errorf("payload %q: the unacked publish was resent", p)
		}
		fc2.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 7}}))
	}()
	if pos, err := c.Publish(ctxT(t), "ch", []byte("new")); err != nil || pos != 7 {
		t.Fatalf("Publish after reconnect: %d %v", pos, err)
	}
}

func TestResumeBeforeFirstDelivery(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	_, s := subscribeFake(t, c, fc, wire.Subscribed{First: 10, Next: 10, Epoch: 5}, FromLive())
	fc.close()
	fc2 := f.acceptWelcome(testWelcome())
	_, s2 := fc2.expectSubscribe()
	// Nothing delivered: resume from the first position the live start gave.
	if s2.SubID != s.SubID || s2.Start != wire.StartPosition || s2.Arg != 10 || s2.Epoch != 5 {
		t.Fatalf("resume SUBSCRIBE %+v", s2)
	}
}

func TestResumeEpochChangeAndGap(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	fc.write(wire.AppendData(nil, s.SubID, 1, []byte("m1")))
	wantMessage(t, nextEvent(t, sub), 1, "m1")
	fc.close()

	// Same epoch, but the server starts later than asked: a gap.
	fc2 := f.acceptWelcome(testWelcome())
	id, s2 := fc2.expectSubscribe()
	fc2.write(wire.AppendSubscribed(nil, id, wire.Subscribed{SubID: s2.SubID, First: 5, Next: 6, Epoch: 1}))
	fc2.write(wire.AppendData(nil, s2.SubID, 5, []byte("m5")))
	wantGap(t, nextEvent(t, sub), 2, 4, wire.GapExpired)
	wantMessage(t, nextEvent(t, sub), 5, "m5")
	fc2.close()

	// New epoch: surfaced, and positions restart.
	fc3 := f.acceptWelcome(testWelcome())
	id, s3 := fc3.expectSubscribe()
	if s3.Arg != 6 || s3.Epoch != 1 {
		t.Fatalf("resume SUBSCRIBE %+v", s3)
	}
	fc3.write(wire.AppendSubscribed(nil, id, wire.Subscribed{SubID: s3.SubID, First: 1, Next: 1, Epoch: 2}))
	fc3.write(wire.AppendData(nil, s3.SubID, 1, []byte("new1")))
	ev := nextEvent(t, sub)
	if ev.Kind != KindEpochChanged || ev.Epoch != 2 || ev.Position != 1 {
		t.Fatalf("event %+v, want epoch change to 2", ev)
	}
	wantMessage(t, nextEvent(t, sub), 1, "new1")
	if sub.Info().Epoch != 2 {
		t.Fatalf("Info %+v", sub.Info())
	}
}

// TestResumeEpochChangePartlyGone: a resume across an incarnation whose
// first positions are no longer retained: the epoch change, then exactly
// the new incarnation's positions 1..First-1 as lost (the server's own GAP
// for them is not repeated), then its messages.
func TestResumeEpochChangePartlyGone(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	fc.write(wire.AppendData(nil, s.SubID, 1, []byte("m1"), []byte("m2"), []byte("m3")))
	for p := uint64(1); p <= 3; p++ {
		wantMessage(t, nextEvent(t, sub), p, "m"+strconv.FormatUint(p, 10))
	}
	fc.close()
	fc2 := f.acceptWelcome(testWelcome())
	id, s2 := fc2.expectSubscribe()
	if s2.Arg != 4 || s2.Epoch != 1 {
		t.Fatalf("resume SUBSCRIBE %+v", s2)
	}
	// The new incarnation retains 10..10 (positions 1..9 expired).
	fc2.write(wire.AppendSubscribed(nil, id, wire.Subscribed{SubID: s2.SubID, First: 10, Earliest: 10, Next: 11, Epoch: 1764633600000}))
	fc2.write(wire.AppendGap(nil, s2.SubID, wire.Gap{From: 1, To: 9, Reason: wire.GapLost}))
	fc2.write(wire.AppendData(nil, s2.SubID, 10, []byte("n10")))
	ev := nextEvent(t, sub)
	if ev.Kind != KindEpochChanged || ev.Epoch != 1764633600000 || ev.Position != 1 {
		t.Fatalf("event %+v, want epoch change", ev)
	}
	wantGap(t, nextEvent(t, sub), 1, 9, wire.GapLost)
	wantMessage(t, nextEvent(t, sub), 10, "n10")

	// The next resume asks for the new incarnation's next position.
	fc2.close()
	fc3 := f.acceptWelcome(testWelcome())
	_, s3 := fc3.expectSubscribe()
	if s3.Start != wire.StartPosition || s3.Arg != 11 || s3.Epoch != 1764633600000 {
		t.Fatalf("resume SUBSCRIBE %+v", s3)
	}
}

// TestResumeEpochChangeBeyondCursor: the new incarnation's first retained
// position lies beyond the old cursor: the gap still starts at 1, its
// first position, not at the old incarnation's cursor, whether or not the
// server sends a GAP of its own.
func TestResumeEpochChangeBeyondCursor(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	fc.write(wire.AppendData(nil, s.SubID, 1, []byte("m1")))
	wantMessage(t, nextEvent(t, sub), 1, "m1")
	fc.close()
	fc2 := f.acceptWelcome(testWelcome())
	id, s2 := fc2.expectSubscribe()
	fc2.write(wire.AppendSubscribed(nil, id, wire.Subscribed{SubID: s2.SubID, First: 50, Earliest: 50, Next: 51, Epoch: 2}))
	fc2.write(wire.AppendData(nil, s2.SubID, 50, []byte("n50")))
	if ev := nextEvent(t, sub); ev.Kind != KindEpochChanged || ev.Epoch != 2 || ev.Position != 1 {
		t.Fatalf("event %+v, want epoch change", ev)
	}
	wantGap(t, nextEvent(t, sub), 1, 49, wire.GapLost)
	wantMessage(t, nextEvent(t, sub), 50, "n50")
}

func TestDataHoleBecomesGap(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	fc.write(wire.AppendData(nil, s.SubID, 1, []byte("m1")))
	fc.write(wire.AppendData(nil, s.SubID, 4, []byte("m4"))) // 2..3 skipped without a GAP
	wantMessage(t, nextEvent(t, sub), 1, "m1")
	wantGap(t, nextEvent(t, sub), 2, 3, wire.GapLost)
	wantMessage(t, nextEvent(t, sub), 4, "m4")
}

func TestResubscribeRefused(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, _ := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	fc.close()
	fc2 := f.acceptWelcome(testWelcome())
	id, _ := fc2.expectSubscribe()
	fc2.write(wire.AppendError(nil, id, wire.Error{Code: wire.CodeForbidden}))
	_, err := sub.Next(ctxT(t))
	wantServerCode(t, err, wire.CodeForbidden)
}

func TestResubscribeRetriable(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, _ := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	fc.close()
	fc2 := f.acceptWelcome(testWelcome())
	id, _ := fc2.expectSubscribe()
	fc2.write(wire.AppendError(nil, id, wire.Error{Code: wire.CodeUnavailable, Retriable: true}))
	id, s := fc2.expectSubscribe() // tried again on the same connection
	fc2.write(wire.AppendSubscribed(nil, id, wire.Subscribed{SubID: s.SubID, First: 1, Next: 2, Epoch: 1}))
	fc2.write(wire.AppendData(nil, s.SubID, 1, []byte("m1")))
	wantMessage(t, nextEvent(t, sub), 1, "m1")
}

func TestSubscribeWaitsAcrossReconnect(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	wait := subscribeAsync(t, c, "ch")
	fc.expectSubscribe()
	fc.close() // no answer: Subscribe keeps waiting, SUBSCRIBE is re-sent
	fc2 := f.acceptWelcome(testWelcome())
	id, s := fc2.expectSubscribe()
	if s.Start != wire.StartLive {
		t.Fatalf("re-sent SUBSCRIBE %+v, want the original start", s)
	}
	fc2.write(wire.AppendSubscribed(nil, id, wire.Subscribed{SubID: s.SubID, First: 3, Next: 3, Epoch: 1}))
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
}

func TestMalformedServerFrame(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"empty PUBACK", wire.AppendHeader(nil, wire.TypePubAck, 0, 0, 0)},
		{"short DATA", append(wire.AppendHeader(nil, wire.TypeData, 0, 1, 3), 1, 2, 3)},
		{"unknown type", wire.AppendHeader(nil, wire.Type(0x33), 0, 0, 0)},
		{"client frame type", wire.AppendPublish(nil, 1, 0, "ch", nil)},
		{"too large", wire.AppendHeader(nil, wire.TypeData, 0, 1, int(wire.MaxBodyFor(1<<20))+1)},
		{"bad gap reason", wire.AppendGap(nil, 1, wire.Gap{From: 1, To: 2, Reason: 9})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeServer(t)
			c, fc := connect(t, f, testWelcome(), WithReconnect(false))
			a, err := c.PublishAsync(ctxT(t), "ch", []byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			fc.expectPublish()
			fc.write(tc.frame)
			_, err = a.Wait(ctxT(t))
			if !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, ErrProtocol) {
				t.Fatalf("pending publish: %v, want unknown outcome + protocol error", err)
			}
			if _, err := c.Publish(ctxT(t), "ch", nil); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrProtocol) {
				t.Fatalf("publish after: %v", err)
			}
		})
	}
}

func TestConnectionErrorFrame(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome(), WithReconnect(false))
	sub, _ := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	fc.write(wire.AppendError(nil, 0, wire.Error{Code: wire.CodeSlowConsumer, Text: "too slow"}))
	_, err := sub.Next(ctxT(t))
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Next: %v", err)
	}
	wantServerCode(t, err, wire.CodeSlowConsumer)
}

func TestPingPong(t *testing.T) {
	f := newFakeServer(t)
	w := testWelcome()
	w.PingInterval = 100 * time.Millisecond
	c, fc := connect(t, f, w, WithReconnect(false))
	// Server PING -> client PONG with the same id.
	fc.write(wire.AppendPing(nil, 77))
	sawPong := false
	pings := 0
	for !sawPong || pings < 2 {
		h, _ := fc.read()
		switch h.Type {
		case wire.TypePong:
			if h.ID != 77 {
				t.Fatalf("PONG id %d", h.ID)
			}
			sawPong = true
		case wire.TypePing:
			pings++
			fc.write(wire.AppendPong(nil, h.ID))
		default:
			t.Fatalf("unexpected %v", h.Type)
		}
	}
	// Stop answering: the client declares the connection dead.
	if err := fc.readErr(); err == nil {
		t.Fatal("connection not closed")
	}
	_, err := c.Publish(ctxT(t), "ch", nil)
	if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrPingTimeout) {
		t.Fatalf("after missing PONGs: %v", err)
	}
}

func TestGoAwayReconnectsElsewhere(t *testing.T) {
	f1, f2 := newFakeServer(t), newFakeServer(t)
	wait := dialAsync(t, f1.addr()+","+f2.addr())
	fc1 := f1.acceptWelcome(testWelcome())
	c := wait()
	sub, s := subscribeFake(t, c, fc1, wire.Subscribed{First: 1, Next: 1, Epoch: 9})
	a, err := c.PublishAsync(ctxT(t), "ch", []byte("in flight"))
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := fc1.expectPublish()
	fc1.write(wire.AppendGoAway(nil, wire.GoAway{Code: wire.CodeShuttingDown, Text: "bye"}))
	fc1.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 1}})) // acks after GOAWAY still count
	fc1.write(wire.AppendData(nil, s.SubID, 1, []byte("in flight")))
	if pos, err := a.Wait(ctxT(t)); err != nil || pos != 1 {
		t.Fatalf("ack after GOAWAY: %d %v", pos, err)
	}
	wantMessage(t, nextEvent(t, sub), 1, "in flight")
	fc1.close()
	fc2 := f2.acceptWelcome(testWelcome())
	sid, s2 := fc2.expectSubscribe()
	if s2.Arg != 2 || s2.Epoch != 9 {
		t.Fatalf("resume %+v", s2)
	}
	fc2.write(wire.AppendSubscribed(nil, sid, wire.Subscribed{SubID: s2.SubID, First: 2, Next: 2, Epoch: 9}))
	fc2.write(wire.AppendData(nil, s2.SubID, 2, []byte("m2")))
	wantMessage(t, nextEvent(t, sub), 2, "m2")
}

func TestCloseFailsPendingAndEndsSubscriptions(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, _ := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	a, err := c.PublishAsync(ctxT(t), "ch", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	fc.expectPublish()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Wait(ctxT(t)); !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, ErrClosed) {
		t.Fatalf("pending publish: %v", err)
	}
	if _, err := sub.Next(ctxT(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next: %v", err)
	}
	if _, err := c.Publish(ctxT(t), "ch", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Publish after Close: %v", err)
	}
	if _, err := c.Subscribe(ctxT(t), "ch"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Subscribe after Close: %v", err)
	}
	if err := fc.readErr(); err == nil {
		t.Fatal("socket still open")
	}
}

func TestDrain(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	a, err := c.PublishAsync(ctxT(t), "ch", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Drain(ctxT(t)) }()
	id, _, _ := fc.expectPublish()
	fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 3}}))
	h, _ := fc.expect(wire.TypeUnsubscribe)
	if _, err := c.Subscribe(ctxT(t), "ch"); !errors.Is(err, ErrDraining) {
		t.Fatalf("Subscribe while draining: %v", err)
	}
	if _, err := c.Publish(ctxT(t), "ch", nil); !errors.Is(err, ErrDraining) {
		t.Fatalf("Publish while draining: %v", err)
	}
	fc.write(wire.AppendUnsubscribed(nil, h.ID, s.SubID))
	if err := <-done; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if pos, err := a.Wait(ctxT(t)); err != nil || pos != 3 {
		t.Fatalf("drained publish: %d %v", pos, err)
	}
	if _, err := sub.Next(ctxT(t)); !errors.Is(err, ErrUnsubscribed) {
		t.Fatalf("Next: %v", err)
	}
	if _, err := c.Publish(ctxT(t), "ch", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Publish after Drain: %v", err)
	}
}

// TestSlowReaderBackpressure: with a full queue the reader waits (no event
// is lost), and PONGs it cannot read meanwhile are not held against the
// connection: the server answers no PING for several intervals while the
// application does not read, and the connection survives.
func TestSlowReaderBackpressure(t *testing.T) {
	f := newFakeServer(t)
	w := testWelcome()
	w.PingInterval = 50 * time.Millisecond
	c, fc := connect(t, f, w)
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1}, WithBuffer(1))
	const n = 50
	unanswered := make(chan struct{})
	go func() {
		for i := range uint64(n) {
			fc.write(wire.AppendData(nil, s.SubID, i+1, []byte("m")))
		}
		pings := 0
		for {
			h, body, err := fc.rd.Next()
			if err != nil {
				return
			}
			switch h.Type {
			case wire.TypePing:
				if pings++; pings == 5 {
					close(unanswered)
				}
				if pings > 5 {
					fc.write(wire.AppendPong(nil, h.ID))
				}
			case wire.TypePublish:
				fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: h.ID, Position: 99}}))
			default:
				t.Errorf("unexpected %v %x", h.Type, body)
			}
		}
	}()
	select {
	case <-unanswered:
	case <-time.After(testTimeout):
		t.Fatal("no PINGs")
	}
	for i := range uint64(n) {
		ev := nextEvent(t, sub)
		if ev.Kind != KindMessage || ev.Position != i+1 {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	if pos, err := c.Publish(ctxT(t), "ch", nil); err != nil || pos != 99 {
		t.Fatalf("connection did not survive: %d %v", pos, err)
	}
}

func TestDialOptionsValidation(t *testing.T) {
	for _, o := range []Option{
		WithName(string(make([]byte, 256))), WithToken(make([]byte, 4097)),
		WithBackoff(0, time.Second), WithBackoff(time.Second, time.Millisecond),
		WithMaxPending(0), WithLogger(nil), WithDialTimeout(0), WithDialer(nil),
	} {
		if _, err := Dial(ctxT(t), "127.0.0.1:1", o); !errors.Is(err, ErrInvalidOption) {
			t.Fatalf("err %v, want ErrInvalidOption", err)
		}
	}
	if _, err := Dial(ctxT(t), " , "); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("empty address list: %v", err)
	}
}

func TestBackoffBounds(t *testing.T) {
	c := &Conn{opts: options{backoffMin: 10 * time.Millisecond, backoffMax: 80 * time.Millisecond}}
	for n := range 100 {
		limit := min(10*time.Millisecond<<min(n, 10), 80*time.Millisecond)
		if d := c.backoff(n); d <= 0 || d > limit {
			t.Fatalf("backoff(%d) = %v, want (0, %v]", n, d, limit)
		}
	}
}

func TestSubscribeCancelledUnsubscribes(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Subscribe(ctx, "ch")
		errc <- err
	}()
	_, s := fc.expectSubscribe()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe: %v", err)
	}
	_, body := fc.expect(wire.TypeUnsubscribe)
	if subID, err := wire.DecodeUnsubscribe(body); err != nil || subID != s.SubID {
		t.Fatalf("UNSUBSCRIBE %d %v, want sub %d", subID, err, s.SubID)
	}
	// Not resumed after a reconnect.
	fc.close()
	fc2 := f.acceptWelcome(testWelcome())
	go func() { _, _ = c.Publish(ctxT(t), "ch", []byte("probe")) }()
	if _, _, p := fc2.expectPublish(); p != "probe" {
		t.Fatalf("payload %q", p)
	}
}

func TestPublishContextEndsAfterSend(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Publish(ctx, "ch", []byte("x"))
		errc <- err
	}()
	id, _, _ := fc.expectPublish()
	cancel()
	if err := <-errc; !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Publish: %v", err)
	}
	// The late ack still frees the window slot.
	fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 1}}))
	go func() {
		id, _, _ := fc.expectPublish()
		fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 2}}))
	}()
	if pos, err := c.Publish(ctxT(t), "ch", nil); err != nil || pos != 2 {
		t.Fatalf("next Publish: %d %v", pos, err)
	}
	if n := len(c.sem); n != 0 {
		t.Fatalf("window holds %d slots", n)
	}
}

// TestPublishCancelledContextSendsNothing: Publish (and PublishAsync) with
// a context that already ended return the context's error, as documented,
// and send nothing: the next frame the server reads is the next publish.
func TestPublishCancelledContextSendsNothing(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Publish(ctx, "ch", []byte("never")); err != context.Canceled {
		t.Fatalf("Publish with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := c.PublishAsync(ctx, "ch", []byte("never")); err != context.Canceled {
		t.Fatalf("PublishAsync with a cancelled context: %v, want context.Canceled", err)
	}
	got := make(chan string, 1)
	go func() {
		id, _, p := fc.expectPublish()
		got <- p
		fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 1}}))
	}()
	if _, err := c.Publish(ctxT(t), "ch", []byte("sent")); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p != "sent" {
		t.Fatalf("the server read %q first: a publish with a cancelled context was sent", p)
	}
	if n := len(c.sem); n != 0 {
		t.Fatalf("window holds %d slots", n)
	}
}

// TestReconnectGivesUpAfterAuthRefusals: while reconnecting, two handshakes
// in a row refused as UNAUTHENTICATED close the Conn for good with that
// refusal, instead of retrying credentials that cannot work; any other
// failure in between starts the count again.
func TestReconnectGivesUpAfterAuthRefusals(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	fc.close()
	refuse := func() {
		t.Helper()
		fc := f.accept()
		h, _ := fc.expect(wire.TypeHello)
		fc.write(wire.AppendError(nil, h.ID, wire.Error{Code: wire.CodeUnauthenticated, Text: "token revoked"}))
		fc.close()
	}
	refuse()
	plain := f.accept() // not a refusal: the count starts again
	plain.expect(wire.TypeHello)
	plain.close()
	refuse()
	refuse()
	_, err := c.Publish(ctxT(t), "after", []byte("x"))
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after the refusals: %v, want ErrClosed", err)
	}
	wantServerCode(t, err, wire.CodeUnauthenticated)
}

// TestPublishOutcomeUnknownCode: an ERROR OUTCOME_UNKNOWN answering a
// PUBLISH is no refusal: the SDK reports ErrUnknownOutcome (with the
// server's error reachable), while other codes stay definitive refusals.
func TestPublishOutcomeUnknownCode(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome())
	errs := make(chan error, 2)
	for range 2 {
		if err := c.PublishFunc(ctxT(t), "ch", []byte("x"), func(_ uint64, err error) { errs <- err }); err != nil {
			t.Fatal(err)
		}
	}
	id1, _, _ := fc.expectPublish()
	id2, _, _ := fc.expectPublish()
	fc.write(wire.AppendError(nil, id1, wire.Error{Code: wire.CodeOutcomeUnknown, Text: "host failed"}))
	fc.write(wire.AppendError(nil, id2, wire.Error{Code: wire.CodeUnavailable, Retriable: true}))
	err := <-errs
	if !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("OUTCOME_UNKNOWN: %v, want ErrUnknownOutcome", err)
	}
	wantServerCode(t, err, wire.CodeOutcomeUnknown)
	if err = <-errs; errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("UNAVAILABLE reported as unknown outcome: %v", err)
	}
	wantServerCode(t, err, wire.CodeUnavailable)
}
