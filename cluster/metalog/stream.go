package metalog

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rtm/sluice/internal/owned"
	"github.com/sluice-rtm/sluice/wire"
)

// streamLayer is the raft.StreamLayer of the Raft transport: TCP on the
// log's own listen address, where every connection first runs the node
// handshake with the cluster secret (as dialer or acceptor), then carries
// its bytes in sealed records (wire.SealedConn). A peer without the secret
// fails the handshake and never reaches raft's RPC decoder: it cannot
// join, vote or append.
//
// Goroutines: one accept loop, and one per inbound handshake in progress
// (at most maxHandshakes), all counted by g and waited for by wait. Dial
// runs on the caller's (raft's) goroutine. Every connection, established or
// in its handshake, is tracked and closed by Close, which ends raft's
// per-connection handlers too.
type streamLayer struct {
	self, secret  string // self: this server's id, its handshake name
	ln            net.Listener
	adv           net.Addr
	hsTimeout     time.Duration
	maxInbound    int // established inbound connections
	maxHandshakes int // inbound handshakes in progress
	log           *slog.Logger

	ready chan net.Conn // handshaken inbound connections for Accept
	done  chan struct{} // closed by Close
	once  sync.Once
	g     owned.Count
	wg    sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	conns   map[*streamConn]struct{} // established, both directions
	raw     map[net.Conn]bool        // in their handshake; true: inbound
	inbound int                      // established inbound connections
	block   func(node string) bool   // test hook: refuse and cut peers, by node name
}

// errBlocked: a connection to or from a peer the test hook cuts off.
var errBlocked = errors.New("metalog: peer cut off (test hook)")

// streamOptions are a streamLayer's settings.
type streamOptions struct {
	self, secret  string
	adv           net.Addr
	hsTimeout     time.Duration
	maxInbound    int
	maxHandshakes int
	log           *slog.Logger
}

// newStreamLayer starts serving ln.
func newStreamLayer(ln net.Listener, o streamOptions) *streamLayer {
	s := &streamLayer{
		self: o.self, secret: o.secret, ln: ln, adv: o.adv, hsTimeout: o.hsTimeout,
		maxInbound: o.maxInbound, maxHandshakes: o.maxHandshakes, log: o.log,
		ready: make(chan net.Conn), done: make(chan struct{}),
		conns: make(map[*streamConn]struct{}), raw: make(map[net.Conn]bool),
	}
	s.wg.Add(1)
	s.g.Go(s.acceptLoop, s.wg.Done)
	return s
}

