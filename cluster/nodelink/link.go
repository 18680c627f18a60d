package nodelink

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// ErrLinkDown: the connection to a peer node failed or was closed; the
// outcome of requests in flight on it is unknown.
var ErrLinkDown = errors.New("cluster: link to peer node down")

// errCallTimeout: a peer did not answer one request in time; the link
// itself is alive (its heartbeat says so) and the request's outcome is
// unknown.
var errCallTimeout = errors.New("cluster: peer request timed out")

// errLinkBacklog: more than LinkBacklog bytes wait to be written to a peer.
var errLinkBacklog = errors.New("cluster: link to peer node backlogged")

// StatusError is a NODE_RESPONSE with a status other than OK: the peer
// answered, so the link is fine, but the operation failed.
type StatusError struct {
	Status uint8
	Text   string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("cluster: peer: status %d: %s", e.Status, e.Text)
}

// LinkBacklog bounds the bytes queued on one outbound link (and, in the
// engine, what may wait in its connection's output).
const LinkBacklog = 64 << 20

// Link is this node's outbound connection to one peer node: requests go
// out on it, and answers, NODE_FEED and NODE_REPLICATED come back. It is
// dialed and handshaken by the goroutine that needs it, then enrolled in
// an event loop (Transport.Enroll), which owns the connection from then
// on: the loop hands it every frame read (Input) and writes what was
// queued (drain, when kicked, so everything queued meanwhile goes out in
// one write). The Link is also the connection's protocol as the loop
// carries it (NodeConn): the record layer and the frames' meaning.
// Methods are safe for concurrent use unless they say otherwise;
// NodeConn's methods run on the loop and must not block.
type Link struct {
	ls   *Links
	node string
	sess *wire.NodeSession // the handshake's keys, for the record layer

	// c is set on the loop when it opens the enrolled connection
	// (Attach); ready is closed then.
	c     Conn
	ready chan struct{}

	// Owned by the loop: the record layer, an inflated NODE_FEED, and
	// the error that ends the link found while reading.
	io    nodeIO
	z     []byte
	inErr error
	// scratch is the Pullers', on the loop.
	scratch Scratch

	mu       sync.Mutex
	pulls    []Puller // to pull at the next drain
	out      []byte
	spare    []byte
	flushing bool // a flush task is scheduled
	attached bool
	nextID   uint32
	calls    map[uint32]func(h wire.Header, body []byte, err error)
	err      error // set once closed

	// lastRecv is when a frame last arrived from the peer (unix ns, the cluster's
	// time; set by the loop, read by the heartbeat).
	lastRecv atomic.Int64
}

// Puller is work a link's loop does when it drains the link (the data
// plane's senders, which write from their streamlets' buffers): Pull runs
// on the loop after the frames queued meanwhile were moved to the output;
// Dropped, instead, when the link ended first.
type Puller interface {
	Pull(l *Link)
	Dropped()
}

// Scratch is buffers a link's Pullers reuse, owned by the link's loop:
// valid only during a Pull.
type Scratch struct {
	Iov    [][]byte
	Stamps []int64
}

// dialLink connects to node at addr (its client address), completes the
// node handshake and enrolls the connection in an event loop, all within
// timeout. It must not run on a loop.
func (ls *Links) dialLink(node, addr string, timeout time.Duration) (*Link, error) {
	deadline := time.Now().Add(timeout) // a socket deadline: wall time
	if ls.cut(node) {
		return nil, fmt.Errorf("%w: dial %s (%s): cut off (Config.Cut)", ErrLinkDown, node, addr)
	}
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s (%s): %v", ErrLinkDown, node, addr, err)
	}
	_ = c.SetDeadline(deadline)
	sess, err := wire.NodeHandshake(c, wire.NodeDial{Name: ls.cfg.Self, ClientAddr: ls.clientAddr,
		Secret: ls.cfg.Secret, Expect: node})
	if err == nil && len(sess.Rest) != 0 {
		// The acceptor sends nothing unasked, and gnet cannot be handed
		// bytes already read.
		err = fmt.Errorf("sent %d bytes after NODE_WELCOME", len(sess.Rest))
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s (%s): %v", ErrLinkDown, node, addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	l := &Link{ls: ls, node: node, sess: sess, ready: make(chan struct{}),
		calls: make(map[uint32]func(wire.Header, []byte, error))}
	l.lastRecv.Store(ls.now().UnixNano())
	if err := ls.cfg.Transport.Enroll(c, l, deadline); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s: enroll: %v", ErrLinkDown, node, err)
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-l.ready:
	case <-t.C:
		l.close(fmt.Errorf("%w: %s: not opened by the event loop in time", ErrLinkDown, node), false)
	}
	if e := l.error(); e != nil {
		return nil, e
	}
	return l, nil
}

