package engine

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// rawFrame builds a frame with an arbitrary header and body.
func rawFrame(t wire.Type, f wire.Flags, id uint32, body []byte) []byte {
	b := make([]byte, wire.HeaderLen, wire.HeaderLen+len(body))
	binary.BigEndian.PutUint32(b[0:], uint32(len(body)))
	b[4], b[5] = byte(t), byte(f)
	binary.BigEndian.PutUint32(b[6:], id)
	return append(b, body...)
}

// headerOnly is a header declaring n body bytes, without the body.
func headerOnly(t wire.Type, id uint32, n uint32) []byte {
	b := make([]byte, wire.HeaderLen)
	binary.BigEndian.PutUint32(b[0:], n)
	b[4] = byte(t)
	binary.BigEndian.PutUint32(b[6:], id)
	return b
}

// probe checks that the server still serves a fresh client: one
// connection subscribes, another publishes, the message arrives.
func probe(t *testing.T, s *Server) {
	t.Helper()
	sub, _ := helloRaw(t, s.Addr())
	sub.subscribe(1, "probe", wire.StartLive, 0)
	pub, _ := helloRaw(t, s.Addr())
	p := pub.publish("probe", []byte("still serving"))
	if ev := sub.events(1)[0]; ev.pos != p || ev.payload != "still serving" {
		t.Fatalf("probe got %v, want position %d", ev, p)
	}
	sub.nc.Close()
	pub.nc.Close()
}

// expectUsable checks that the connection still answers a PING.
func (c *rawConn) expectUsable() {
	c.t.Helper()
	c.write(wire.AppendPing(nil, 4242))
	for {
		h, body := c.next()
		if h.Type == wire.TypePong && h.ID == 4242 {
			return
		}
		if h.Type == wire.TypeError || h.Type == wire.TypeGoAway {
			c.t.Fatalf("connection not usable: %s", describe(h, body))
		}
	}
}

func subscribeFrame(id uint32, subID uint32, k wire.StartKind, arg uint64, ch string) []byte {
	return wire.AppendSubscribe(nil, id, wire.Subscribe{SubID: subID, Start: k, Arg: arg, Channel: []byte(ch)})
}

