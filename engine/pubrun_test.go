package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// TestPublishRunInOneRead: many PUBLISH frames arriving in one read are
// appended as runs per channel (one streamlet lock per run). Positions
// must still be contiguous per channel and in frame order across streamlet
// rollovers (LimitMsgs 7), a publish without ACK takes its position but
// gets no ack, and a refused frame in the middle (invalid channel,
// payload too large) is answered with its ERROR while its neighbours are
// stored.
func TestPublishRunInOneRead(t *testing.T) {
	s := startTest(t, func(o *Options) { o.LimitMsgs = 7; o.MaxPayload = 64 })
	c, _ := helloRaw(t, s.Addr())
	type sent struct {
		ch    string
		p     string
		acked bool
		bad   wire.Code
	}
	var frames []sent
	for i := range 20 {
		frames = append(frames, sent{ch: "run.a", p: fmt.Sprintf("a%02d", i), acked: true})
	}
	frames = append(frames, sent{ch: "run.a", p: "a-noack"})
	for i := range 9 {
		frames = append(frames, sent{ch: "run.b", p: fmt.Sprintf("b%02d", i), acked: true})
	}
	frames = append(frames, sent{ch: "bad channel", p: "x", acked: true, bad: wire.CodeInvalidChannel})
	frames = append(frames, sent{ch: "run.a", p: string(make([]byte, 65)), acked: true, bad: wire.CodePayloadTooLarge})
	for i := 20; i < 30; i++ {
		frames = append(frames, sent{ch: "run.a", p: fmt.Sprintf("a%02d", i), acked: true})
	}
	var out []byte
	ids := map[uint32]int{}
	for i, f := range frames {
		id := c.nextID()
		ids[id] = i
		var flags wire.Flags
		if f.acked {
			flags = wire.FlagAck
		}
		out = wire.AppendPublish(out, id, flags, f.ch, []byte(f.p))
	}
	pingID := c.nextID()
	out = wire.AppendPing(out, pingID)
	c.write(out) // one write: the server sees the frames in one or few reads

	pos := map[int]uint64{}
	errs := map[int]wire.Code{}
	for pong := false; !pong || len(pos)+len(errs) < len(frames)-1; {
		h, body := c.next()
		switch h.Type {
		case wire.TypePubAck:
			acks, err := wire.DecodePubAck(body, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range acks {
				pos[ids[a.ID]] = a.Position
			}
		case wire.TypeError:
			e, err := wire.DecodeError(h, body)
			if err != nil {
				t.Fatal(err)
			}
			errs[ids[h.ID]] = e.Code
		case wire.TypePong:
			pong = true
		default:
			t.Fatalf("unexpected %s", describe(h, body))
		}
	}
	var aAcked []uint64
	for i, f := range frames {
		switch {
		case f.bad != 0:
			if errs[i] != f.bad {
				t.Fatalf("frame %d (%q): error %v, want %v", i, f.ch, errs[i], f.bad)
			}
		case !f.acked:
			if _, ok := pos[i]; ok {
				t.Fatalf("frame %d without ACK was acknowledged", i)
			}
		case pos[i] == 0:
			t.Fatalf("frame %d (%s %q) not acknowledged", i, f.ch, f.p)
		case f.ch == "run.a":
			aAcked = append(aAcked, pos[i])
		}
	}
	// run.a: 20 acked, one unacked position, 10 acked: contiguous.
	for k := 1; k < len(aAcked); k++ {
		want := aAcked[k-1] + 1
		if k == 20 {
			want++ // the publish without ACK sits here
		}
		if aAcked[k] != want {
			t.Fatalf("run.a ack %d at %d, want %d (all: %v)", k, aAcked[k], want, aAcked)
		}
	}
	// A reader from the earliest sees every stored message in frame order.
	r, _ := helloRaw(t, s.Addr())
	first := r.subscribe(1, "run.a", wire.StartEarliest, 0).First
	if first != aAcked[0] {
		t.Fatalf("earliest %d, first ack %d", first, aAcked[0])
	}
	evs, err := r.eventsUntil(1, aAcked[len(aAcked)-1])
	if err != nil {
		t.Fatal(err)
	}
	msgs, gaps, err := checkStream(evs, 1, first, aAcked[len(aAcked)-1])
	if err != nil || len(gaps) != 0 {
		t.Fatalf("stream: %v, gaps %v", err, gaps)
	}
	k := 0
	for i, f := range frames {
		if f.ch != "run.a" || f.bad != 0 {
			continue
		}
		if got := msgs[first+uint64(k)]; got != f.p {
			t.Fatalf("position %d: %q, want frame %d %q", first+uint64(k), got, i, f.p)
		}
		k++
	}
}

// TestLastChannelCacheForgotten: after the loop forgets an idle channel
// view, a publish to that channel must not go through the forgotten view
// (a subscriber joining meanwhile would miss it).
func TestLastChannelCacheForgotten(t *testing.T) {
	s := startTest(t, nil)
	p, _ := helloRaw(t, s.Addr())
	p.publish("cache.x", []byte("one"))
	eventually(t, 10*time.Second, "idle channel view forgotten", func() bool {
		gone := true
		onLoops(t, s, func(l *loop) {
			if _, ok := l.chans["cache.x"]; ok || l.lastChan != nil {
				gone = false
			}
		})
		return gone
	})
	sub, _ := helloRaw(t, s.Addr())
	sub.subscribe(1, "cache.x", wire.StartLive, 0)
	pos := p.publish("cache.x", []byte("two"))
	evs, err := sub.eventsUntil(1, pos)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.payload != "two" || last.pos != pos {
		t.Fatalf("subscriber got %v", evs)
	}
}

// TestRunAckedBeforeFatalError: publishes read in the same read as a
// frame that ends the connection are stored and acknowledged before the
// fatal ERROR (nothing may follow it, PROTOCOL.md 7.1), also while they
// wait in a run.
func TestRunAckedBeforeFatalError(t *testing.T) {
	s := startTest(t, nil)
	c, _ := helloRaw(t, s.Addr())
	var out []byte
	first := c.id + 1
	for i := range 5 {
		out = wire.AppendPublish(out, c.nextID(), wire.FlagAck, "fatal.run", payloadOf(i))
	}
	bad := wire.AppendPing(nil, c.nextID())
	bad[5] |= byte(wire.FlagCompressed) // never negotiated: fatal PROTOCOL_ERROR
	c.write(append(out, bad...))
	acked := 0
	for acked < 5 {
		h, body := c.next()
		if h.Type != wire.TypePubAck {
			t.Fatalf("after %d acks: %s, want the remaining PUBACKs first", acked, describe(h, body))
		}
		acks, err := wire.DecodePubAck(body, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acks {
			if a.ID != first+uint32(acked) {
				t.Fatalf("ack for id %d, want %d", a.ID, first+uint32(acked))
			}
			acked++
		}
	}
	if e := c.expectError(); e.Code != wire.CodeProtocolError {
		t.Fatalf("error %v, want PROTOCOL_ERROR", e.Code)
	}
	c.expectClosed()
}