// Attach implements Enrolled: it is called by the loop that opened the
// enrolled connection, with its side of it; false means the link ended
// meanwhile (the loop closes the connection).
func (lk *Link) Attach(c Conn) bool {
	// The record layer first: a kick may queue output at once.
	lk.io.limit = lk.ls.cfg.Conns.MaxBody
	if !lk.ls.cfg.Conns.Plain {
		lk.io.sealed(lk.sess)
	}
	lk.mu.Lock()
	dead := lk.err != nil
	lk.c, lk.attached = c, true
	kick := len(lk.out) > 0 && !lk.flushing
	if kick {
		lk.flushing = true
	}
	lk.mu.Unlock()
	close(lk.ready)
	if kick {
		c.Execute(lk.drain)
	}
	return !dead
}

// Node returns the name of the peer node.
func (lk *Link) Node() string { return lk.node }

// Conn returns the loop's side of the link's connection: for a Puller,
// on the link's loop.
func (lk *Link) Conn() Conn { return lk.c }

// Scratch returns the buffers the Pullers share: for a Puller, on the
// link's loop.
func (lk *Link) Scratch() *Scratch { return &lk.scratch }

func (lk *Link) error() error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.err
}

// Queue appends one frame built by enc (given the frame's request id) to
// the link's output; cb, when not nil, is registered for the answer
// carrying that id (NODE_RESPONSE or NODE_APPENDED) and runs on the
// link's loop with it, or with the error that ended the link. It fails
// when the link ended or more than LinkBacklog bytes wait. Any goroutine;
// it never blocks.
func (l *Link) Queue(enc func(dst []byte, id uint32) []byte, cb func(wire.Header, []byte, error)) error {
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	if len(l.out) > LinkBacklog {
		l.mu.Unlock()
		return errLinkBacklog
	}
	l.nextID++
	if l.nextID == 0 {
		l.nextID = 1
	}
	id := l.nextID
	l.out = enc(l.out, id)
	if cb != nil {
		l.calls[id] = cb
	}
	l.unlockAndKick()
	return nil
}

// unlockAndKick releases l.mu (held by the caller, who queued something)
// and, when the link is attached and no drain is due yet, asks the link's
// loop to drain: no lock is held across the gnet call.
func (l *Link) unlockAndKick() {
	kick := l.attached && !l.flushing
	if kick {
		l.flushing = true
	}
	l.mu.Unlock()
	if kick {
		l.c.Execute(l.drain)
	}
}

// Pull asks the link's loop to run p's Pull at its next drain; false
// when the link ended. Any goroutine; it never blocks.
func (l *Link) Pull(p Puller) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	l.pulls = append(l.pulls, p)
	l.unlockAndKick()
	return true
}

// drain moves what was queued into the connection's output (on the
// link's loop, when kicked), so that everything queued meanwhile goes out
// in one write, then runs the Pullers.
func (l *Link) drain() {
	l.mu.Lock()
	buf := l.out
	l.out, l.spare = l.spare[:0], nil
	l.flushing = false
	dead := l.err != nil
	pulls := l.pulls
	l.pulls = nil
	l.mu.Unlock()
	if len(buf) > 0 && !dead {
		b := l.c.OwnStart()
		b = append(b, buf...)
		l.c.OwnEnd(b)
	}
	for _, p := range pulls {
		if dead {
			p.Dropped()
			continue
		}
		p.Pull(l)
	}
	if cap(buf) <= 4<<20 {
		l.mu.Lock()
		l.spare = buf[:0]
		l.mu.Unlock()
	}
}

// Call sends a NODE_REQUEST and waits for its answer (at most
// CallTimeout; a request that times out fails alone, the link stays: the
// heartbeat judges the peer). The result is a copy; a refusal is a
// *StatusError. Any goroutine but the loops.
func (l *Link) Call(op wire.NodeOp, body []byte) ([]byte, error) {
	return l.CallFor(op, body, l.ls.CallTimeout())
}

// CallFor is Call with its own timeout.
func (l *Link) CallFor(op wire.NodeOp, body []byte, timeout time.Duration) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	var reqID uint32
	err := l.Queue(func(dst []byte, id uint32) []byte { reqID = id; return wire.AppendNodeRequest(dst, id, op, body) },
		func(h wire.Header, b []byte, err error) {
			if err == nil && h.Type != wire.TypeNodeResponse {
				err = fmt.Errorf("%w: %s answered %v to a request", ErrLinkDown, l.node, h.Type)
			}
			if err != nil {
				ch <- result{err: err}
				return
			}
			status, res, text, derr := wire.DecodeNodeResponse(b)
			switch {
			case derr != nil:
				ch <- result{err: fmt.Errorf("%w: %s: %v", ErrLinkDown, l.node, derr)}
			case status != wire.NodeOK:
				ch <- result{err: &StatusError{status, text}}
			default:
				ch <- result{b: append([]byte(nil), res...)}
			}
		})
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.b, r.err
	case <-t.C:
		l.mu.Lock()
		if l.calls != nil {
			delete(l.calls, reqID)
		}
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %s: %v not answered in %v", errCallTimeout, l.node, op, timeout)
	}
}