// Accept implements net.Listener: the next inbound connection that
// completed its handshake.
func (s *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.ready:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Addr implements net.Listener: the advertised address, which raft puts in
// its configuration and other nodes dial.
func (s *streamLayer) Addr() net.Addr { return s.adv }

// Close implements net.Listener: it stops accepting and closes every
// connection. raft's transport calls it from its Close. wait then waits for
// the goroutines.
func (s *streamLayer) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.ln.Close()
		s.mu.Lock()
		s.closed = true
		conns := make([]net.Conn, 0, len(s.conns)+len(s.raw))
		for c := range s.conns {
			conns = append(conns, c.Conn)
		}
		for c := range s.raw {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return err
}

// wait waits for the goroutines of the stream layer; call it after Close.
func (s *streamLayer) wait() { s.wg.Wait() }

// acceptLoop accepts TCP connections and starts their handshakes.
func (s *streamLayer) acceptLoop() {
	var delay time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			// A transient failure (out of file descriptors): back off.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("metalog: accept failed", "err", err, "retry", delay)
			t := time.NewTimer(delay)
			select {
			case <-s.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		delay = 0
		if !s.admit(c) {
			_ = c.Close()
			continue
		}
		s.wg.Add(1)
		s.g.Go(func() { s.serveInbound(c) }, s.wg.Done)
	}
}

// admit registers an inbound connection for its handshake, unless the
// layer is closed or at its limits.
func (s *streamLayer) admit(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	pending := 0
	for _, in := range s.raw {
		if in {
			pending++
		}
	}
	if s.closed || pending >= s.maxHandshakes || s.inbound+pending >= s.maxInbound {
		if !s.closed {
			s.log.Warn("metalog: inbound connection refused: too many", "remote", c.RemoteAddr(),
				"handshaking", pending, "established", s.inbound)
		}
		return false
	}
	s.raw[c] = true
	return true
}

// serveInbound runs an inbound connection's handshake and hands it to
// Accept.
func (s *streamLayer) serveInbound(c net.Conn) {
	sess, err := acceptHandshake(c, s.self, s.secret, time.Now().Add(s.hsTimeout))
	if err != nil {
		s.drop(c)
		if errors.Is(err, errHandshake) {
			s.log.Warn("metalog: inbound connection refused", "remote", c.RemoteAddr(), "err", err)
		}
		return
	}
	sc, err := s.established(c, sess, true)
	if err != nil {
		return
	}
	select {
	case s.ready <- sc:
	case <-s.done:
		_ = sc.Close()
	}
}

// Dial implements raft.StreamLayer: TCP to the address's host:port, then
// the dialer's handshake (bounded by the handshake timeout), which fails
// unless the acceptor proves the secret under the server id the address
// names.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	hostport, expect := splitRaftAddress(string(address))
	if expect == "" {
		return nil, fmt.Errorf("metalog: Raft address %q names no server id", address)
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", hostport)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = c.Close()
		return nil, net.ErrClosed
	}
	s.raw[c] = false
	s.mu.Unlock()
	if err := c.SetDeadline(time.Now().Add(s.hsTimeout)); err != nil {
		s.drop(c)
		return nil, err
	}
	sess, err := wire.NodeHandshake(c, wire.NodeDial{Name: s.self, ClientAddr: s.adv.String(), Secret: s.secret, Expect: expect})
	if err == nil {
		err = c.SetDeadline(time.Time{})
	}
	if err != nil {
		s.drop(c)
		return nil, fmt.Errorf("metalog: node handshake with %s: %w", address, err)
	}
	return s.established(c, sess, false)
}

// drop forgets and closes a connection that failed its handshake.
func (s *streamLayer) drop(c net.Conn) {
	s.mu.Lock()
	delete(s.raw, c)
	s.mu.Unlock()
	_ = c.Close()
}

// established turns a handshaken connection into a sealed one, unless the
// layer closed meanwhile or the test hook cuts the peer off.
func (s *streamLayer) established(c net.Conn, sess *wire.NodeSession, inbound bool) (*streamConn, error) {
	sc := &streamConn{Conn: c, sc: sess.Conn(c), sl: s, peer: sess.Peer, inbound: inbound}
	s.mu.Lock()
	delete(s.raw, c)
	var err error
	switch {
	case s.closed:
		err = net.ErrClosed
	case s.block != nil && s.block(nodeOf(sess.Peer)):
		err = errBlocked
	default:
		s.conns[sc] = struct{}{}
		if inbound {
			s.inbound++
		}
	}
	s.mu.Unlock()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return sc, nil
}

// forget removes a closed connection.
func (s *streamLayer) forget(sc *streamConn) {
	s.mu.Lock()
	if _, ok := s.conns[sc]; ok {
		delete(s.conns, sc)
		if sc.inbound {
			s.inbound--
		}
	}
	s.mu.Unlock()
}

// setBlock is the test hook of partitions: from now on connections to and
// from a node for which block returns true are refused after their
// handshake, and those established are closed. nil lifts the cut.
func (s *streamLayer) setBlock(block func(node string) bool) {
	s.mu.Lock()
	s.block = block
	var cut []*streamConn
	if block != nil {
		for sc := range s.conns {
			if block(nodeOf(sc.peer)) {
				cut = append(cut, sc)
			}
		}
	}
	s.mu.Unlock()
	for _, sc := range cut {
		_ = sc.Close()
	}
}

// streamConn is a handshaken connection: reads and writes go through the
// sealed records; Close, addresses and deadlines are the TCP
// connection's. One goroutine may read while another writes (as raft's
// transport does); Close may come from any goroutine.
type streamConn struct {
	net.Conn
	sc      *wire.SealedConn
	sl      *streamLayer
	peer    string // its server id
	inbound bool
	once    sync.Once
}

func (c *streamConn) Read(p []byte) (int, error)  { return c.sc.Read(p) }
func (c *streamConn) Write(p []byte) (int, error) { return c.sc.Write(p) }

// Close closes the TCP connection and forgets it.
func (c *streamConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.sl.forget(c) })
	return err
}
