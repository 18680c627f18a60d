package client

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

func headersWelcome() wire.Welcome {
	w := testWelcome()
	w.Features = wire.FeatureHeaders
	return w
}

// expectPublishExt reads a PUBLISH and decodes its extended body (none:
// a zero Ext with the payload).
func (fc *fakeConn) expectPublishExt() (uint32, wire.Flags, wire.Ext) {
	fc.t.Helper()
	h, body := fc.expect(wire.TypePublish)
	_, rest, err := wire.DecodePublish(body)
	if err != nil {
		fc.t.Fatal(err)
	}
	if h.Flags&wire.FlagExt == 0 {
		return h.ID, h.Flags, wire.Ext{Payload: rest}
	}
	e, err := wire.ParseExt(rest, wire.TypePublish)
	if err != nil {
		fc.t.Fatal(err)
	}
	return h.ID, h.Flags, e
}

var testHdrs = []Header{{Key: "traceparent", Value: "00-abc-def-01"}, {Key: "ct", Value: "json"}}

func TestPublishMsgHeadersAndID(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, headersWelcome())
	done := make(chan struct{})
	go func() {
		defer close(done)
		id, flags, e := fc.expectPublishExt()
		if flags != wire.FlagAck|wire.FlagExt || string(e.MsgID) != "order-1" || string(e.Payload) != "p" ||
			!reflect.DeepEqual(wire.AppendHeaderFields(nil, e.Headers), testHdrs) {
			t.Errorf("PUBLISH flags %v ext %+v", flags, e)
		}
		fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 5}}))
		// A Msg without id and headers is a plain PUBLISH.
		id, flags, e = fc.expectPublishExt()
		if flags != wire.FlagAck || string(e.Payload) != "plain" {
			t.Errorf("plain PUBLISH flags %v payload %q", flags, e.Payload)
		}
		fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 6}}))
	}()
	if pos, err := c.PublishMsg(ctxT(t), "ch", Msg{Payload: []byte("p"), Headers: testHdrs, ID: []byte("order-1")}); err != nil || pos != 5 {
		t.Fatalf("PublishMsg: %d %v", pos, err)
	}
	a, err := c.PublishMsgAsync(ctxT(t), "ch", Msg{Payload: []byte("plain")})
	if err != nil {
		t.Fatal(err)
	}
	if pos, err := a.Wait(ctxT(t)); err != nil || pos != 6 {
		t.Fatalf("PublishMsgAsync: %d %v", pos, err)
	}
	<-done
}

func TestPublishMsgRefusedLocally(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, testWelcome()) // no FeatureHeaders
	cases := []struct {
		m    Msg
		want error
	}{
		{Msg{Headers: []Header{{Key: "bad key", Value: "v"}}}, ErrInvalidHeaders},
		{Msg{Headers: []Header{{Key: "k", Value: "a\nb"}}}, wire.ErrInvalidHeaders},
		{Msg{ID: make([]byte, 256)}, ErrInvalidHeaders},
		{Msg{Headers: testHdrs}, ErrHeadersUnsupported},
		{Msg{ID: []byte("x")}, ErrHeadersUnsupported},
	}
	for _, tc := range cases {
		if _, err := c.PublishMsg(ctxT(t), "ch", tc.m); !errors.Is(err, tc.want) {
			t.Fatalf("PublishMsg(%+v) = %v, want %v", tc.m, err, tc.want)
		}
	}
	// Nothing was sent, and the window is free: a plain publish goes out.
	go func() {
		id, _, _ := fc.expectPublish()
		fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 1}}))
	}()
	if _, err := c.Publish(ctxT(t), "ch", []byte("x")); err != nil {
		t.Fatal(err)
	}
	// Headers count against max payload.
	f2 := newFakeServer(t)
	w := headersWelcome()
	w.MaxPayload = 10
	c2, _ := connect(t, f2, w)
	if _, err := c2.PublishMsg(ctxT(t), "ch", Msg{Payload: make([]byte, 8), ID: []byte("id")}); !errors.Is(err, ErrPayloadTooLarge) {
		t.Fatalf("payload+id over max: %v", err)
	}
}

func TestSubscribeDeliversHeaders(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, headersWelcome())
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	run := wire.AppendRecord(nil, []byte("plain"))
	run = wire.AppendRecordExt(run, wire.AppendExt(nil, []byte("m1"), testHdrs, []byte("with")), true)
	run = wire.AppendRecordExt(run, wire.AppendExt(nil, []byte("m2"), nil, []byte("idonly")), true)
	frame := wire.AppendDataHeader(nil, s.SubID, 1, 3, len(run))
	fc.write(append(frame, run...))
	ev := nextEvent(t, sub)
	wantMessage(t, ev, 1, "plain")
	if ev.Headers != nil || ev.MsgID != nil {
		t.Fatalf("plain message has %v %q", ev.Headers, ev.MsgID)
	}
	ev = nextEvent(t, sub)
	wantMessage(t, ev, 2, "with")
	if !reflect.DeepEqual(ev.Headers, testHdrs) || string(ev.MsgID) != "m1" {
		t.Fatalf("headers %v id %q", ev.Headers, ev.MsgID)
	}
	ev = nextEvent(t, sub)
	wantMessage(t, ev, 3, "idonly")
	if ev.Headers != nil || string(ev.MsgID) != "m2" {
		t.Fatalf("headers %v id %q", ev.Headers, ev.MsgID)
	}
}

