package client

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// testTimeout bounds every wait of the tests.
const testTimeout = 5 * time.Second

// fakeServer is an in-test Sluice server built from net.Listen and the wire
// codec; each test scripts its side of the conversation.
type fakeServer struct {
	t     *testing.T
	ln    net.Listener
	conns chan net.Conn
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return newFakeServerOn(t, ln)
}

// newFakeServerOn is newFakeServer on a listener of the caller's (e.g. a
// TLS one).
func newFakeServerOn(t *testing.T, ln net.Listener) *fakeServer {
	f := &fakeServer{t: t, ln: ln, conns: make(chan net.Conn, 16)}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				close(f.conns)
				return
			}
			f.conns <- nc
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		for nc := range f.conns {
			_ = nc.Close()
		}
	})
	return f
}

func (f *fakeServer) addr() string { return f.ln.Addr().String() }

// accept returns the next client connection, without handshake.
func (f *fakeServer) accept() *fakeConn {
	f.t.Helper()
	select {
	case nc, ok := <-f.conns:
		if !ok {
			f.t.Fatal("listener closed")
		}
		fc := &fakeConn{t: f.t, nc: nc, rd: wire.NewReader(nc, wire.MaxBodyFor(1<<20))}
		f.t.Cleanup(func() { _ = nc.Close() })
		return fc
	case <-time.After(testTimeout):
		f.t.Fatal("no connection")
	}
	return nil
}

// acceptWelcome accepts a connection and completes the handshake with w.
func (f *fakeServer) acceptWelcome(w wire.Welcome) *fakeConn {
	f.t.Helper()
	fc := f.accept()
	h, body := fc.expect(wire.TypeHello)
	hello, err := wire.DecodeHello(body)
	if err != nil {
		f.t.Fatal(err)
	}
	fc.hello = hello
	fc.write(wire.AppendWelcome(nil, h.ID, w))
	return fc
}

func testWelcome() wire.Welcome {
	return wire.Welcome{
		Version: wire.Version1, MaxPayload: 1 << 20, MaxBody: wire.MaxBodyFor(1 << 20),
		MaxSubs: 100, ServerName: "fake",
	}
}

type fakeConn struct {
	t     *testing.T
	nc    net.Conn
	rd    *wire.Reader
	hello wire.Hello
}

// read returns the next client frame (body copied).
func (fc *fakeConn) read() (wire.Header, []byte) {
	fc.t.Helper()
	_ = fc.nc.SetReadDeadline(time.Now().Add(testTimeout))
	h, body, err := fc.rd.Next()
	if err != nil {
		fc.t.Fatalf("fake server read: %v", err)
	}
	return h, bytes.Clone(body)
}

// readErr returns the error ending the client's stream (e.g. io.EOF).
func (fc *fakeConn) readErr() error {
	fc.t.Helper()
	_ = fc.nc.SetReadDeadline(time.Now().Add(testTimeout))
	for {
		h, _, err := fc.rd.Next()
		if err != nil {
			return err
		}
		fc.t.Logf("fake server skips %v", h.Type)
	}
}

func (fc *fakeConn) expect(t wire.Type) (wire.Header, []byte) {
	fc.t.Helper()
	h, body := fc.read()
	if h.Type != t {
		fc.t.Fatalf("fake server got %v, want %v", h.Type, t)
	}
	return h, body
}

func (fc *fakeConn) expectPublish() (id uint32, channel, payload string) {
	fc.t.Helper()
	h, body := fc.expect(wire.TypePublish)
	if h.Flags&wire.FlagAck == 0 {
		fc.t.Fatal("PUBLISH without FlagAck")
	}
	ch, p, err := wire.DecodePublish(body)
	if err != nil {
		fc.t.Fatal(err)
	}
	return h.ID, string(ch), string(p)
}

func (fc *fakeConn) expectSubscribe() (uint32, wire.Subscribe) {
	fc.t.Helper()
	h, body := fc.expect(wire.TypeSubscribe)
	s, err := wire.DecodeSubscribe(body)
	if err != nil {
		fc.t.Fatal(err)
	}
	s.Channel = bytes.Clone(s.Channel)
	return h.ID, s
}

func (fc *fakeConn) write(b []byte) {
	fc.t.Helper()
	_ = fc.nc.SetWriteDeadline(time.Now().Add(testTimeout))
	if _, err := fc.nc.Write(b); err != nil {
		fc.t.Fatalf("fake server write: %v", err)
	}
}

func (fc *fakeConn) close() { _ = fc.nc.Close() }

// dialAsync dials in the background (the fake server must answer).
func dialAsync(t *testing.T, addr string, opts ...Option) func() *Conn {
	t.Helper()
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		opts := append([]Option{WithBackoff(time.Millisecond, 10*time.Millisecond)}, opts...)
		c, err := Dial(ctx, addr, opts...)
		ch <- res{c, err}
	}()
	return func() *Conn {
		t.Helper()
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Cleanup(func() { _ = r.c.Close() })
		return r.c
	}
}

// connect dials f and completes the handshake with w.
func connect(t *testing.T, f *fakeServer, w wire.Welcome, opts ...Option) (*Conn, *fakeConn) {
	t.Helper()
	wait := dialAsync(t, f.addr(), opts...)
	fc := f.acceptWelcome(w)
	return wait(), fc
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// subscribeAsync runs Subscribe in the background.
func subscribeAsync(t *testing.T, c *Conn, channel string, opts ...SubOption) func() (*Subscription, error) {
	type res struct {
		s   *Subscription
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := c.Subscribe(ctxT(t), channel, opts...)
		ch <- res{s, err}
	}()
	return func() (*Subscription, error) { r := <-ch; return r.s, r.err }
}

// nextEvent reads one event or fails.
func nextEvent(t *testing.T, sub *Subscription) Event {
	t.Helper()
	ev, err := sub.Next(ctxT(t))
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return ev
}

func wantMessage(t *testing.T, ev Event, pos uint64, payload string) {
	t.Helper()
	if ev.Kind != KindMessage || ev.Position != pos || string(ev.Payload) != payload {
		t.Fatalf("event %v pos %d payload %q, want message %d %q", ev.Kind, ev.Position, ev.Payload, pos, payload)
	}
}

func wantGap(t *testing.T, ev Event, from, to uint64, r wire.GapReason) {
	t.Helper()
	if ev.Kind != KindGap || ev.Gap != (GapInfo{from, to, r}) {
		t.Fatalf("event %v gap %+v, want gap %d-%d %v", ev.Kind, ev.Gap, from, to, r)
	}
}

func wantServerCode(t *testing.T, err error, code wire.Code) {
	t.Helper()
	var we wire.Error
	if !errors.As(err, &we) || we.Code != code {
		t.Fatalf("err %v, want server error %v", err, code)
	}
	var wp *wire.Error
	if !errors.As(err, &wp) || wp.Code != code {
		t.Fatalf("errors.As(**wire.Error) failed for %v", err)
	}
}
