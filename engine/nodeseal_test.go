package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// The attacks of issue 14 part 1 against real nodes on 127.0.0.1: a
// recorded handshake replayed, a reflected one, frames from outsiders, and
// a changed byte in a sealed record.

const sealTestSecret = "0123456789abcdef0123456789abcdef"

func withSecret(o *Options) { o.Cluster.Secret = sealTestSecret }

// recordingConn copies what is written to sent.
type recordingConn struct {
	net.Conn
	sent bytes.Buffer
}

func (r *recordingConn) Write(b []byte) (int, error) {
	r.sent.Write(b)
	return r.Conn.Write(b)
}

// nodeSession completes the node handshake with the node at addr as a
// node named name; it fails the test if the handshake fails.
func nodeSession(t *testing.T, addr, name, secret string) (net.Conn, *wire.NodeSession) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(waitFor))
	sess, err := wire.NodeHandshake(nc, wire.NodeDial{Name: name, Secret: secret})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return nc, sess
}

// answers reads frames from r until the stream ends (or 5 s pass) and
// returns their types; io errors end it.
func answers(nc net.Conn, r io.Reader) (types []wire.Type, endErr error) {
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	fr := wire.NewReader(r, 8<<20)
	for {
		h, _, err := fr.Next()
		if err != nil {
			return types, err
		}
		types = append(types, h.Type)
	}
}

func closedStream(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err) || errors.Is(err, wire.ErrSeal)
}

// TestNodeLink_ReplayedHandshakeRefused: the bytes a node sent for a good
// handshake and a STATUS request, recorded and replayed to every node of
// the cluster, get a fresh NODE_CHALLENGE, then ERROR UNAUTHENTICATED and
// the end of the connection: no NODE_WELCOME, no answer to the request.
func TestNodeLink_ReplayedHandshakeRefused(t *testing.T) {
	nodes := startCluster3(t, withSecret)
	nc, err := net.DialTimeout("tcp", nodes[0].Addr(), waitFor)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(waitFor))
	rec := &recordingConn{Conn: nc}
	sess, err := wire.NodeHandshake(rec, wire.NodeDial{Name: "b", ClientAddr: nodes[1].Addr(), Secret: sealTestSecret, Expect: "a"})
	if err != nil {
		t.Fatal(err)
	}
	sc := sess.Conn(rec)
	if _, err := sc.Write(wire.AppendNodeRequest(nil, 1, wire.OpStatus, nil)); err != nil {
		t.Fatal(err)
	}
	if h, _, err := wire.NewReader(sc, 8<<20).Next(); err != nil || h.Type != wire.TypeNodeResponse {
		t.Fatalf("the recorded session itself: %v %v", h, err)
	}
	recorded := rec.sent.Bytes()
	for _, s := range nodes {
		c, err := net.DialTimeout("tcp", s.Addr(), waitFor)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(recorded); err != nil {
			t.Fatal(err)
		}
		types, end := answers(c, c)
		c.Close()
		// b itself refuses a NODE_HELLO in its own name at once.
		ok := len(types) == 2 && types[0] == wire.TypeNodeChallenge || len(types) == 1 && s.opts.ServerName == "b"
		if !ok || types[len(types)-1] != wire.TypeError || !closedStream(end) {
			t.Fatalf("replay to %s: answered %v, then %v; want NODE_CHALLENGE, ERROR, end of stream", s.opts.ServerName, types, end)
		}
	}
}