func TestMalformedInputGetsDocumentedError(t *testing.T) {
	s := startTest(t, func(o *Options) {
		o.MaxPayload = 1024
		o.MaxSubsPerConn = 3
	})
	maxBody := wire.MaxBodyFor(1024)
	hello := func(lo, hi uint16) []byte {
		return wire.AppendHello(nil, 1, wire.Hello{MinVersion: lo, MaxVersion: hi, Name: "t"})
	}
	validSub := subscribeFrame(0, 1, wire.StartLive, 0, "ok")[wire.HeaderLen:]

	cases := []struct {
		name    string
		noHello bool     // send before the handshake
		setup   [][]byte // frames sent (answers skipped) before input
		input   []byte
		code    wire.Code
		id      uint32 // the ERROR's id
		fatal   bool
	}{
		{name: "unknown type", input: rawFrame(0x30, 0, 7, nil), code: wire.CodeUnknownType, id: 7, fatal: true},
		{name: "node-to-node type", input: rawFrame(0x41, 0, 7, nil), code: wire.CodeUnknownType, id: 7, fatal: true},
		{name: "server-to-client type", input: wire.AppendGap(nil, 7, wire.Gap{From: 1, To: 2, Reason: wire.GapSlow}), code: wire.CodeUnknownType, id: 7, fatal: true},
		{name: "length over the limit", input: headerOnly(wire.TypePublish, 7, maxBody+1), code: wire.CodeFrameTooLarge, fatal: true},
		{name: "length over the limit before HELLO", noHello: true, input: headerOnly(wire.TypeHello, 7, wire.MinMaxBody+1), code: wire.CodeFrameTooLarge, fatal: true},
		{name: "truncated PUBLISH", input: rawFrame(wire.TypePublish, 0, 7, []byte{10, 'a', 'b'}), code: wire.CodeProtocolError, fatal: true},
		{name: "PUBLISH with empty channel", input: rawFrame(wire.TypePublish, 0, 7, []byte{0, 'x'}), code: wire.CodeProtocolError, fatal: true},
		{name: "truncated SUBSCRIBE", input: rawFrame(wire.TypeSubscribe, 0, 7, validSub[:len(validSub)-1]), code: wire.CodeProtocolError, fatal: true},
		{name: "SUBSCRIBE with extra byte", input: rawFrame(wire.TypeSubscribe, 0, 7, append(append([]byte(nil), validSub...), 0)), code: wire.CodeProtocolError, fatal: true},
		{name: "SUBSCRIBE with unknown start", input: func() []byte {
			b := append([]byte(nil), validSub...)
			b[4] = 9
			return rawFrame(wire.TypeSubscribe, 0, 7, b)
		}(), code: wire.CodeProtocolError, fatal: true},
		{name: "truncated UNSUBSCRIBE", input: rawFrame(wire.TypeUnsubscribe, 0, 7, []byte{0, 0, 1}), code: wire.CodeProtocolError, fatal: true},
		{name: "PING with a body", input: rawFrame(wire.TypePing, 0, 7, []byte{1}), code: wire.CodeProtocolError, fatal: true},
		{name: "PONG with a body", input: rawFrame(wire.TypePong, 0, 7, []byte{1}), code: wire.CodeProtocolError, fatal: true},
		{name: "truncated HELLO", noHello: true, input: rawFrame(wire.TypeHello, 0, 7, []byte{0, 1, 0}), code: wire.CodeProtocolError, fatal: true},
		{name: "COMPRESSED not negotiated", input: func() []byte {
			b := wire.AppendPublish(nil, 7, 0, "ok", []byte("x"))
			b[5] |= byte(wire.FlagCompressed)
			return b
		}(), code: wire.CodeProtocolError, fatal: true},
		{name: "unsupported version", noHello: true, input: hello(2, 3), code: wire.CodeUnsupportedVersion, id: 1, fatal: true},
		{name: "frame before HELLO", noHello: true, input: wire.AppendPing(nil, 7), code: wire.CodeHelloRequired, id: 7, fatal: true},
		{name: "second HELLO", input: wire.AppendHello(nil, 7, wire.Hello{MinVersion: 1, MaxVersion: 1}), code: wire.CodeHelloRequired, id: 7, fatal: true},
		{name: "invalid channel on PUBLISH", input: wire.AppendPublish(nil, 7, wire.FlagAck, "a b", []byte("x")), code: wire.CodeInvalidChannel, id: 7},
		{name: "control character in channel", input: wire.AppendPublish(nil, 7, wire.FlagAck, "a\x01", []byte("x")), code: wire.CodeInvalidChannel, id: 7},
		{name: "channel not UTF-8", input: wire.AppendPublish(nil, 7, wire.FlagAck, "\xff\xfe", []byte("x")), code: wire.CodeInvalidChannel, id: 7},
		{name: "invalid channel on SUBSCRIBE", input: subscribeFrame(7, 1, wire.StartLive, 0, "no\u00a0break"), code: wire.CodeInvalidChannel, id: 7},
		{name: "payload too large", input: wire.AppendPublish(nil, 7, wire.FlagAck, "ok", make([]byte, 1025)), code: wire.CodePayloadTooLarge, id: 7},
		{name: "too many subscriptions", setup: [][]byte{
			subscribeFrame(2, 1, wire.StartLive, 0, "a"), subscribeFrame(3, 2, wire.StartLive, 0, "b"), subscribeFrame(4, 3, wire.StartLive, 0, "c"),
		}, input: subscribeFrame(7, 4, wire.StartLive, 0, "d"), code: wire.CodeTooManySubscriptions, id: 7},
		{name: "duplicate subscription id", setup: [][]byte{subscribeFrame(2, 5, wire.StartLive, 0, "a")},
			input: subscribeFrame(7, 5, wire.StartLive, 0, "b"), code: wire.CodeSubscriptionExists, id: 7},
		{name: "unknown subscription", input: wire.AppendUnsubscribe(nil, 7, 99), code: wire.CodeUnknownSubscription, id: 7},
		{name: "position 0 start", input: subscribeFrame(7, 1, wire.StartPosition, 0, "ok"), code: wire.CodeInvalidStart, id: 7},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, s.Addr())
			if !tc.noHello {
				if _, err := c.handshakeErr(); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range tc.setup {
				c.write(f)
				if h, body := c.next(); h.Type == wire.TypeError {
					t.Fatalf("setup frame answered by %s", describe(h, body))
				}
			}
			c.write(tc.input)
			h, e := c.expectErrorFrame()
			if e.Code != tc.code || h.ID != tc.id {
				t.Fatalf("got ERROR id=%d %v, want id=%d %v", h.ID, e, tc.id, tc.code)
			}
			if e.Retriable != tc.code.Retriable() {
				t.Fatalf("RETRIABLE flag %v on %v", e.Retriable, e.Code)
			}
			if tc.fatal {
				c.expectClosed()
			} else {
				c.expectUsable()
			}
			probe(t, s)
		})
	}
}

