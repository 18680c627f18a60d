package nodelink

import (
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/sluice-rtm/sluice/internal/benchhook"
	"github.com/sluice-rtm/sluice/wire"
)

// The acceptor side of a node connection (PROTOCOL.md 9): a peer node
// dialed this node's client listener and its first frame was NODE_HELLO.
// The connection answers NODE_CHALLENGE, checks NODE_PROOF, answers
// NODE_WELCOME (the last plaintext frame), and from then on serves the
// peer's sealed frames: NODE_REQUEST (run by the Handler on the serving
// pool, Config.Go, answered here), PING, and the data plane's frames,
// decoded (a compressed NODE_APPEND inflated) and handed to the
// connection's InboundHandler: NODE_APPEND, NODE_READ, NODE_UNREAD,
// NODE_REPLICATE.

// maxPeerRequests bounds the NODE_REQUESTs served at once for one peer
// connection; more are answered OVERLOAD at once.
const maxPeerRequests = 256

// OutboundLimit bounds what waits to be written to one peer before the
// data plane's feeds and senders pause (and retry shortly).
const OutboundLimit = 32 << 20

// Inbound is a welcomed inbound node connection as its InboundHandler
// sees it. Its methods run on the connection's loop.
type Inbound interface {
	// Peer is the peer node's name (authenticated by the handshake).
	Peer() string
	// Conn is the loop's side of the connection.
	Conn() Conn
	// Done reports whether the connection is closing or closed: nothing
	// more is to be written to it.
	Done() bool
}

// InboundHandler is the data plane of one welcomed inbound connection
// (the cluster's). Its methods run on the connection's loop and must not
// block; the byte slices they get are valid only during the call.
type InboundHandler interface {
	// Append takes a NODE_APPEND (request id, header, record run).
	Append(id uint32, a wire.NodeAppend, run []byte)
	// Read and Unread take a NODE_READ (feed streamlet from record from)
	// and a NODE_UNREAD (stop that feed).
	Read(streamlet uint64, from uint32)
	Unread(streamlet uint64)
	// Replicate takes a NODE_REPLICATE (from the streamlet's orderer).
	Replicate(r wire.NodeReplicate, stamps, run []byte)
	// Closed: the connection closed; nothing more arrives.
	Closed()
}

// acceptPhase is where an inbound connection is in the handshake.
type acceptPhase uint8

const (
	awaitHello acceptPhase = iota // the first frame, NODE_HELLO, is next
	awaitProof                    // NODE_CHALLENGE sent
	welcomed                      // NODE_WELCOME sent: sealed frames
)

// acceptConn is one inbound node connection. It is owned by the loop that
// carries it: every field is used only there (pool completions reach it
// through Conn.Execute).
type acceptConn struct {
	ls      *Links
	c       Conn
	o       ConnOptions
	io      nodeIO
	phase   acceptPhase
	acc     *wire.NodeAcceptor // between NODE_HELLO and NODE_PROOF
	peer    string             // the peer's name, once welcomed
	welcome func(Inbound) InboundHandler
	h       InboundHandler // once welcomed

	requests int // NODE_REQUESTs being served

	closing, closed bool

	// Timers (unix ns of the server's clock): opened for the handshake,
	// lastIn and pinged for the idle timeout, partialSince for the frame
	// timeout (0: no partial frame).
	opened, lastIn, partialSince int64
	pinged                       bool

	z []byte // an inflated NODE_APPEND
}

// Accept returns the connection carried by c, whose first frame (not yet
// consumed) is NODE_HELLO: package engine hands such a connection over
// and from then on carries its bytes (NodeConn). Once the peer is
// welcomed, welcome gives the connection its data plane. Call it on c's
// loop.
func (ls *Links) Accept(c Conn, welcome func(Inbound) InboundHandler) NodeConn {
	now := c.Now()
	return &acceptConn{ls: ls, c: c, o: ls.cfg.Conns, io: nodeIO{limit: wire.MinMaxBody}, opened: now, lastIn: now,
		welcome: welcome}
}

