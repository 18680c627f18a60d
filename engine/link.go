package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/sluice-rtm/sluice/wire"
)

// errLinkDown: the connection to a peer node failed or was closed; the
// outcome of requests in flight on it is unknown.
var errLinkDown = errors.New("engine: link to peer node down")

// errLinkBacklog: more than linkBacklog bytes wait to be written to a peer.
var errLinkBacklog = errors.New("engine: link to peer node backlogged")

// linkBacklog bounds the bytes queued on one outbound link.
const linkBacklog = 64 << 20

// link is this node's outbound connection to one peer node: requests go
// out on it, and answers and NODE_FEED come back. It is dialed and
// handshaken by the goroutine that needs it, then enrolled in a gnet event
// loop (Engine.Register), which owns the connection from then on: the
// loop reads and dispatches answers and feeds (linkTraffic) and writes
// what was queued (flush, once per loop iteration, so everything queued
// meanwhile goes out in one write). Methods are safe for concurrent use;
// callbacks run on the loop and must not block.
type link struct {
	cl   *cluster
	node string

	// c and l are set on the loop when gnet opens the enrolled connection
	// (attach); ready is closed then.
	c     *conn
	l     *loop
	ready chan struct{}

	mu       sync.Mutex
	out      []byte
	spare    []byte
	flushing bool // a flush task is scheduled
	attached bool
	nextID   uint32
	calls    map[uint32]func(h wire.Header, body []byte, err error)
	err      error // set once closed
}

// dialLink connects to node at addr (its client address), completes the
// node handshake and enrolls the connection in an event loop, all within
// timeout. It must not run on a loop.
func dialLink(cl *cluster, node, addr string, timeout time.Duration) (*link, error) {
	deadline := time.Now().Add(timeout)
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s (%s): %v", errLinkDown, node, addr, err)
	}
	_ = c.SetDeadline(deadline)
	r, name, err := wire.NodeHandshake(c, wire.NodeHello{Version: wire.NodeVersion, Name: cl.self,
		ClientAddr: cl.clientAddr, Proof: wire.NodeProof(cl.opts.Secret, cl.self)})
	if err == nil && name != node {
		err = fmt.Errorf("is node %q, not %q", name, node)
	}
	if err == nil && r.Buffered() != 0 {
		err = fmt.Errorf("sent %d bytes after NODE_WELCOME", r.Buffered())
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s (%s): %v", errLinkDown, node, addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	l := &link{cl: cl, node: node, ready: make(chan struct{}),
		calls: make(map[uint32]func(wire.Header, []byte, error))}
	srv := cl.srv
	select {
	case <-srv.loopsUp:
	case <-time.After(time.Until(deadline)):
		c.Close()
		return nil, fmt.Errorf("%w: %s: event loops not running", errLinkDown, node)
	}
	ctx := gnet.NewNetConnContext(context.Background(), c)
	ctx = gnet.NewContext(ctx, l)
	res, err := srv.eng.Register(ctx)
	if err == nil {
		// gnet duplicates the descriptor and closes c itself.
		if rr := <-res; rr.Err != nil {
			err = rr.Err
		}
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s: enroll: %v", errLinkDown, node, err)
	}
	select {
	case <-l.ready:
	case <-time.After(time.Until(deadline)):
		l.close(fmt.Errorf("%w: %s: not opened by the event loop in time", errLinkDown, node))
	}
	if e := l.error(); e != nil {
		return nil, e
	}
	return l, nil
}

// attach is gnet's OnOpen for the enrolled connection (on its loop).
func (lk *link) attach(c *conn) bool {
	lk.mu.Lock()
	dead := lk.err != nil
	lk.c, lk.l, lk.attached = c, c.l, true
	flush := len(lk.out) > 0 && !lk.flushing
	if flush {
		lk.flushing = true
	}
	lk.mu.Unlock()
	close(lk.ready)
	if flush {
		lk.flush()
	}
	return !dead
}

func (lk *link) error() error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.err
}

// queue appends one frame built by enc to the output; cb, when not nil,
// is registered for the answer carrying the frame's request id.
func (l *link) queue(enc func(dst []byte, id uint32) []byte, cb func(wire.Header, []byte, error)) error {
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	if len(l.out) > linkBacklog {
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
		l.l.execute(l.flush)
	}
	return nil
}

// flush moves what was queued into the connection's output (on its loop;
// the loop writes it at the end of the iteration).
func (l *link) flush() {
	l.mu.Lock()
	buf := l.out
	l.out, l.spare = l.spare[:0], nil
	l.flushing = false
	l.mu.Unlock()
	c := l.c
	if len(buf) > 0 && !c.closed && !c.closing {
		s, k := c.ownStart()
		c.scratch = append(c.scratch, buf...)
		c.ownEnd(s, k)
	}
	if cap(buf) <= 4<<20 {
		l.mu.Lock()
		l.spare = buf[:0]
		l.mu.Unlock()
	}
}