// TestNodeLink_ReflectedHandshakeRefused: a NODE_HELLO in the node's own
// name (its own handshake reflected back to it) is refused, and so is the
// node's NODE_CHALLENGE sent back to it in place of a NODE_PROOF.
func TestNodeLink_ReflectedHandshakeRefused(t *testing.T) {
	s := startNode(t, "a", nil, withSecret)
	c := dialRaw(t, s.Addr())
	c.write(wire.AppendNodeHello(nil, wire.NodeHello{Version: wire.NodeVersion, Name: "a", ClientAddr: s.Addr()}))
	if e := c.expectError(); e.Code != wire.CodeUnauthenticated {
		t.Fatalf("NODE_HELLO in the node's own name: %v", e)
	}
	c.expectClosed()

	c = dialRaw(t, s.Addr())
	c.write(wire.AppendNodeHello(nil, wire.NodeHello{Version: wire.NodeVersion, Name: "x"}))
	h, body := c.next()
	if h.Type != wire.TypeNodeChallenge {
		t.Fatalf("got %s", describe(h, body))
	}
	c.write(wire.AppendHeader(nil, wire.TypeNodeChallenge, 0, 0, len(body)))
	c.write(body)
	if e := c.expectError(); e.Code != wire.CodeProtocolError {
		t.Fatalf("reflected NODE_CHALLENGE: %v", e)
	}
	c.expectClosed()
}

// TestNodeLink_OutsiderFramesRefused: node frames from a connection that
// did not complete the handshake (none at all, a wrong secret) or that
// are not sealed after it are refused, and nothing is answered.
func TestNodeLink_OutsiderFramesRefused(t *testing.T) {
	s := startNode(t, "a", nil, withSecret)
	status := wire.AppendNodeRequest(nil, 1, wire.OpStatus, nil)

	// No handshake.
	c := dialRaw(t, s.Addr())
	c.write(status)
	if e := c.expectError(); e.Code != wire.CodeHelloRequired {
		t.Fatalf("NODE_REQUEST without a handshake: %v", e)
	}
	c.expectClosed()

	// A wrong secret; then the request anyway.
	nc, err := net.DialTimeout("tcp", s.Addr(), waitFor)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(waitFor))
	_, err = wire.NodeHandshake(nc, wire.NodeDial{Name: "x", Secret: "fedcba9876543210fedcba9876543210"})
	if e, ok := errors.AsType[wire.Error](err); !ok || e.Code != wire.CodeUnauthenticated {
		t.Fatalf("wrong secret: %v", err)
	}
	_, _ = nc.Write(status)
	if types, end := answers(nc, nc); len(types) != 0 || !closedStream(end) {
		t.Fatalf("after the refusal: %v, %v", types, end)
	}

	// A good handshake, then unsealed frames.
	nc2, sess := nodeSession(t, s.Addr(), "x", sealTestSecret)
	if _, err := nc2.Write(status); err != nil {
		t.Fatal(err)
	}
	types, end := answers(nc2, sess.Conn(nc2))
	for _, ty := range types {
		if ty != wire.TypeError {
			t.Fatalf("an unsealed NODE_REQUEST was answered with %v", ty)
		}
	}
	if !closedStream(end) {
		t.Fatalf("the connection stayed open: %v", end)
	}
}

// TestNodeLink_FlippedByteCloses: one changed bit anywhere in a sealed
// record (length, type, flags, sequence, ciphertext, tag) closes the
// connection without the request being served; the unchanged record is
// served (the control).
func TestNodeLink_FlippedByteCloses(t *testing.T) {
	s := startNode(t, "a", nil, withSecret)
	plain := wire.AppendNodeRequest(nil, 1, wire.OpStatus, nil)
	record := func(i int) (net.Conn, *wire.SealedConn, []byte) {
		nc, sess := nodeSession(t, s.Addr(), "x", sealTestSecret)
		b, err := sess.Sealer().Seal(nil, plain) // the session's first record
		if err != nil {
			t.Fatal(err)
		}
		sc := sess.Conn(nc)
		if i >= 0 {
			b[i%len(b)] ^= 0x04
		}
		return nc, sc, b
	}
	nc, sc, b := record(-1)
	_, _ = nc.Write(b)
	if types, _ := answers(nc, sc); len(types) == 0 || types[0] != wire.TypeNodeResponse {
		t.Fatalf("control: %v", types)
	}
	for _, i := range []int{0, 3, 4, 5, 9, 10, 15, 20, len(plain) + wire.SealOverhead - 1} {
		nc, sc, b := record(i)
		// What follows on a link (more records) completes a record whose
		// length grew.
		_, _ = nc.Write(append(b, make([]byte, 64)...))
		types, end := answers(nc, sc)
		for _, ty := range types {
			if ty != wire.TypeError {
				t.Fatalf("byte %d flipped: answered %v", i, types)
			}
		}
		if !closedStream(end) {
			t.Fatalf("byte %d flipped: connection not closed (%v)", i, end)
		}
	}
}

