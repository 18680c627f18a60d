package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client"
	"github.com/sluice-rtm/sluice/wire"
)

// helloFeat dials and completes a handshake offering features.
func helloFeat(t testing.TB, addr string, f wire.Features) (*rawConn, wire.Welcome) {
	t.Helper()
	c := dialRaw(t, addr)
	c.write(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Features: f, Name: "test"}))
	h, body := c.next()
	if h.Type != wire.TypeWelcome {
		t.Fatalf("want WELCOME, got %s", describe(h, body))
	}
	w, err := wire.DecodeWelcome(body)
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// publishFrame sends one acked frame and returns the position of its
// PUBACK (DATA for own subscriptions is skipped).
func (c *rawConn) publishFrame(f []byte) uint64 {
	c.t.Helper()
	c.write(f)
	for {
		h, body := c.next()
		switch h.Type {
		case wire.TypePubAck:
			acks, err := wire.DecodePubAck(body, nil)
			if err != nil || len(acks) != 1 {
				c.t.Fatalf("PUBACK %v %v", acks, err)
			}
			return acks[0].Position
		case wire.TypeError, wire.TypeGoAway:
			c.t.Fatalf("publish answered by %s", describe(h, body))
		}
	}
}

// rec is one delivered record as a subscriber saw it.
type rec struct {
	pos     uint64
	ext     bool
	id      string
	headers []wire.HeaderField
	payload string
}

// records reads DATA frames (inflating compressed ones) until n records
// arrived; it reports whether any frame was compressed.
func (c *rawConn) records(n int) ([]rec, bool) {
	c.t.Helper()
	var out []rec
	compressed := false
	for len(out) < n {
		h, body := c.next()
		if h.Type != wire.TypeData {
			if h.Type == wire.TypeError || h.Type == wire.TypeGap {
				c.t.Fatalf("got %s", describe(h, body))
			}
			continue
		}
		var first uint64
		var recs []byte
		var err error
		if h.Flags&wire.FlagCompressed != 0 {
			compressed = true
			first, _, recs, _, err = wire.DecodeDataS2(body, nil, 64<<20)
		} else {
			first, _, recs, err = wire.DecodeData(body)
		}
		if err != nil {
			c.t.Fatal(err)
		}
		for i := uint64(0); ; i++ {
			b, ext, rest, ok := wire.NextRecordExt(recs)
			if !ok {
				break
			}
			r := rec{pos: first + i, ext: ext, payload: string(b)}
			if ext {
				e, err := wire.ParseExt(b, wire.TypeData)
				if err != nil {
					c.t.Fatal(err)
				}
				r.id, r.headers, r.payload = string(e.MsgID), wire.AppendHeaderFields(nil, e.Headers), string(e.Payload)
			}
			out = append(out, r)
			recs = rest
		}
	}
	return out, compressed
}