// TestIdempotentResendAfterCut: with WithIdempotence, a publish whose
// connection is cut between PUBLISH and PUBACK is sent again, byte for byte
// with the same message id, on the next connection, ahead of later
// publishes; the caller sees one success.
func TestIdempotentResendAfterCut(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, headersWelcome(), WithIdempotence(0))
	a1, err := c.PublishAsync(ctxT(t), "ch", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := c.PublishMsgAsync(ctxT(t), "ch", Msg{Payload: []byte("two"), ID: []byte("explicit")})
	if err != nil {
		t.Fatal(err)
	}
	_, _, e1 := fc.expectPublishExt()
	_, _, e2 := fc.expectPublishExt()
	if len(e1.MsgID) != autoIDLen || string(e1.Payload) != "one" || string(e2.MsgID) != "explicit" {
		t.Fatalf("first send: %+v %+v", e1, e2)
	}
	seq1 := binary.BigEndian.Uint64(e1.MsgID[producerIDLen:])
	id1 := bytes.Clone(e1.MsgID)
	fc.close() // cut before the PUBACKs

	fc2 := f.acceptWelcome(headersWelcome())
	r1, _, e1b := fc2.expectPublishExt()
	r2, _, e2b := fc2.expectPublishExt()
	if !bytes.Equal(e1b.MsgID, id1) || string(e1b.Payload) != "one" || string(e2b.MsgID) != "explicit" {
		t.Fatalf("resent: %q %q / %q", e1b.MsgID, e1b.Payload, e2b.MsgID)
	}
	// A publish issued now comes after the resent ones, with the next id.
	a3, err := c.PublishAsync(ctxT(t), "ch", []byte("three"))
	if err != nil {
		t.Fatal(err)
	}
	r3, _, e3 := fc2.expectPublishExt()
	if !bytes.Equal(e3.MsgID[:producerIDLen], id1[:producerIDLen]) || binary.BigEndian.Uint64(e3.MsgID[producerIDLen:]) != seq1+1 { // the explicit id took no sequence number
		t.Fatalf("third id %x after %x", e3.MsgID, id1)
	}
	fc2.write(wire.AppendPubAck(nil, []wire.Ack{{ID: r1, Position: 10}, {ID: r2, Position: 11}, {ID: r3, Position: 12}}))
	for i, a := range []*PubAck{a1, a2, a3} {
		if pos, err := a.Wait(ctxT(t)); err != nil || pos != uint64(10+i) {
			t.Fatalf("publish %d: %d %v", i, pos, err)
		}
	}
	if n := c.Resent(); n != 2 {
		t.Fatalf("Resent() = %d, want 2", n)
	}
}

// TestIdempotentRetryTimeOver: a publish not acknowledged within its retry
// time ends with ErrUnknownOutcome; without WithIdempotence nothing is
// resent.
func TestIdempotentRetryTimeOver(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, headersWelcome(), WithIdempotence(time.Nanosecond))
	a, err := c.PublishAsync(ctxT(t), "ch", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	fc.expectPublishExt()
	fc.close()
	if _, err := a.Wait(ctxT(t)); !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("after the retry time: %v", err)
	}
	if c.Resent() != 0 {
		t.Fatal("resent")
	}
	// The Conn closing ends kept publishes too.
	f2 := newFakeServer(t)
	c2, fc2 := connect(t, f2, headersWelcome(), WithIdempotence(time.Hour))
	a2, err := c2.PublishAsync(ctxT(t), "ch", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	fc2.expectPublishExt()
	_ = f2.ln.Close() // no reconnect can succeed
	fc2.close()
	go func() { _ = c2.Close() }()
	if _, err := a2.Wait(ctxT(t)); !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestRetryLimit: a publish with a message id is resent at most for the
// Conn's retry time and never past nine tenths of the dedup window the
// server announced; a server announcing none leaves the retry time.
func TestRetryLimit(t *testing.T) {
	for _, tc := range []struct {
		retryFor, window, want time.Duration
	}{
		{time.Minute, 0, time.Minute},
		{time.Minute, 2 * time.Minute, time.Minute},
		{time.Minute, time.Minute, 54 * time.Second},
		{2 * time.Minute, 10 * time.Second, 9 * time.Second},
		{time.Second, time.Millisecond, 900 * time.Microsecond},
	} {
		if got := retryLimit(tc.retryFor, wire.Welcome{DedupWindow: tc.window}); got != tc.want {
			t.Errorf("retryLimit(%v, window %v) = %v, want %v", tc.retryFor, tc.window, got, tc.want)
		}
	}
}

// TestIdempotentResendNotPastTheWindow: a publish cut before its PUBACK is
// not resent to a server whose announced dedup window is already over for
// it (it might be stored twice there): it ends with ErrUnknownOutcome,
// although the Conn's retry time is not over.
func TestIdempotentResendNotPastTheWindow(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, headersWelcome(), WithIdempotence(time.Hour))
	sent := time.Now()
	a, err := c.PublishAsync(ctxT(t), "ch", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	fc.expectPublishExt()
	fc.close()
	short := headersWelcome()
	short.DedupWindow = time.Millisecond // 0.9 ms to resend in
	// The clock must pass the bound before the next server answers (a
	// wait on elapsed time, not on another goroutine).
	for time.Since(sent) < 2*time.Millisecond {
		runtime.Gosched()
	}
	fc2 := f.acceptWelcome(short)
	if _, err := a.Wait(ctxT(t)); !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("resend past the window: %v", err)
	}
	if c.Resent() != 0 {
		t.Fatal("resent past the server's window")
	}
	// A publish issued now is sent on the new connection as usual.
	if _, err := c.PublishAsync(ctxT(t), "ch", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if _, _, e := fc2.expectPublishExt(); string(e.Payload) != "two" {
		t.Fatalf("next publish %q", e.Payload)
	}
	// The announced window is what the Conn sees.
	if w, ok := c.Welcome(); !ok || w.DedupWindow != time.Millisecond {
		t.Fatalf("Welcome %+v %v", w, ok)
	}
}