func (a *acceptConn) Peer() string { return a.peer }
func (a *acceptConn) Conn() Conn   { return a.c }
func (a *acceptConn) Done() bool   { return a.closing || a.closed }

// Input implements NodeConn.
func (a *acceptConn) Input(raw []byte) int {
	if a.closing || a.closed {
		return len(raw)
	}
	now := a.c.Now()
	a.lastIn, a.pinged = now, false
	n := 0
	for {
		wasPlain := a.io.open == nil
		k, err := a.io.input(raw[n:], a)
		n += k
		if err != nil {
			a.inputFailed(err)
			return len(raw)
		}
		if a.closing {
			return len(raw)
		}
		// Go on when the handshake ended inside this read: the rest are
		// records. Else the rest waits for more bytes.
		if !wasPlain || a.io.open == nil || n == len(raw) {
			break
		}
	}
	switch {
	case a.io.pending == 0:
		a.partialSince = 0
	case a.io.progressed || a.partialSince == 0:
		a.partialSince = now
	}
	return n
}

// inputFailed answers bytes that cannot be taken: a malformed or too
// large frame, or a sealed record that does not open (a changed, cut,
// reordered or injected byte, or a peer without the keys).
func (a *acceptConn) inputFailed(err error) {
	if split, tooLarge := isSplit(err); split {
		code := wire.CodeProtocolError
		if tooLarge {
			code = wire.CodeFrameTooLarge
		}
		a.sendError(0, code, err.Error()) // malformed: id 0 (PROTOCOL.md 7.1)
		return
	}
	a.ls.cfg.Log.Warn("node connection closed: a sealed record did not open", "peer", a.peer, "remote", a.c.RemoteAddr(), "err", err)
	a.sendError(0, wire.CodeProtocolError, err.Error()) // sealed with our own key
}

// sendError queues an ERROR; a fatal code also closes the connection once
// it is written (nothing follows a fatal ERROR).
func (a *acceptConn) sendError(id uint32, code wire.Code, text string) {
	if a.closing || a.closed {
		return
	}
	b := a.c.OwnStart()
	b = wire.AppendError(b, id, wire.Error{Code: code, Retriable: code.Retriable(), Text: text})
	a.c.OwnEnd(b)
	if code.Fatal() {
		a.closing = true
		a.c.Close()
	}
}

// frame handles one frame (frameHandler).
func (a *acceptConn) frame(h wire.Header, body []byte) bool {
	if h.Flags&wire.FlagCompressed != 0 && (a.phase != welcomed || h.Type != wire.TypeNodeAppend) {
		// PROTOCOL.md 2.15: only a node's NODE_APPEND is compressed here.
		a.sendError(0, wire.CodeProtocolError, fmt.Sprintf("%v has flag COMPRESSED, which was not negotiated", h.Type))
		return !a.closing
	}
	switch a.phase {
	case awaitHello:
		a.hello(h, body)
	case awaitProof:
		a.proof(h, body)
	default:
		a.request(h, body)
	}
	return !a.closing
}

// hello handles NODE_HELLO, the first flight of the node handshake
// (PROTOCOL.md 9.1): it answers NODE_CHALLENGE with a fresh nonce.
func (a *acceptConn) hello(h0 wire.Header, body []byte) {
	if h0.Type != wire.TypeNodeHello { // the engine hands over only NODE_HELLO
		a.sendError(h0.ID, wire.CodeHelloRequired, fmt.Sprintf("%v before HELLO", h0.Type))
		return
	}
	h, err := wire.DecodeNodeHello(body)
	if err != nil {
		if len(body) >= 2 && h.Version != wire.NodeVersion {
			a.sendError(0, wire.CodeUnsupportedVersion, fmt.Sprintf("node protocol %d, this node speaks %d", h.Version, wire.NodeVersion))
			return
		}
		a.sendError(0, wire.CodeProtocolError, err.Error())
		return
	}
	if h.Version != wire.NodeVersion {
		a.sendError(0, wire.CodeUnsupportedVersion, fmt.Sprintf("node protocol %d, this node speaks %d", h.Version, wire.NodeVersion))
		return
	}
	secret := a.ls.cfg.Secret
	if secret == "" && a.o.RequireSecret {
		a.sendError(0, wire.CodeUnauthenticated, "node connections need a cluster secret on this server")
		return
	}
	var nonce [wire.NodeNonceLen]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		a.sendError(0, wire.CodeInternal, "no randomness for the node handshake")
		return
	}
	acc := wire.AcceptNodeHello(secret, a.ls.cfg.Self, h, nonce)
	if acc == nil {
		a.sendError(0, wire.CodeUnauthenticated, "NODE_HELLO carries this node's own name or nonce (a reflected handshake)")
		return
	}
	a.acc, a.phase = acc, awaitProof
	b := a.c.OwnStart()
	b = acc.AppendChallenge(b)
	a.c.OwnEnd(b)
}

