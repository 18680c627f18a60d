package client

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

func s2Welcome() wire.Welcome {
	w := testWelcome()
	w.Features = wire.FeatureHeaders | wire.FeatureS2
	return w
}

// jsonPayload is a JSON-like payload of about n bytes.
func jsonPayload(n int) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		b = fmt.Appendf(b, `{"id":%d,"sensor":"s-%d","value":%d.%d},`, i*7919%10007, i%13, i*31%97, i%10)
	}
	return b[:n]
}

// readPublishInflated reads a PUBLISH, inflating it when compressed.
func (fc *fakeConn) readPublishInflated(maxPayload int) (wire.Header, []byte) {
	fc.t.Helper()
	h, body := fc.expect(wire.TypePublish)
	if h.Flags&wire.FlagCompressed == 0 {
		return h, body
	}
	pl, err := wire.PublishPrefixLen(body)
	if err != nil {
		fc.t.Fatal(err)
	}
	plain, err := wire.Inflate(nil, body, pl, uint32(pl+maxPayload), wire.TypePublish)
	if err != nil {
		fc.t.Fatal(err)
	}
	return h, plain
}

func TestPublishCompressed(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, s2Welcome(), WithCompression(DefaultCompressMin))
	big := jsonPayload(4096)
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(i*7919+i>>3*31) ^ byte(i>>7*131)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, want := range []struct {
			flags   wire.Flags
			payload []byte
			id      string
		}{
			{wire.FlagAck | wire.FlagCompressed, big, ""},
			{wire.FlagAck, []byte("small"), ""},
			{wire.FlagAck | wire.FlagCompressed | wire.FlagExt, big, "m1"},
		} {
			h, body := fc.readPublishInflated(1 << 20)
			ch, rest, err := wire.DecodePublish(body)
			if err != nil || string(ch) != "ch" || h.Flags != want.flags {
				t.Errorf("publish %d: flags %v err %v", i, h.Flags, err)
			}
			if h.Flags&wire.FlagExt != 0 {
				e, err := wire.ParseExt(rest, wire.TypePublish)
				if err != nil || string(e.MsgID) != want.id {
					t.Errorf("publish %d: ext %v %q", i, err, e.MsgID)
				}
				rest = e.Payload
			}
			if !bytes.Equal(rest, want.payload) {
				t.Errorf("publish %d: payload differs", i)
			}
			fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: h.ID, Position: uint64(i + 1)}}))
		}
	}()
	if _, err := c.Publish(ctxT(t), "ch", big); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctxT(t), "ch", []byte("small")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishMsg(ctxT(t), "ch", Msg{Payload: big, ID: []byte("m1")}); err != nil {
		t.Fatal(err)
	}
	<-done
	if c.Compressed() != 2 {
		t.Fatalf("Compressed() = %d", c.Compressed())
	}
	// Incompressible bytes go as they are.
	go func() {
		h, _ := fc.expect(wire.TypePublish)
		if h.Flags&wire.FlagCompressed != 0 {
			t.Error("random payload sent compressed")
		}
		fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: h.ID, Position: 9}}))
	}()
	if _, err := c.Publish(ctxT(t), "ch", random); err != nil {
		t.Fatal(err)
	}
}

func TestCompressionOffAndNotNegotiated(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, headersWelcome(), WithCompression(0))
	if fc.hello.Features&wire.FeatureS2 != 0 {
		t.Fatalf("offered %v", fc.hello.Features)
	}
	go func() {
		h, _ := fc.expect(wire.TypePublish)
		if h.Flags&wire.FlagCompressed != 0 {
			t.Error("compressed without S2")
		}
		fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: h.ID, Position: 1}}))
	}()
	if _, err := c.Publish(ctxT(t), "ch", jsonPayload(4096)); err != nil {
		t.Fatal(err)
	}
	// A compressed DATA without S2 negotiated is a protocol violation.
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	run := wire.AppendRecord(nil, jsonPayload(1000))
	blk := wire.AppendS2(nil, run)
	fc.write(append(wire.AppendDataS2Header(nil, s.SubID, 1, 1, len(blk)), blk...))
	fc.wantDropped()
	if len(sub.Events()) != 0 {
		t.Fatal("the compressed DATA was delivered")
	}
}

// wantDropped waits for the client to close the connection (not for the
// read deadline).
func (fc *fakeConn) wantDropped() {
	fc.t.Helper()
	err := fc.readErr()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		fc.t.Fatal("the client did not drop the connection")
	}
}

func TestDataCompressed(t *testing.T) {
	f := newFakeServer(t)
	c, fc := connect(t, f, s2Welcome(), WithCompression(DefaultCompressMin))
	sub, s := subscribeFake(t, c, fc, wire.Subscribed{First: 1, Next: 1, Epoch: 1})
	p1, p2 := jsonPayload(2000), jsonPayload(3000)
	run := wire.AppendRecord(nil, p1)
	run = wire.AppendRecordExt(run, wire.AppendExt(nil, []byte("id"), testHdrs, p2), true)
	blk := wire.AppendS2(nil, run)
	fc.write(append(wire.AppendDataS2Header(nil, s.SubID, 1, 2, len(blk)), blk...))
	ev := nextEvent(t, sub)
	wantMessage(t, ev, 1, string(p1))
	ev = nextEvent(t, sub)
	wantMessage(t, ev, 2, string(p2))
	if string(ev.MsgID) != "id" || len(ev.Headers) != 2 {
		t.Fatalf("ext lost: %q %v", ev.MsgID, ev.Headers)
	}
	// A bomb: a block claiming far more than the body limit.
	bomb := wire.AppendDataS2Header(nil, s.SubID, 3, 1, 6)
	bomb = append(bomb, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00)
	fc.write(bomb)
	fc.wantDropped()
}
