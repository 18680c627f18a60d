package cluster

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

// LinkBacklog bounds the bytes queued on one outbound link (and, in the
// engine, what may wait in its connection's output).
const LinkBacklog = 64 << 20

// Link is this node's outbound connection to one peer node: requests go
// out on it, and answers and NODE_FEED come back. It is dialed and
// handshaken by the goroutine that needs it, then enrolled in an event
// loop (Transport.Enroll), which owns the connection from then on: the
// loop hands it every frame read (Receive) and writes what was queued
// (Drain, when kicked, so everything queued meanwhile goes out in one
// write). The Link is also the connection's protocol as the loop carries
// it (NodeConn): the record layer and the frames' meaning. Methods are
// safe for concurrent use unless they say otherwise; NodeConn's methods
// run on the loop and must not block.
type Link struct {
	cl   *Cluster
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
	// Scratch of the senders' pulls (replicate.go), on the loop.
	iov    [][]byte
	stamps []int64

	mu       sync.Mutex
	pulls    []*sender // senders to pull at the next drain (replicate.go)
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

// dialLink connects to node at addr (its client address), completes the
// node handshake and enrolls the connection in an event loop, all within
// timeout. It must not run on a loop.
func (cl *Cluster) dialLink(node, addr string, timeout time.Duration) (*Link, error) {
	deadline := time.Now().Add(timeout) // a socket deadline: wall time
	if cl.cut(node) {
		return nil, fmt.Errorf("%w: dial %s (%s): cut off (Config.Cut)", ErrLinkDown, node, addr)
	}
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s (%s): %v", ErrLinkDown, node, addr, err)
	}
	_ = c.SetDeadline(deadline)
	sess, err := wire.NodeHandshake(c, wire.NodeDial{Name: cl.self, ClientAddr: cl.clientAddr,
		Secret: cl.opts.Secret, Expect: node})
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
	l := &Link{cl: cl, node: node, sess: sess, ready: make(chan struct{}),
		calls: make(map[uint32]func(wire.Header, []byte, error))}
	l.lastRecv.Store(l.cl.now().UnixNano())
	if err := cl.cfg.Transport.Enroll(c, l, deadline); err != nil {
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
	lk.io.limit = lk.cl.cfg.Conns.MaxBody
	if !lk.cl.cfg.Conns.Plain {
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

func (lk *Link) error() error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.err
}

// queue appends one frame built by enc to the output; cb, when not nil,
// is registered for the answer carrying the frame's request id.
func (l *Link) queue(enc func(dst []byte, id uint32) []byte, cb func(wire.Header, []byte, error)) error {
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
	kick := l.attached && !l.flushing
	if kick {
		l.flushing = true
	}
	l.mu.Unlock()
	if kick {
		l.c.Execute(l.drain)
	}
	return nil
}

// pull asks the link's loop to run sd's pull at its next drain; false
// when the link ended.
func (l *Link) pull(sd *sender) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	l.pulls = append(l.pulls, sd)
	kick := l.attached && !l.flushing
	if kick {
		l.flushing = true
	}
	l.mu.Unlock()
	if kick {
		l.c.Execute(l.drain)
	}
	return true
}

// drain moves what was queued into the connection's output (on the
// link's loop, when kicked), so that everything queued meanwhile goes out
// in one write, then runs the senders' pulls (replicate.go).
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
	for _, sd := range pulls {
		if dead {
			sd.scheduled.Store(false)
			continue
		}
		sd.pull(l)
	}
	if cap(buf) <= 4<<20 {
		l.mu.Lock()
		l.spare = buf[:0]
		l.mu.Unlock()
	}
}

// call sends a NODE_REQUEST and waits for its answer (at most the
// cluster's callTimeout; a request that times out fails alone, the link
// stays: the heartbeat judges the peer). The result is a copy.
func (l *Link) call(op wire.NodeOp, body []byte) ([]byte, error) {
	return l.callFor(op, body, l.cl.callTimeout())
}

// callFor is call with its own timeout.
func (l *Link) callFor(op wire.NodeOp, body []byte, timeout time.Duration) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	var reqID uint32
	err := l.queue(func(dst []byte, id uint32) []byte { reqID = id; return wire.AppendNodeRequest(dst, id, op, body) },
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
				ch <- result{err: &opError{status, text}}
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

// post sends a NODE_REQUEST whose answer is not awaited.
func (l *Link) post(op wire.NodeOp, body []byte) {
	_ = l.queue(func(dst []byte, id uint32) []byte { return wire.AppendNodeRequest(dst, id, op, body) },
		func(wire.Header, []byte, error) {})
}

// send queues a frame that has no answer (NODE_READ, NODE_UNREAD).
func (l *Link) send(frame []byte) error {
	return l.queue(func(dst []byte, _ uint32) []byte { return append(dst, frame...) }, nil)
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
	l.lastRecv.Store(l.cl.now().UnixNano()) // the heartbeat's clock
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
		l.cl.fillAdoption(l.node, f, stamps, run) // a copy to adopt (drain.go), and
		l.cl.fillCopy(f, stamps, run)             // the gateway's copy: either may exist
	case wire.TypeNodeReplicated:
		r, err := wire.DecodeNodeReplicated(body)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrLinkDown, l.node, err)
		}
		l.cl.replicated(l, r)
	case wire.TypePing:
		return l.send(wire.AppendPong(nil, h.ID))
	case wire.TypePong:
	default: // ERROR, GOAWAY or anything unexpected ends the link
		return fmt.Errorf("%w: %s sent %v", ErrLinkDown, l.node, h.Type)
	}
	return nil
}

// fillCopy applies a NODE_FEED (on the link's loop) to this node's copy
// of the streamlet: records are appended with their original stamps, a
// sealed feed completes the copy, a gone one breaks it (the host does not
// hold the streamlet: not yet, since a committed streamlet may be read
// before its host got it, or not any more: the readers read it again
// until the committed list says what became of it), and the channel's
// readers are woken.
func (c *Cluster) fillCopy(f wire.NodeFeed, stamps, run []byte) {
	s := c.gw.Copy(f.Streamlet)
	if s == nil {
		return // dropped meanwhile
	}
	s.Fill(int(f.Start), int(f.Count), func(i int) ([]byte, bool, int64) {
		var p []byte
		var ext bool
		p, ext, run, _ = wire.NextRecordExt(run) // validated by DecodeNodeFeed
		return p, ext, wire.FeedStamp(stamps, i)
	}, f.Flags&wire.FeedSealed != 0)
	if f.Flags&wire.FeedGone != 0 {
		s.Break()
	}
	c.gw.Wake(s.Channel())
}

// Write implements NodeConn: the output is sealed.
func (l *Link) Write(iov [][]byte, w Writer) error {
	if l.cl.cut(l.node) {
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
// cluster learns that the peer may be gone. onLoop says the caller runs
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
	l.cl.linkClosed(l, err)
}

// closed reports whether the link has ended.
func (l *Link) closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err != nil
}
