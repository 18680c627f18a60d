package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

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
// out on it, and answers and NODE_FEED come back. It is driven by two
// goroutines of its own (a writer that batches whatever was queued since
// its last write into one Write, and a reader that dispatches answers and
// feeds); the peer serves its side on its event loops. All methods are
// safe for concurrent use; callbacks run on the reader goroutine and must
// not block.
type link struct {
	cl   *cluster
	node string
	conn net.Conn

	mu     sync.Mutex
	out    []byte
	spare  []byte
	nextID uint32
	calls  map[uint32]func(h wire.Header, body []byte, err error)
	err    error // set once closed
	wake   chan struct{}
	done   chan struct{}
}

// nodeProof is the NODE_HELLO proof of name under secret (PROTOCOL.md 9.1).
func nodeProof(secret, name string) []byte {
	if secret == "" {
		return nil
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("sluice-node\x00" + name))
	return m.Sum(nil)
}

// dialLink connects to node at addr (its client address) and completes the
// node handshake within timeout.
func dialLink(cl *cluster, node, addr string, timeout time.Duration) (*link, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s (%s): %v", errLinkDown, node, addr, err)
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	hello := wire.AppendNodeHello(nil, wire.NodeHello{Version: wire.NodeVersion, Name: cl.self,
		ClientAddr: cl.clientAddr, Proof: nodeProof(cl.opts.Secret, cl.self)})
	if _, err := c.Write(hello); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s: %v", errLinkDown, node, err)
	}
	r := wire.NewReader(c, wire.MinMaxBody)
	h, body, err := r.Next()
	if err == nil && h.Type == wire.TypeError {
		e, _ := wire.DecodeError(h, body)
		err = fmt.Errorf("refused: %v", e)
	} else if err == nil && h.Type != wire.TypeNodeWelcome {
		err = fmt.Errorf("answered %v to NODE_HELLO", h.Type)
	}
	var name string
	if err == nil {
		name, err = wire.DecodeNodeWelcome(body)
	}
	if err == nil && name != node {
		err = fmt.Errorf("is node %q, not %q", name, node)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s (%s): %v", errLinkDown, node, addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	r.SetMaxBody(cl.srv.peerMaxBody)
	l := &link{cl: cl, node: node, conn: c, calls: make(map[uint32]func(wire.Header, []byte, error)),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	go l.writer()
	go l.reader(r)
	return l, nil
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
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return nil
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

func (l *link) writer() {
	for {
		select {
		case <-l.wake:
		case <-l.done:
			return
		}
		l.mu.Lock()
		buf := l.out
		if len(buf) == 0 {
			l.mu.Unlock()
			continue
		}
		l.out, l.spare = l.spare[:0], nil // the two buffers swap roles
		l.mu.Unlock()
		if _, err := l.conn.Write(buf); err != nil {
			l.close(fmt.Errorf("%w: %s: write: %v", errLinkDown, l.node, err))
			return
		}
		if cap(buf) > 4<<20 {
			buf = nil // do not keep a burst's buffer
		}
		l.mu.Lock()
		l.spare = buf[:0]
		l.mu.Unlock()
	}
}

func (l *link) reader(r *wire.Reader) {
	for {
		h, body, err := r.Next()
		if err != nil {
			l.close(fmt.Errorf("%w: %s: read: %v", errLinkDown, l.node, err))
			return
		}
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
				l.close(fmt.Errorf("%w: %s: %v", errLinkDown, l.node, err))
				return
			}
			l.cl.srv.mirrors.feed(f, stamps, run)
		case wire.TypePing:
			_ = l.send(wire.AppendPong(nil, h.ID))
		case wire.TypePong:
		default: // ERROR, GOAWAY or anything unexpected ends the link
			l.close(fmt.Errorf("%w: %s sent %v", errLinkDown, l.node, h.Type))
			return
		}
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
	l.mu.Unlock()
	close(l.done)
	_ = l.conn.Close()
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