var tHdrs = []wire.HeaderField{{Key: "traceparent", Value: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, {Key: "ct", Value: "json"}}

func TestFeatureNegotiation(t *testing.T) {
	s := startTest(t, nil)
	for _, tc := range []struct{ offer, want wire.Features }{
		{0, 0},
		{wire.FeatureHeaders, wire.FeatureHeaders},
		{wire.FeatureS2 | wire.FeatureHeaders | 1<<9, wire.FeatureS2 | wire.FeatureHeaders},
	} {
		if _, w := helloFeat(t, s.Addr(), tc.offer); w.Features != tc.want {
			t.Fatalf("offered %v, accepted %v, want %v", tc.offer, w.Features, tc.want)
		}
	}
}

// TestHeadersDeliveredAndStripped: a subscriber with FeatureHeaders gets
// the publisher's extended records as they are; one without gets the same
// batch with payloads alone, at the same positions.
func TestHeadersDeliveredAndStripped(t *testing.T) {
	s := startTest(t, nil)
	news, _ := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	olds, _ := helloFeat(t, s.Addr(), 0)
	news.subscribe(1, "h", wire.StartLive, 0)
	olds.subscribe(2, "h", wire.StartLive, 0)
	pub, _ := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	p1 := pub.publishFrame(wire.AppendPublish(nil, pub.nextID(), wire.FlagAck, "h", []byte("plain")))
	p2 := pub.publishFrame(wire.AppendPublishExt(nil, pub.nextID(), wire.FlagAck, "h", []byte("m-1"), tHdrs, []byte("with")))
	p3 := pub.publishFrame(wire.AppendPublishExt(nil, pub.nextID(), wire.FlagAck, "h", nil, tHdrs[1:], []byte("hdr only")))
	if p2 != p1+1 || p3 != p2+1 {
		t.Fatalf("positions %d %d %d", p1, p2, p3)
	}
	got, _ := news.records(3)
	want := []rec{{p1, false, "", nil, "plain"}, {p2, true, "m-1", tHdrs, "with"}, {p3, true, "", tHdrs[1:], "hdr only"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("headers subscriber got %+v\nwant %+v", got, want)
	}
	got, _ = olds.records(3)
	want = []rec{{p1, false, "", nil, "plain"}, {p2, false, "", nil, "with"}, {p3, false, "", nil, "hdr only"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("old subscriber got %+v\nwant %+v", got, want)
	}
	// A replay from the start gets the same, per kind.
	news2, _ := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	news2.subscribe(3, "h", wire.StartEarliest, 0)
	if got, _ := news2.records(3); !got[1].ext || got[1].id != "m-1" {
		t.Fatalf("replay %+v", got)
	}
	olds2, _ := helloFeat(t, s.Addr(), 0)
	olds2.subscribe(4, "h", wire.StartEarliest, 0)
	if got, _ := olds2.records(3); got[1].ext || got[1].payload != "with" {
		t.Fatalf("old replay %+v", got)
	}
}

func TestPublishExtRefused(t *testing.T) {
	s := startTest(t, nil)
	// EXT without FeatureHeaders is malformed.
	c, _ := helloFeat(t, s.Addr(), 0)
	c.write(wire.AppendPublishExt(nil, 5, wire.FlagAck, "h", []byte("id"), nil, []byte("p")))
	if e := c.expectError(); e.Code != wire.CodeProtocolError {
		t.Fatalf("got %v", e)
	}
	c.expectClosed()
	// Bad keys or values: INVALID_HEADERS, the connection carries on.
	c, _ = helloFeat(t, s.Addr(), wire.FeatureHeaders)
	bad := wire.AppendPublishExt(nil, 6, wire.FlagAck, "h", nil, []wire.HeaderField{{Key: "bad key", Value: "v"}}, []byte("p"))
	c.write(bad)
	h, e := c.expectErrorFrame()
	if e.Code != wire.CodeInvalidHeaders || h.ID != 6 {
		t.Fatalf("got %v id %d", e, h.ID)
	}
	c.id = 10
	if pos := c.publishFrame(wire.AppendPublish(nil, c.nextID(), wire.FlagAck, "h", []byte("ok"))); pos == 0 {
		t.Fatalf("position %d", pos)
	}
	// A broken layout is malformed.
	body := append([]byte{1, 'h'}, 0x00) // ext flags 0
	c.write(append(wire.AppendHeader(nil, wire.TypePublish, wire.FlagAck|wire.FlagExt, 12, len(body)), body...))
	if e := c.expectError(); e.Code != wire.CodeProtocolError {
		t.Fatalf("got %v", e)
	}
	c.expectClosed()
	// Id and headers count against max payload.
	s2 := startTest(t, func(o *Options) { o.MaxPayload = 100; o.LimitSize = 1 << 20 })
	c, _ = helloFeat(t, s2.Addr(), wire.FeatureHeaders)
	c.write(wire.AppendPublishExt(nil, 7, wire.FlagAck, "h", []byte("id"), nil, make([]byte, 98)))
	if e := c.expectError(); e.Code != wire.CodePayloadTooLarge {
		t.Fatalf("got %v", e)
	}
}

// TestDedupExplicitID: a message id published again within the window is
// answered with the first position and stored once, across a streamlet
// rollover; other ids and other channels are not affected.
func TestDedupExplicitID(t *testing.T) {
	s := startTest(t, func(o *Options) { o.LimitMsgs = 2 })
	c, _ := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	pubID := func(ch, id, p string) uint64 {
		return c.publishFrame(wire.AppendPublishExt(nil, c.nextID(), wire.FlagAck, ch, []byte(id), nil, []byte(p)))
	}
	a := pubID("d", "a", "1")
	if again := pubID("d", "a", "1 again"); again != a {
		t.Fatalf("repeat got %d, first %d", again, a)
	}
	b := pubID("d", "b", "2")
	x := pubID("d", "x", "3") // a new streamlet: LimitMsgs is 2
	if b != a+1 || x != b+1 {
		t.Fatalf("positions %d %d %d", a, b, x)
	}
	if again := pubID("d", "a", "after rollover"); again != a {
		t.Fatalf("after rollover got %d, first %d", again, a)
	}
	o1 := pubID("other", "a", "other channel")
	if o2 := pubID("other", "b", "other channel"); o2 != o1+1 {
		t.Fatalf("other channel got %d %d: id a was taken for the other channel's", o1, o2)
	}
	sub, _ := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	sub.subscribe(1, "d", wire.StartEarliest, 0)
	got, _ := sub.records(3)
	if got[0].payload != "1" || got[1].payload != "2" || got[2].payload != "3" {
		t.Fatalf("stored %+v", got)
	}
	if p := pubID("d", "y", "4"); p != x+1 {
		t.Fatalf("next position %d, want %d: something extra was stored", p, x+1)
	}
	if st := s.host.Dedup(); st.Duplicates != 2 {
		t.Fatalf("dedup stats %+v", st)
	}
}

// TestDedupWindowExpires: past the window an id is new again.
func TestDedupWindowExpires(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	s := startTest(t, func(o *Options) {
		o.DedupWindow = time.Minute
		o.LimitLife = time.Hour
		o.now = func() time.Time { return time.Unix(0, now.Load()) }
	})
	c, _ := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	first := c.publishFrame(wire.AppendPublishExt(nil, c.nextID(), wire.FlagAck, "w", []byte("a"), nil, nil))
	now.Add(int64(59 * time.Second))
	if p := c.publishFrame(wire.AppendPublishExt(nil, c.nextID(), wire.FlagAck, "w", []byte("a"), nil, nil)); p != first {
		t.Fatalf("within the window: %d", p)
	}
	now.Add(int64(2 * time.Second))
	if p := c.publishFrame(wire.AppendPublishExt(nil, c.nextID(), wire.FlagAck, "w", []byte("a"), nil, nil)); p != first+1 {
		t.Fatalf("after the window: %d, want %d", p, first+1)
	}
}

func jsonLike(n int, seed int) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		b = fmt.Appendf(b, `{"id":%d,"sensor":"probe-%d","ts":%d,"value":%d.%03d},`, (seed*7919+i*104729)%1000003, (seed+i)%37, 1764547200000+int64(seed*1000+i), (seed*31+i*17)%100, (seed+i*7)%1000)
	}
	return b[:n]
}

// TestS2PublishAndData: compressed publishes are stored uncompressed; an
// S2 subscriber gets large batches as one S2 block, the others as they
// are; a publish whose block claims more than max payload closes only its
// connection.
func TestS2PublishAndData(t *testing.T) {
	s := startTest(t, nil)
	zsub, w := helloFeat(t, s.Addr(), wire.FeatureS2)
	if w.Features != wire.FeatureS2 {
		t.Fatalf("features %v", w.Features)
	}
	plain, _ := helloFeat(t, s.Addr(), 0)
	zsub.subscribe(1, "z", wire.StartLive, 0)
	plain.subscribe(2, "z", wire.StartLive, 0)
	cl, err := client.Dial(context.Background(), s.Addr(), client.WithCompression(client.DefaultCompressMin))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	payload := jsonLike(8<<10, 1)
	if _, err := cl.Publish(context.Background(), "z", payload); err != nil {
		t.Fatal(err)
	}
	if cl.Compressed() != 1 {
		t.Fatalf("the SDK compressed %d publishes", cl.Compressed())
	}
	got, compressed := zsub.records(1)
	if !compressed || got[0].payload != string(payload) {
		t.Fatalf("S2 subscriber: compressed %v, payload ok %v", compressed, got[0].payload == string(payload))
	}
	got, compressed = plain.records(1)
	if compressed || got[0].payload != string(payload) {
		t.Fatalf("plain subscriber: compressed %v", compressed)
	}
	if s.s2Batches.Load() != 1 {
		t.Fatalf("%d batches compressed", s.s2Batches.Load())
	}
	// A small payload is not compressed for anyone.
	if _, err := cl.Publish(context.Background(), "z", []byte("tiny")); err != nil {
		t.Fatal(err)
	}
	if _, compressed := zsub.records(1); compressed {
		t.Fatal("tiny batch compressed")
	}
	// Bombs and COMPRESSED without S2: PROTOCOL_ERROR, connection closed.
	for _, tc := range []struct {
		name string
		f    wire.Features
		body []byte
	}{
		{"claims 1 GiB", wire.FeatureS2, append([]byte{1, 'z'}, binary.AppendUvarint(nil, 1<<30)...)},
		{"claims max payload + 1", wire.FeatureS2, append([]byte{1, 'z'}, binary.AppendUvarint(nil, 1<<20+1)...)},
		{"corrupt block", wire.FeatureS2, append([]byte{1, 'z'}, 0x0a, 0xff, 0xff)},
		{"not negotiated", 0, append([]byte{1, 'z'}, wire.AppendS2(nil, []byte("hello"))...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := helloFeat(t, s.Addr(), tc.f)
			c.write(append(wire.AppendHeader(nil, wire.TypePublish, wire.FlagAck|wire.FlagCompressed, 9, len(tc.body)), tc.body...))
			if e := c.expectError(); e.Code != wire.CodeProtocolError {
				t.Fatalf("got %v", e)
			}
			c.expectClosed()
		})
	}
	// The others carry on.
	if _, err := cl.Publish(context.Background(), "z", []byte("still")); err != nil {
		t.Fatal(err)
	}
}

// cutProxy forwards TCP between clients and target; the first time the
// server sends a PUBACK on a connection it cuts that connection instead of
// forwarding it, so the publish is stored and its acknowledgement lost.
type cutProxy struct {
	ln   net.Listener
	cuts atomic.Int32
	wg   sync.WaitGroup
	// cutAfter, when set, is the type of frame after which the first cut
	// happens (the frame is forwarded first) instead of the PUBACK.
	cutAfter wire.Type
}

func newCutProxy(t *testing.T, target string) *cutProxy { return newCutProxyAfter(t, target, 0) }

// newCutProxyAfter is a cutProxy that cuts after the first frame of type
// after (0: at the first PUBACK).
func newCutProxyAfter(t *testing.T, target string, after wire.Type) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, cutAfter: after}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			cc, err := ln.Accept()
			if err != nil {
				return
			}
			sc, err := net.Dial("tcp", target)
			if err != nil {
				cc.Close()
				continue
			}
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(sc, cc); sc.Close() }()
			go func() { defer p.wg.Done(); p.back(cc, sc) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

// back forwards server frames to the client, cutting at the first PUBACK.
func (p *cutProxy) back(cc, sc net.Conn) {
	defer cc.Close()
	defer sc.Close()
	r := wire.NewReader(sc, 64<<20)
	for {
		h, body, err := r.Next()
		if err != nil {
			return
		}
		if p.cutAfter == 0 && h.Type == wire.TypePubAck && p.cuts.Add(1) == 1 {
			return // the acknowledgement is lost with the connection
		}
		frame := append(wire.AppendHeader(nil, h.Type, h.Flags, h.ID, len(body)), body...)
		if _, err := cc.Write(frame); err != nil {
			return
		}
		if p.cutAfter != 0 && h.Type == p.cutAfter && p.cuts.Add(1) == 1 {
			return
		}
	}
}

// countStored subscribes from the earliest position and counts what the
// channel holds (it must be at most want; it reads until want+1 or a
// silence).
func countStored(t *testing.T, addr, ch string, want int) []string {
	t.Helper()
	c, _ := helloFeat(t, addr, wire.FeatureHeaders)
	sub := c.subscribe(1, ch, wire.StartEarliest, 0)
	if n := int(sub.Next - sub.Earliest); n != want {
		t.Fatalf("channel %q holds %d messages (earliest %d, next %d), want %d", ch, n, sub.Earliest, sub.Next, want)
	}
	got, _ := c.records(want)
	var out []string
	for _, r := range got {
		out = append(out, r.payload)
	}
	return out
}

// TestIdempotentPublishAcrossCut: with WithIdempotence, a publish whose
// acknowledgement is lost with the connection is resent on the next one
// and acknowledged once, at the one position where it is stored once.
func TestIdempotentPublishAcrossCut(t *testing.T) {
	s := startTest(t, nil)
	px := newCutProxy(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cl, err := client.Dial(ctx, px.ln.Addr().String(), client.WithIdempotence(0), client.WithBackoff(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pos, err := cl.Publish(ctx, "idem", []byte("once"))
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if px.cuts.Load() < 1 || cl.Resent() != 1 {
		t.Fatalf("cuts %d resent %d: the cut did not happen", px.cuts.Load(), cl.Resent())
	}
	pos2, err := cl.Publish(ctx, "idem", []byte("twice"))
	if err != nil || pos2 != pos+1 {
		t.Fatalf("next publish %d %v, want %d", pos2, err, pos+1)
	}
	if got := countStored(t, s.Addr(), "idem", 2); !reflect.DeepEqual(got, []string{"once", "twice"}) {
		t.Fatalf("stored %q", got)
	}
}

// TestExplicitIDRetryAfterCut: without WithIdempotence the cut publish
// ends with ErrUnknownOutcome; publishing the same Msg.ID again returns
// the first position and stores nothing.
func TestExplicitIDRetryAfterCut(t *testing.T) {
	s := startTest(t, nil)
	px := newCutProxy(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cl, err := client.Dial(ctx, px.ln.Addr().String(), client.WithBackoff(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	m := client.Msg{Payload: []byte("order 17"), ID: []byte("order-17"), Headers: []client.Header{{Key: "ct", Value: "text"}}}
	if _, err := cl.PublishMsg(ctx, "orders", m); !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("first publish: %v, want ErrUnknownOutcome", err)
	}
	pos, err := cl.PublishMsg(ctx, "orders", m)
	if err != nil || pos == 0 {
		t.Fatalf("retry: %d %v", pos, err)
	}
	if again, err := cl.PublishMsg(ctx, "orders", m); err != nil || again != pos {
		t.Fatalf("second retry: %d %v", again, err)
	}
	if got := countStored(t, s.Addr(), "orders", 1); !bytes.Equal([]byte(got[0]), m.Payload) {
		t.Fatalf("stored %q", got)
	}
}

// TestClusterDedupAcrossGateways: the same message id published through
// each node of a cluster (so through NODE_APPEND to the host for all but
// one) is stored once and acknowledged with one position everywhere, and
// a remote subscriber gets the extended record with its headers.
func TestClusterDedupAcrossGateways(t *testing.T) {
	nodes := startCluster3(t, nil)
	const ch = "cl.dedup"
	sub, _ := helloFeat(t, nodes[2].Addr(), wire.FeatureHeaders)
	sub.subscribe(1, ch, wire.StartLive, 0)
	var first uint64
	for round := range 2 {
		for i, n := range nodes {
			c, _ := helloFeat(t, n.Addr(), wire.FeatureHeaders)
			// A batch mixing a new id, the repeated one and a plain record.
			c.write(wire.AppendPublishExt(nil, 1, wire.FlagAck, ch, []byte(fmt.Sprintf("new-%d-%d", round, i)), nil, []byte("n")))
			c.write(wire.AppendPublishExt(nil, 2, wire.FlagAck, ch, []byte("the-id"), tHdrs, []byte("x")))
			c.write(wire.AppendPublish(nil, 3, wire.FlagAck, ch, []byte("plain")))
			pos := map[uint32]uint64{}
			for len(pos) < 3 {
				h, body := c.next()
				if h.Type != wire.TypePubAck {
					t.Fatalf("got %s", describe(h, body))
				}
				acks, _ := wire.DecodePubAck(body, nil)
				for _, a := range acks {
					pos[a.ID] = a.Position
				}
			}
			if first == 0 {
				first = pos[2]
			}
			if pos[2] != first {
				t.Fatalf("node %d round %d: the id got %d, first %d", i, round, pos[2], first)
			}
			if pos[1] == first || pos[3] == first || pos[3] != pos[1]+1 && !(round == 0 && i == 0) {
				t.Fatalf("node %d round %d: positions %v", i, round, pos)
			}
		}
	}
	// 6 new ids + 6 plain + the id once.
	got, _ := sub.records(13)
	seen := 0
	for _, r := range got {
		if r.id == "the-id" {
			seen++
			if !reflect.DeepEqual(r.headers, tHdrs) || r.payload != "x" || r.pos != first {
				t.Fatalf("remote subscriber got %+v", r)
			}
		}
	}
	if seen != 1 {
		t.Fatalf("the id was stored %d times", seen)
	}
	if h, _, err := sub.tryNext(300 * time.Millisecond); err == nil {
		t.Fatalf("more was stored: %v", h.Type)
	}
}

// TestWelcomeAnnouncesTheDedupWindow: a client that negotiates headers
// learns the window the server deduplicates ids in (never longer than the
// TTL) and the ids it keeps per channel; one without headers gets no such
// fields (PROTOCOL.md 2.2).
func TestWelcomeAnnouncesTheDedupWindow(t *testing.T) {
	s := startTest(t, func(o *Options) { o.DedupWindow = 90 * time.Second; o.TTL = 30 * time.Second; o.DedupIDs = 5000 })
	_, w := helloFeat(t, s.Addr(), wire.FeatureHeaders)
	if w.DedupWindow != 30*time.Second || w.DedupIDs != 5000 {
		t.Fatalf("WELCOME with headers: window %v, ids %d", w.DedupWindow, w.DedupIDs)
	}
	_, w = helloFeat(t, s.Addr(), 0)
	if w.DedupWindow != 0 || w.DedupIDs != 0 {
		t.Fatalf("WELCOME without headers: window %v, ids %d", w.DedupWindow, w.DedupIDs)
	}
}