func TestNonFatalErrorsKeepConnectionWorking(t *testing.T) {
	s := startTest(t, func(o *Options) { o.MaxPayload = 1024; o.MaxSubsPerConn = 2 })
	c, _ := helloRaw(t, s.Addr())
	c.write(wire.AppendPublish(nil, 50, wire.FlagAck, "bad name", []byte("x")))
	c.write(wire.AppendPublish(nil, 51, wire.FlagAck, "ok", make([]byte, 2000)))
	for _, want := range []wire.Code{wire.CodeInvalidChannel, wire.CodePayloadTooLarge} {
		if e := c.expectError(); e.Code != want {
			t.Fatalf("got %v, want %v", e, want)
		}
	}
	if _, ok := stateInfo(s, "bad name"); ok {
		t.Fatal("an invalid channel was created")
	}
	p := c.publish("ok", []byte("fine"))
	c.subscribe(1, "x", wire.StartLive, 0)
	c.subscribe(2, "y", wire.StartLive, 0)
	c.write(subscribeFrame(60, 3, wire.StartLive, 0, "z"))
	if e := c.expectError(); e.Code != wire.CodeTooManySubscriptions {
		t.Fatalf("got %v", e)
	}
	// Unsubscribing frees a slot; the id may then be reused.
	c.write(wire.AppendUnsubscribe(nil, 61, 1))
	if h, body := c.next(); h.Type != wire.TypeUnsubscribed || h.ID != 61 {
		t.Fatalf("got %s, want UNSUBSCRIBED 61", describe(h, body))
	}
	sb := c.subscribe(1, "ok", wire.StartPosition, p)
	if sb.First != p {
		t.Fatalf("SUBSCRIBED %+v, want first %d", sb, p)
	}
	if ev := c.events(1)[0]; ev.pos != p || ev.sub != 1 || ev.payload != "fine" {
		t.Fatalf("got %v", ev)
	}
}

func TestHandshakeTimeout(t *testing.T) {
	s := startTest(t, func(o *Options) { o.HandshakeTimeout = 150 * time.Millisecond })
	silent := dialRaw(t, s.Addr())
	partial := dialRaw(t, s.Addr())
	partial.write(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "slow"})[:7])
	for _, c := range []*rawConn{silent, partial} {
		h, e := c.expectErrorFrame()
		if e.Code != wire.CodeHandshakeTimeout || h.ID != 0 {
			t.Fatalf("got ERROR id=%d %v, want id=0 HANDSHAKE_TIMEOUT", h.ID, e)
		}
		c.expectClosed()
	}
	// A client that completes the handshake in time stays connected past
	// the timeout.
	ok, _ := helloRaw(t, s.Addr())
	deadline := time.Now().Add(3 * 150 * time.Millisecond)
	for time.Now().Before(deadline) {
		ok.expectUsable()
	}
	probe(t, s)
}

func TestMaxConnectionsExceeded(t *testing.T) {
	s := startTest(t, func(o *Options) { o.MaxConns = 3 })
	var held []*rawConn
	for range 3 {
		c, _ := helloRaw(t, s.Addr())
		held = append(held, c)
	}
	extra := dialRaw(t, s.Addr())
	h, e := extra.expectErrorFrame()
	if e.Code != wire.CodeTooManyConnections || h.ID != 0 {
		t.Fatalf("got ERROR id=%d %v, want id=0 TOO_MANY_CONNECTIONS", h.ID, e)
	}
	extra.expectClosed()
	for _, c := range held {
		c.expectUsable()
	}
	// Closing one makes room again (the server notices the close
	// asynchronously, so wait for its count).
	held[0].nc.Close()
	held[1].nc.Close()
	eventually(t, waitFor, "closed connections counted", func() bool { return s.conns.Load() <= 1 })
	probe(t, s)
}
