package metalog

import (
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rtm/sluice/wire"
)

const testSecret = "0123456789abcdef0123456789abcdef"

// newTestStream starts a stream layer for server id on loopback.
func newTestStream(t testing.TB, id, secret string, mod func(*streamOptions)) *streamLayer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := streamOptions{self: id, secret: secret, adv: addr(raftAddress(ln.Addr().String(), id)),
		hsTimeout: 5 * time.Second, maxInbound: 16, maxHandshakes: 8, log: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&o)
	}
	s := newStreamLayer(ln, o)
	t.Cleanup(func() {
		_ = s.Close()
		s.wait()
		if n := s.g.Running(); n != 0 {
			t.Errorf("%d stream goroutines outlived wait", n)
		}
	})
	return s
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *streamLayer) counts() (raw, conns int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.raw), len(s.conns)
}

// acceptOne accepts one connection or fails after d.
func acceptOne(t *testing.T, s *streamLayer, d time.Duration) net.Conn {
	t.Helper()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := s.Accept()
		if err != nil {
			close(ch)
			return
		}
		ch <- c
	}()
	select {
	case c, ok := <-ch:
		if !ok {
			t.Fatal("Accept failed")
		}
		return c
	case <-time.After(d):
		_ = s.Close() // ends the Accept above
		t.Fatal("nothing accepted")
	}
	return nil
}

// TestStream_SealedRoundTrip: a dialer with the secret reaches the
// acceptor, both learn the other's server id, and bytes flow both ways
// through the sealed records.
func TestStream_SealedRoundTrip(t *testing.T) {
	a := newTestStream(t, sid("a", 1), testSecret, nil)
	b := newTestStream(t, sid("b", 1), testSecret, nil)
	dc, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ac := acceptOne(t, b, 5*time.Second)
	if p := ac.(*streamConn).peer; p != sid("a", 1) {
		t.Fatalf("acceptor sees %q", p)
	}
	if p := dc.(*streamConn).peer; p != sid("b", 1) {
		t.Fatalf("dialer sees %q", p)
	}
	msg := make([]byte, 200<<10) // several records
	_, _ = rand.Read(msg)
	go func() { _, _ = dc.Write(msg) }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(ac, got); err != nil || string(got) != string(msg) {
		t.Fatalf("dialer to acceptor: %v", err)
	}
	if _, err := ac.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(dc, got[:4]); err != nil || string(got[:4]) != "back" {
		t.Fatalf("acceptor to dialer: %q %v", got[:4], err)
	}
	_ = dc.Close()
	if _, err := ac.Read(got); err == nil {
		t.Fatal("read after the peer closed")
	}
	waitFor(t, 5*time.Second, "both sides to forget the connection", func() bool {
		_, na := a.counts()
		_, nb := b.counts()
		return na == 0 && nb <= 1
	})
}

// TestStream_WrongSecretGetsNothingThrough: a dialer without the cluster
// secret is refused with UNAUTHENTICATED and the acceptor hands nothing to
// raft; an acceptor without it fails the dialer's check.
func TestStream_WrongSecretGetsNothingThrough(t *testing.T) {
	b := newTestStream(t, sid("b", 1), testSecret, nil)
	outsider := newTestStream(t, sid("x", 1), "not-the-cluster-secret-0123456789", nil)
	_, err := outsider.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	var we wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnauthenticated {
		t.Fatalf("outsider dial: %v", err)
	}
	waitFor(t, 5*time.Second, "the refused connection to be dropped", func() bool {
		raw, conns := b.counts()
		return raw == 0 && conns == 0
	})
	select {
	case c := <-b.ready:
		t.Fatalf("a connection from %q reached Accept", c.(*streamConn).peer)
	default:
	}
	// The other way: a node dialing the outsider proves itself first, and
	// the outsider refuses it.
	if _, err := b.Dial(raft.ServerAddress(outsider.Addr().String()), time.Second); !errors.As(err, &we) || we.Code != wire.CodeUnauthenticated {
		t.Fatalf("dial to an outsider: %v", err)
	}
	// An outsider that answers anything with a forged NODE_WELCOME fails
	// the dialer's check of its proof.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, _, err := readFrame(c); err != nil {
			return
		}
		_, _ = c.Write(wire.AppendNodeChallenge(nil, wire.NodeChallenge{Name: sid("x", 1), Nonce: [32]byte{1}}))
		if _, _, err := readFrame(c); err != nil {
			return
		}
		_, _ = c.Write(wire.AppendNodeWelcome(nil, [32]byte{2}))
		_, _ = io.Copy(io.Discard, c)
	}()
	if _, err := b.Dial(raft.ServerAddress(raftAddress(ln.Addr().String(), sid("x", 1))), time.Second); !errors.Is(err, wire.ErrNodeAuth) {
		t.Fatalf("dial to a forging outsider: %v", err)
	}
	<-done
}

