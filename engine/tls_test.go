package engine

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/testcert"
	"github.com/sluice-rtm/sluice/wire"
)

func newCerts(t testing.TB) *testcert.Set {
	t.Helper()
	set, err := testcert.New("sluice.test")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// dialTLS connects to the TLS listener and completes the TLS handshake.
func dialTLS(t testing.TB, addr string, cfg *tls.Config) (*rawConn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: waitFor}, Config: cfg}
	nc, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, r: wire.NewReader(nc, 64<<20)}, nil
}

func startTLSTest(t testing.TB, set *testcert.Set, mutate func(*Options)) *Server {
	return startTest(t, func(o *Options) {
		o.TLSListen = "127.0.0.1:0"
		o.TLSConfig = set.ServerConfig()
		if mutate != nil {
			mutate(o)
		}
	})
}

func TestTLSEndToEnd(t *testing.T) {
	set := newCerts(t)
	s := startTLSTest(t, set, func(o *Options) { o.Auth = testAuth() })
	if s.TLSAddr() == "" || s.TLSAddr() == s.Addr() {
		t.Fatalf("TLS address %q", s.TLSAddr())
	}
	tc, err := dialTLS(t, s.TLSAddr(), set.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Authentication works the same through the bridge.
	tc.write(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "tls", Token: []byte(tokAlice)}))
	if h, body := tc.next(); h.Type != wire.TypeWelcome {
		t.Fatalf("TLS HELLO: %s", describe(h, body))
	}
	plain := login(t, s.Addr(), tokAlice)

	// TLS subscriber, plain publisher, payloads larger than the copy
	// buffers and TLS records.
	tc.subscribe(1, "chat.tls", wire.StartLive, 0)
	payloads := [][]byte{checkedPayload(1, 1, 16), checkedPayload(1, 2, 300<<10), checkedPayload(1, 3, 70<<10)}
	pos, err := plain.publishBatch("chat.tls", payloads)
	if err != nil {
		t.Fatal(err)
	}
	evs := tc.events(len(payloads))
	for i, e := range evs {
		if e.pos != pos[i] || !bytes.Equal([]byte(e.payload), payloads[i]) {
			t.Fatalf("TLS subscriber event %d: %v, want position %d", i, e, pos[i])
		}
	}
	// TLS publisher, plain subscriber.
	plain.subscribe(2, "chat.back", wire.StartLive, 0)
	p := tc.publish("chat.back", []byte("over tls"))
	if e := plain.events(1)[0]; e.pos != p || e.payload != "over tls" {
		t.Fatalf("plain subscriber got %v", e)
	}
	// Errors and closing reach the TLS client too.
	tc.write(wire.AppendPublish(nil, 99, wire.FlagAck, "secret", []byte("x")))
	h, body := tc.next()
	expectCode(t, h, body, wire.CodeForbidden, 99)
	tc.write(rawFrame(0x3F, 0, 5, nil))
	h, body = tc.next()
	expectCode(t, h, body, wire.CodeUnknownType, 5)
	tc.expectClosed()

	if m := s.Metrics(context.Background()); m.Accepted < 2 {
		t.Fatalf("accepted %d", m.Accepted)
	}
}

func TestTLSRejectsUntrustedAndSlowClients(t *testing.T) {
	set := newCerts(t)
	other := newCerts(t)
	s := startTLSTest(t, set, func(o *Options) { o.HandshakeTimeout = 300 * time.Millisecond })

	// A client that trusts another CA refuses the server.
	if _, err := dialTLS(t, s.TLSAddr(), other.ClientConfig()); err == nil {
		t.Fatal("handshake with an untrusted certificate succeeded")
	}
	// A client expecting another name refuses it too.
	cfg := set.ClientConfig()
	cfg.ServerName = "other.test"
	if _, err := dialTLS(t, s.TLSAddr(), cfg); err == nil {
		t.Fatal("handshake with the wrong server name succeeded")
	}

	// A TCP client that never starts TLS is closed at the handshake
	// deadline.
	nc, err := net.DialTimeout("tcp", s.TLSAddr(), waitFor)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A TLS client that never sends HELLO is closed with
	// HANDSHAKE_TIMEOUT like a TCP one.
	tc, err := dialTLS(t, s.TLSAddr(), set.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = nc.SetReadDeadline(time.Now().Add(waitFor))
	if n, err := nc.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes from a connection without TLS handshake", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("connection without TLS handshake not closed")
	}
	h, body := tc.next()
	expectCode(t, h, body, wire.CodeHandshakeTimeout, 0)
	tc.expectClosed()
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("closed after %v", el)
	}
	eventually(t, waitFor, "TLS handshake failures to be counted", func() bool {
		return s.Metrics(context.Background()).Rejected[RejectTLSHandshake] >= 3
	})
	// Still serving.
	c, err := dialTLS(t, s.TLSAddr(), set.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.handshakeErr(); err != nil {
		t.Fatal(err)
	}
	c.expectUsable()
}

// TestTLSPerAddrLimit: the bridge carries the client's real address, so
// the per-address limit counts TLS and TCP connections together.
func TestTLSPerAddrLimit(t *testing.T) {
	set := newCerts(t)
	s := startTLSTest(t, set, func(o *Options) { o.MaxConnsPerAddr = 2 })
	helloRaw(t, s.Addr())
	a, err := dialTLS(t, s.TLSAddr(), set.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.handshakeErr(); err != nil {
		t.Fatal(err)
	}
	b, err := dialTLS(t, s.TLSAddr(), set.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	h, body := b.next()
	expectCode(t, h, body, wire.CodeTooManyConnections, 0)
	b.expectClosed()
	var tlsConns int64
	onLoops(t, s, func(l *loop) {
		for c := range l.conns {
			if c.sec.tls && c.sec.ip == "127.0.0.1" && !c.closed {
				tlsConns++
			}
		}
	})
	if tlsConns != 1 {
		t.Fatalf("%d TLS connections counted for 127.0.0.1, want 1", tlsConns)
	}
	if m := s.Metrics(context.Background()); m.TLSConnections != 1 || m.Rejected[RejectPerAddr] != 1 {
		t.Fatalf("metrics: %d TLS connections, %d per-address rejections; want 1 and 1", m.TLSConnections, m.Rejected[RejectPerAddr])
	}
}

func TestTLSShutdownEndsBridges(t *testing.T) {
	set := newCerts(t)
	s := startTLSTest(t, set, nil)
	var conns []*rawConn
	for range 3 {
		c, err := dialTLS(t, s.TLSAddr(), set.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.handshakeErr(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		h, body := c.next()
		if h.Type != wire.TypeGoAway {
			t.Fatalf("got %s, want GOAWAY", describe(h, body))
		}
		c.expectClosed()
	}
	done := make(chan struct{})
	go func() { s.tlsBr.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("bridge goroutines still running after Shutdown")
	}
}
