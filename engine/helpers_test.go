package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// startTest starts a server on 127.0.0.1:0 with test-friendly options,
// adjusted by mutate, and shuts it down when the test ends.
func startTest(t testing.TB, mutate func(*Options)) *Server {
	t.Helper()
	o := DefaultOptions()
	o.Listen = "127.0.0.1:0"
	o.Loops = 2
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if mutate != nil {
		mutate(&o)
	}
	s, err := Start(o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

// rawConn is a test client speaking frames directly over TCP.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	r  *wire.Reader
	id uint32
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, r: wire.NewReader(nc, 64<<20)}
}

// hello dials and completes the handshake.
func helloRaw(t testing.TB, addr string) (*rawConn, wire.Welcome) {
	t.Helper()
	c := dialRaw(t, addr)
	c.write(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "test"}))
	h, body := c.next()
	if h.Type != wire.TypeWelcome {
		t.Fatalf("want WELCOME, got %v %q", h.Type, body)
	}
	w, err := wire.DecodeWelcome(body)
	if err != nil {
		t.Fatalf("welcome: %v", err)
	}
	return c, w
}

func (c *rawConn) write(b []byte) {
	c.t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// next reads one frame, failing the test after 5 s.
func (c *rawConn) next() (wire.Header, []byte) {
	c.t.Helper()
	h, body, err := c.tryNext(5 * time.Second)
	if err != nil {
		c.t.Fatalf("read frame: %v", err)
	}
	return h, body
}

func (c *rawConn) tryNext(d time.Duration) (wire.Header, []byte, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
	h, body, err := c.r.Next()
	return h, append([]byte(nil), body...), err
}

func (c *rawConn) nextID() uint32 { c.id++; return c.id }

// publish sends an acked PUBLISH and returns the acknowledged position.
func (c *rawConn) publish(ch string, payload []byte) uint64 {
	c.t.Helper()
	id := c.nextID()
	c.write(wire.AppendPublish(nil, id, wire.FlagAck, ch, payload))
	for {
		h, body := c.next()
		switch h.Type {
		case wire.TypePubAck:
			acks, err := wire.DecodePubAck(body, nil)
			if err != nil {
				c.t.Fatal(err)
			}
			for _, a := range acks {
				if a.ID == id {
					return a.Position
				}
			}
		case wire.TypeError:
			e, _ := wire.DecodeError(h, body)
			c.t.Fatalf("publish: %v", e)
		}
	}
}

// subscribe sends SUBSCRIBE and returns SUBSCRIBED.
func (c *rawConn) subscribe(subID uint32, ch string, k wire.StartKind, arg uint64) wire.Subscribed {
	c.t.Helper()
	id := c.nextID()
	c.write(wire.AppendSubscribe(nil, id, wire.Subscribe{SubID: subID, Start: k, Arg: arg, Channel: []byte(ch)}))
	h, body := c.next()
	if h.Type != wire.TypeSubscribed {
		c.t.Fatalf("want SUBSCRIBED, got %v %q", h.Type, body)
	}
	s, err := wire.DecodeSubscribed(body)
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// event is a message or a gap seen by a raw subscriber.
type event struct {
	sub     uint32
	pos     uint64
	payload string
	gap     *wire.Gap
}

// events reads frames until n message/gap events arrived.
func (c *rawConn) events(n int) []event {
	c.t.Helper()
	var out []event
	for len(out) < n {
		h, body := c.next()
		switch h.Type {
		case wire.TypeData:
			first, count, recs, err := wire.DecodeData(body)
			if err != nil {
				c.t.Fatal(err)
			}
			for i := uint32(0); i < count; i++ {
				var p []byte
				p, recs, _ = wire.NextRecord(recs)
				out = append(out, event{sub: h.ID, pos: first + uint64(i), payload: string(p)})
			}
		case wire.TypeGap:
			g, err := wire.DecodeGap(body)
			if err != nil {
				c.t.Fatal(err)
			}
			out = append(out, event{sub: h.ID, gap: &g})
		case wire.TypeError:
			e, _ := wire.DecodeError(h, body)
			c.t.Fatalf("unexpected error: %v", e)
		}
	}
	return out
}

// expectError reads until an ERROR frame and returns it.
func (c *rawConn) expectError() wire.Error {
	c.t.Helper()
	for {
		h, body := c.next()
		if h.Type == wire.TypeError {
			e, err := wire.DecodeError(h, body)
			if err != nil {
				c.t.Fatal(err)
			}
			return e
		}
	}
}

// expectClosed reads until the server closes the connection.
func (c *rawConn) expectClosed() {
	c.t.Helper()
	for {
		_, _, err := c.tryNext(5 * time.Second)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatalf("connection not closed by the server")
		}
		return
	}
}

func payloadOf(i int) []byte { return []byte(fmt.Sprintf("m%06d", i)) }