// proof handles the frame after NODE_CHALLENGE, which must be NODE_PROOF:
// on a good proof it answers NODE_WELCOME, the last plaintext frame, and
// from then on the connection is sealed.
func (a *acceptConn) proof(h wire.Header, body []byte) {
	if h.Type != wire.TypeNodeProof {
		a.sendError(0, wire.CodeProtocolError, fmt.Sprintf("%v during the node handshake, want NODE_PROOF", h.Type))
		return
	}
	b := a.c.OwnStart()
	start := len(b)
	b, sess, err := a.acc.Finish(b, body)
	if err != nil {
		a.c.OwnEnd(b[:start]) // nothing queued
		code := wire.CodeUnauthenticated
		if !errors.Is(err, wire.ErrNodeAuth) {
			code = wire.CodeProtocolError
		}
		a.ls.cfg.Log.Warn("node connection refused", "peer", a.acc.Hello().Name, "remote", a.c.RemoteAddr(), "err", err)
		a.sendError(0, code, "bad node proof")
		return
	}
	a.c.OwnEnd(b)
	a.acc, a.phase, a.peer = nil, welcomed, sess.Peer
	a.h = a.welcome(a)
	// NODE_WELCOME goes out in the clear; everything after it is sealed.
	a.c.Flush()
	if !a.o.Plain {
		a.io.sealed(sess)
	}
	a.io.limit = a.o.MaxBody
}

// request handles one frame from a welcomed peer.
func (a *acceptConn) request(h wire.Header, body []byte) {
	benchhook.NodeFrame(uint8(h.Type))
	switch h.Type {
	case wire.TypeNodeAppend:
		if h.Flags&wire.FlagCompressed != 0 {
			var err error
			if a.z, err = wire.Inflate(a.z, body, wire.NodeAppendPrefixLen, a.o.MaxBody, wire.TypeNodeAppend); err != nil {
				a.sendError(0, wire.CodeProtocolError, err.Error())
				return
			}
			body = a.z // the handler copies the records
		}
		na, run, err := wire.DecodeNodeAppend(body)
		if err != nil {
			a.sendError(0, wire.CodeProtocolError, err.Error())
			return
		}
		a.h.Append(h.ID, na, run)
	case wire.TypeNodeRead:
		id, from, err := wire.DecodeNodeRead(body)
		if err != nil {
			a.sendError(0, wire.CodeProtocolError, err.Error())
			return
		}
		a.h.Read(id, from)
	case wire.TypeNodeUnread:
		id, err := wire.DecodeNodeUnread(body)
		if err != nil {
			a.sendError(0, wire.CodeProtocolError, err.Error())
			return
		}
		a.h.Unread(id)
	case wire.TypeNodeRequest:
		a.serve(h.ID, body)
	case wire.TypeNodeReplicate:
		r, stamps, run, err := wire.DecodeNodeReplicate(body)
		if err != nil {
			a.sendError(0, wire.CodeProtocolError, err.Error())
			return
		}
		a.h.Replicate(r, stamps, run)
	case wire.TypePing:
		b := a.c.OwnStart()
		b = wire.AppendPong(b, h.ID)
		a.c.OwnEnd(b)
	case wire.TypePong:
	default:
		a.sendError(h.ID, wire.CodeUnknownType, fmt.Sprintf("%v is not a node-to-node request", h.Type))
	}
}