// call sends a NODE_REQUEST and waits for its answer (at most the
// cluster's RPC timeout). The result is a copy.
func (l *link) call(op wire.NodeOp, body []byte) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	err := l.queue(func(dst []byte, id uint32) []byte { return wire.AppendNodeRequest(dst, id, op, body) },
		func(h wire.Header, b []byte, err error) {
			if err == nil && h.Type != wire.TypeNodeResponse {
				err = fmt.Errorf("%w: %s answered %v to a request", errLinkDown, l.node, h.Type)
			}
			if err != nil {
				ch <- result{err: err}
				return
			}
			status, res, text, derr := wire.DecodeNodeResponse(b)
			switch {
			case derr != nil:
				ch <- result{err: fmt.Errorf("%w: %s: %v", errLinkDown, l.node, derr)}
			case status != wire.NodeOK:
				ch <- result{err: &opError{status, text}}
			default:
				ch <- result{b: append([]byte(nil), res...)}
			}
		})
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(l.cl.rpcTimeout())
	defer t.Stop()
	select {
	case r := <-ch:
		return r.b, r.err
	case <-t.C:
		err := fmt.Errorf("%w: %s: %v timed out", errLinkDown, l.node, op)
		l.close(err) // an unanswered peer is treated as failed
		return nil, err
	}
}

// post sends a NODE_REQUEST whose answer is not awaited.
func (l *link) post(op wire.NodeOp, body []byte) {
	_ = l.queue(func(dst []byte, id uint32) []byte { return wire.AppendNodeRequest(dst, id, op, body) },
		func(wire.Header, []byte, error) {})
}

// send queues a frame that has no answer (NODE_READ, NODE_UNREAD).
func (l *link) send(frame []byte) error {
	return l.queue(func(dst []byte, _ uint32) []byte { return append(dst, frame...) }, nil)
}

// linkTraffic is OnTraffic for a link's connection: answers and feeds
// from the peer, dispatched on the loop.
func (l *loop) linkTraffic(c *conn) {
	lk := c.link
	buf, _ := c.gc.Peek(-1)
	off := 0
	for !c.closing && !c.closed {
		h, body, n, err := wire.Split(buf[off:], l.srv.peerMaxBody)
		if err == wire.ErrIncomplete {
			break
		}
		if err != nil {
			lk.fail(fmt.Errorf("%w: %s: %v", errLinkDown, lk.node, err))
			break
		}
		off += n
		if err := lk.dispatch(h, body); err != nil {
			lk.fail(err)
			break
		}
	}
	if c.closing || c.closed {
		off = len(buf)
	}
	l.stats.bytesIn += uint64(off)
	if off > 0 {
		_, _ = c.gc.Discard(off) // never 0: see loop.traffic
	}
}

// dispatch handles one frame from the peer (on the loop).
func (l *link) dispatch(h wire.Header, body []byte) error {
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
			return fmt.Errorf("%w: %s: %v", errLinkDown, l.node, err)
		}
		l.cl.srv.mirrors.feed(f, stamps, run)
	case wire.TypePing:
		c := l.c
		s, k := c.ownStart()
		c.scratch = wire.AppendPong(c.scratch, h.ID)
		c.ownEnd(s, k)
	case wire.TypePong:
	default: // ERROR, GOAWAY or anything unexpected ends the link
		return fmt.Errorf("%w: %s sent %v", errLinkDown, l.node, h.Type)
	}
	return nil
}

// fail ends the link from its loop and closes its connection.
func (l *link) fail(err error) {
	l.close(err)
	if c := l.c; c != nil && !c.closing && !c.closed {
		c.closing = true
		c.l.closeAfterFlush = append(c.l.closeAfterFlush, c)
	}
}

// close ends the link once: requests in flight fail with err, and the
// cluster learns that the peer may be gone.
func (l *link) close(err error) {
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
		// Close the connection on its loop (a no-op when the loop is
		// the caller and closes it already, or gnet closed it).
		lp, c := l.l, l.c
		lp.execute(func() {
			if !c.closed && !c.closing {
				c.closing = true
				lp.closeAfterFlush = append(lp.closeAfterFlush, c)
			}
		})
	}
	for _, cb := range calls {
		cb(wire.Header{}, nil, err)
	}
	l.cl.linkClosed(l, err)
}

// closed reports whether the link has ended.
func (l *link) closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err != nil
}