// flipProxy forwards TCP connections to target, and changes one bit of
// the first byte of the third frame or record (the first sealed record:
// after NODE_HELLO and NODE_PROOF, or NODE_CHALLENGE and NODE_WELCOME) of
// the direction chosen, once in its life. It stops with the test.
type flipProxy struct {
	ln       net.Listener
	target   atomic.Value  // string
	ready    chan struct{} // closed once target is set (setTarget) or the test ends
	once     sync.Once
	toTarget bool // flip in the dialer -> target direction
	flipped  atomic.Bool
}

// setTarget sets the address connections are forwarded to.
func (p *flipProxy) setTarget(addr string) {
	p.target.Store(addr)
	p.once.Do(func() { close(p.ready) })
}

func startFlipProxy(t *testing.T, toTarget bool) *flipProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &flipProxy{ln: ln, toTarget: toTarget, ready: make(chan struct{})}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		p.once.Do(func() { close(p.ready) })
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// A node may dial b as soon as b joined (its presence is
			// pushed at once), before the test knows b's address.
			<-p.ready
			target, _ := p.target.Load().(string)
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); p.copy(u, c, p.toTarget); u.Close() }()
			go func() { defer wg.Done(); p.copy(c, u, !p.toTarget); c.Close() }()
		}
	}()
	return p
}

func (p *flipProxy) copy(dst, src net.Conn, flip bool) {
	var hdr []byte
	frame, left := 0, 0
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for i := 0; flip && i < n; i++ {
			if left == 0 {
				if hdr = append(hdr, buf[i]); len(hdr) == wire.HeaderLen {
					left, frame, hdr = int(binary.BigEndian.Uint32(hdr)), frame+1, hdr[:0]
					if frame == 3 && left > 0 && !p.flipped.Load() && i+1 < n {
						p.flipped.Store(true)
						buf[i+1] ^= 0x01
					}
				}
				continue
			}
			left--
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestNodeLink_FlippedByteOnARealLink: node a reaches node b only through
// a proxy that changes one bit of the first sealed record, in one
// direction or the other. That link closes (a counts a link failure), and
// a's next link to b, unchanged, carries a's publishes to a channel b
// manages: the cluster recovers by dialing again.
func TestNodeLink_FlippedByteOnARealLink(t *testing.T) {
	for _, dir := range []struct {
		name     string
		toTarget bool
	}{{"dialer to acceptor", true}, {"acceptor to dialer", false}} {
		t.Run(dir.name, func(t *testing.T) {
			p := startFlipProxy(t, dir.toTarget)
			a := startNode(t, "a", nil, withSecret)
			b := startNode(t, "b", []string{a.clu().GossipAddr()}, func(o *Options) {
				withSecret(o)
				o.Cluster.ClientAdvertise = p.ln.Addr().String()
			})
			p.setTarget(b.Addr())
			eventually(t, waitFor, "two members", func() bool { return a.clu().Alive() == 2 && b.clu().Alive() == 2 })
			waitUsable(t, a, b)
			ch := "flip.0" // a leads and hosts on b: a's publishes cross the link
			pub, _ := helloRaw(t, a.Addr())
			var err error
			eventually(t, waitFor, "a publish through a new link after the broken one", func() bool {
				_, err = pub.publishBatch(ch, [][]byte{[]byte("m")})
				if err != nil {
					pub.nc.Close()
					pub, _ = helloRaw(t, a.Addr())
				}
				return err == nil && p.flipped.Load() && a.clu().Stats().LinkFailures > 0
			})
			if !p.flipped.Load() || a.clu().Stats().LinkFailures == 0 {
				t.Fatalf("flipped %v, link failures %d", p.flipped.Load(), a.clu().Stats().LinkFailures)
			}
		})
	}
}