// TestStream_WrongServerRefused: a dialer that means server b@1 at an
// address where b@2 answers (a node that lost its directory) is refused.
func TestStream_WrongServerRefused(t *testing.T) {
	a := newTestStream(t, sid("a", 1), testSecret, nil)
	b2 := newTestStream(t, sid("b", 2), testSecret, nil)
	hp, _ := splitRaftAddress(b2.Addr().String())
	if _, err := a.Dial(raft.ServerAddress(raftAddress(hp, sid("b", 1))), time.Second); !errors.Is(err, wire.ErrNodeAuth) {
		t.Fatalf("dial: %v", err)
	}
	if _, err := a.Dial(raft.ServerAddress(hp), time.Second); err == nil {
		t.Fatal("an address without a server id was dialed")
	}
}

// rawDial opens a plain TCP connection to s.
func rawDial(t *testing.T, s *streamLayer) net.Conn {
	t.Helper()
	hp, _ := splitRaftAddress(s.Addr().String())
	c, err := net.Dial("tcp", hp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// readToEOF reads until the server closes the connection (bounded by d)
// and returns what came; it fails if the connection stays open.
func readToEOF(t *testing.T, c net.Conn, d time.Duration) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection stayed open for %v", d)
	}
	return b
}

// firstError decodes the ERROR frame at the start of b.
func firstError(t *testing.T, b []byte) wire.Error {
	t.Helper()
	h, body, _, err := wire.Split(b, wire.MinMaxBody)
	if err != nil || h.Type != wire.TypeError {
		t.Fatalf("no ERROR frame in %x: %v", b, err)
	}
	e, err := wire.DecodeError(h, body)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestStream_BadInputClosesTheConnection: garbage, a frame other than
// NODE_HELLO, a declared length over the pre-handshake limit (answered
// before any body is read or allocated), and a NODE_HELLO of another
// version each get their ERROR and the connection closed.
func TestStream_BadInputClosesTheConnection(t *testing.T) {
	b := newTestStream(t, sid("b", 1), testSecret, nil)
	hello := func(version uint16) []byte {
		return wire.AppendNodeHello(nil, wire.NodeHello{Version: version, Name: sid("z", 1)})
	}
	cases := []struct {
		name string
		in   []byte
		code wire.Code
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), wire.CodeFrameTooLarge},
		{"ping first", wire.AppendPing(nil, 1), wire.CodeHelloRequired},
		{"length over the limit", wire.AppendHeader(nil, wire.TypeNodeHello, 0, 0, 0xFFFFFFFF), wire.CodeFrameTooLarge},
		{"old version", hello(1), wire.CodeUnsupportedVersion},
		{"flags set", append(wire.AppendHeader(nil, wire.TypeNodeHello, 1, 0, 0), 0), wire.CodeProtocolError},
	}
	for _, c := range cases {
		conn := rawDial(t, b)
		if _, err := conn.Write(c.in); err != nil {
			t.Fatal(err)
		}
		if e := firstError(t, readToEOF(t, conn, 5*time.Second)); e.Code != c.code {
			t.Errorf("%s: %v", c.name, e)
		}
	}
	waitFor(t, 5*time.Second, "the connections to be dropped", func() bool {
		raw, conns := b.counts()
		return raw == 0 && conns == 0
	})
}