// Post sends a NODE_REQUEST whose answer is not awaited. Any goroutine;
// it never blocks.
func (l *Link) Post(op wire.NodeOp, body []byte) {
	_ = l.Queue(func(dst []byte, id uint32) []byte { return wire.AppendNodeRequest(dst, id, op, body) },
		func(wire.Header, []byte, error) {})
}

// Send queues a frame that has no answer (NODE_READ, NODE_UNREAD). Any
// goroutine; it never blocks.
func (l *Link) Send(frame []byte) error {
	return l.Queue(func(dst []byte, _ uint32) []byte { return append(dst, frame...) }, nil)
}

// Input implements NodeConn: the records read are opened, and every
// frame is handled (receive); a frame that cannot be taken ends the link.
func (l *Link) Input(raw []byte) int {
	if l.inErr != nil {
		return len(raw)
	}
	n, err := l.io.input(raw, l)
	if err == nil {
		err = l.inErr
	} else {
		err = fmt.Errorf("%w: %s: %v", ErrLinkDown, l.node, err)
	}
	if err != nil {
		l.inErr = err
		l.fail(err)
		return len(raw)
	}
	return n
}

// frame handles one frame (frameHandler).
func (l *Link) frame(h wire.Header, body []byte) bool {
	body, err := inflateFeed(&l.z, h, body, l.io.limit)
	if err != nil {
		l.inErr = fmt.Errorf("%w: %s: %v", ErrLinkDown, l.node, err)
		return false
	}
	if err := l.receive(h, body); err != nil {
		l.inErr = err
		return false
	}
	return true
}

// receive handles one frame from the peer (on the link's loop); an error
// ends the link.
func (l *Link) receive(h wire.Header, body []byte) error {
	l.lastRecv.Store(l.ls.now().UnixNano()) // the heartbeat's clock
	switch h.Type {
	case wire.TypeNodeResponse, wire.TypeNodeAppended:
		l.mu.Lock()
		cb := l.calls[h.ID]
		delete(l.calls, h.ID)
		l.mu.Unlock()
		if cb != nil {
			cb(h, body, nil)
		}
	case wire.TypeNodeFeed:
		f, stamps, run, err := wire.DecodeNodeFeed(body)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrLinkDown, l.node, err)
		}
		l.ls.cfg.Handler.Feed(l.node, f, stamps, run)
	case wire.TypeNodeReplicated:
		r, err := wire.DecodeNodeReplicated(body)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrLinkDown, l.node, err)
		}
		l.ls.cfg.Handler.Replicated(l, r)
	case wire.TypePing:
		return l.Send(wire.AppendPong(nil, h.ID))
	case wire.TypePong:
	default: // ERROR, GOAWAY or anything unexpected ends the link
		return fmt.Errorf("%w: %s sent %v", ErrLinkDown, l.node, h.Type)
	}
	return nil
}

// Write implements NodeConn: the output is sealed.
func (l *Link) Write(iov [][]byte, w Writer) error {
	if l.ls.cut(l.node) {
		return nil // dropped on the way (Config.Cut)
	}
	return l.io.write(iov, w)
}

// Sweep implements NodeConn: a link's liveness is its heartbeat's
// (heartbeat.go), not the connection's timers.
func (l *Link) Sweep(int64) {}

// Stalled implements NodeConn: the peer does not read; the link ends.
func (l *Link) Stalled(pending int) {
	l.fail(fmt.Errorf("%w: %s does not read (%d bytes pending)", ErrLinkDown, l.node, pending))
}

// GoAway implements NodeConn: nothing is sent; the link ends when the
// engine closes its connection at the end of the shutdown.
func (l *Link) GoAway() {}

// Linger implements NodeConn: a link closes at once.
func (l *Link) Linger() bool { return false }

// Closed implements NodeConn: the loop closed the link's connection
// (closing it again is a no-op).
func (l *Link) Closed() {
	l.close(fmt.Errorf("%w: %s: connection closed", ErrLinkDown, l.node), true)
}

// fail ends the link from its loop and closes its connection there.
func (l *Link) fail(err error) {
	l.close(err, true)
}

// close ends the link once: requests in flight fail with err, and the
// Handler learns that the peer may be gone (unless the node stops). onLoop says the caller runs
// on the link's loop.
func (l *Link) close(err error, onLoop bool) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = err
	calls := l.calls
	l.calls = nil
	attached := l.attached
	l.mu.Unlock()
	if attached {
		// Close the connection on its loop (a no-op when the loop
		// closes it already).
		if onLoop {
			l.c.Close()
		} else {
			l.c.Execute(l.c.Close)
		}
	}
	for _, cb := range calls {
		cb(wire.Header{}, nil, err)
	}
	l.ls.linkClosed(l, err)
}

// closed reports whether the link has ended.
func (l *Link) closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err != nil
}