// serve runs a NODE_REQUEST on the cluster's pool and answers it on the
// loop.
func (a *acceptConn) serve(id uint32, body []byte) {
	op, ob, err := wire.DecodeNodeRequest(body)
	if err != nil {
		a.sendError(0, wire.CodeProtocolError, err.Error())
		return
	}
	benchhook.NodeRequest(uint8(op))
	if a.requests >= maxPeerRequests {
		a.respond(id, wire.NodeOverload, nil, fmt.Sprintf("more than %d requests in progress", maxPeerRequests))
		return
	}
	ob = append([]byte(nil), ob...) // the loop's buffer is reused
	peer, cfg := a.peer, &a.ls.cfg
	if !cfg.Go(func() {
		status, res, text := cfg.Handler.Serve(peer, op, ob)
		a.c.Execute(func() {
			a.requests--
			if !a.closing && !a.closed {
				a.respond(id, status, res, text)
			}
		})
	}) {
		a.respond(id, wire.NodeOverload, nil, "the node's request pool is full")
		return
	}
	a.requests++
}

func (a *acceptConn) respond(id uint32, status uint8, res []byte, text string) {
	b := a.c.OwnStart()
	b = wire.AppendNodeResponse(b, id, status, res, text)
	a.c.OwnEnd(b)
}

// Write implements NodeConn.
func (a *acceptConn) Write(iov [][]byte, w Writer) error {
	if a.peer != "" && a.ls.cut(a.peer) {
		return nil // dropped on the way (Config.Cut)
	}
	return a.io.write(iov, w)
}

// Sweep implements NodeConn: the handshake, idle and frame timeouts, as
// for a client connection.
func (a *acceptConn) Sweep(now int64) {
	if a.closing || a.closed {
		return
	}
	o := &a.o
	if a.phase != welcomed {
		if o.HandshakeTimeout > 0 && now-a.opened > int64(o.HandshakeTimeout) {
			a.sendError(0, wire.CodeHandshakeTimeout, fmt.Sprintf("no node handshake within %v", o.HandshakeTimeout))
		}
	} else if o.IdleTimeout > 0 {
		silent := now - a.lastIn
		switch {
		case silent > int64(o.IdleTimeout):
			a.sendError(0, wire.CodeIdleTimeout, fmt.Sprintf("nothing received for %v", o.IdleTimeout))
			return
		case !a.pinged && o.PingInterval > 0 && silent > int64(o.PingInterval):
			a.pinged = true
			b := a.c.OwnStart()
			b = wire.AppendPing(b, 0)
			a.c.OwnEnd(b)
		}
	}
	if d := o.FrameTimeout; d > 0 && a.partialSince != 0 && now-a.partialSince > int64(d) {
		a.sendError(0, wire.CodeIdleTimeout, fmt.Sprintf("a frame begun %v ago is still incomplete", d))
	}
}

// Stalled implements NodeConn.
func (a *acceptConn) Stalled(pending int) {
	a.sendError(0, wire.CodeSlowConsumer, fmt.Sprintf("more than %d bytes pending to a node that does not read (%d)", LinkBacklog, pending))
}

// GoAway implements NodeConn: the peer's link ends at once (and is dialed
// again to another address, or the node is found down).
func (a *acceptConn) GoAway() {
	if a.closing || a.closed {
		return
	}
	b := a.c.OwnStart()
	b = wire.AppendGoAway(b, wire.GoAway{Code: wire.CodeShuttingDown, Text: "server shutting down"})
	a.c.OwnEnd(b)
}

// Linger implements NodeConn: a refused handshake lingers.
func (a *acceptConn) Linger() bool { return a.phase != welcomed }

// Closed implements NodeConn: the data plane learns it (its feeds stop,
// and so do the answers waiting for replicas).
func (a *acceptConn) Closed() {
	a.closed = true
	if a.h != nil {
		a.h.Closed()
	}
}