// TestStream_HandshakeTimeout: a connection that sends nothing, or stops
// inside a frame, is closed when the handshake timeout passes.
func TestStream_HandshakeTimeout(t *testing.T) {
	b := newTestStream(t, sid("b", 1), testSecret, func(o *streamOptions) { o.hsTimeout = 200 * time.Millisecond })
	silent := rawDial(t, b)
	partial := rawDial(t, b)
	if _, err := partial.Write(wire.AppendNodeHello(nil, wire.NodeHello{Version: wire.NodeVersion, Name: "z"})[:15]); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	readToEOF(t, silent, 10*time.Second)
	readToEOF(t, partial, 10*time.Second)
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("closed after %v, before the timeout", d)
	}
}

// TestStream_HandshakeLimit: past maxHandshakes inbound handshakes in
// progress, a new connection is closed at once.
func TestStream_HandshakeLimit(t *testing.T) {
	b := newTestStream(t, sid("b", 1), testSecret, func(o *streamOptions) { o.maxHandshakes = 2 })
	rawDial(t, b)
	rawDial(t, b)
	waitFor(t, 5*time.Second, "two handshakes in progress", func() bool { raw, _ := b.counts(); return raw == 2 })
	third := rawDial(t, b)
	if got := readToEOF(t, third, 3*time.Second); len(got) != 0 {
		t.Fatalf("the refused connection got %x", got)
	}
}

// TestStream_BlockCutsPeer: the partition hook closes the connections to
// a blocked node and refuses new ones, dialed or accepted; lifting it
// lets them through again.
func TestStream_BlockCutsPeer(t *testing.T) {
	a := newTestStream(t, sid("a", 1), testSecret, nil)
	b := newTestStream(t, sid("b", 1), testSecret, nil)
	dc, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ac := acceptOne(t, b, 5*time.Second)
	b.setBlock(func(n string) bool { return n == "a" })
	if _, err := ac.Read(make([]byte, 1)); err == nil {
		t.Fatal("the blocked connection still reads")
	}
	if _, err := dc.Read(make([]byte, 1)); err == nil {
		t.Fatal("the dialer's side still reads")
	}
	// Accepted side: the handshake completes, then b closes.
	dc, err = a.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection to the blocked side stays open")
	}
	// Dialing side.
	if _, err := b.Dial(raft.ServerAddress(a.Addr().String()), time.Second); !errors.Is(err, errBlocked) {
		t.Fatalf("dial to a blocked node: %v", err)
	}
	b.setBlock(nil)
	if _, err := b.Dial(raft.ServerAddress(a.Addr().String()), time.Second); err != nil {
		t.Fatalf("after the cut was lifted: %v", err)
	}
}

// TestStream_CloseEndsEverything: Close ends Accept, closes established
// connections and handshakes in progress, and its goroutines end.
func TestStream_CloseEndsEverything(t *testing.T) {
	a := newTestStream(t, sid("a", 1), testSecret, nil)
	b := newTestStream(t, sid("b", 1), testSecret, nil)
	dc, err := a.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ac := acceptOne(t, b, 5*time.Second)
	pending := rawDial(t, b)
	waitFor(t, 5*time.Second, "a handshake in progress", func() bool { raw, _ := b.counts(); return raw == 1 })
	_ = b.Close()
	b.wait()
	if n := b.g.Running(); n != 0 {
		t.Fatalf("%d goroutines after Close and wait", n)
	}
	if _, err := b.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if _, err := ac.Read(make([]byte, 1)); err == nil {
		t.Fatal("accepted connection open")
	}
	if _, err := dc.Read(make([]byte, 1)); err == nil {
		t.Fatal("the peer's side open")
	}
	readToEOF(t, pending, 3*time.Second)
}
