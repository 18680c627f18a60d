package cluster

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/internal/benchhook"
	"github.com/sluice-rtm/sluice/wire"
)

// The acceptor side of a node connection (PROTOCOL.md 9): a peer node
// dialed this node's client listener and its first frame was NODE_HELLO.
// The connection answers NODE_CHALLENGE, checks NODE_PROOF, answers
// NODE_WELCOME (the last plaintext frame), and from then on serves the
// peer's sealed requests: NODE_APPEND (a batch for a streamlet hosted
// here, appended on the connection's loop), NODE_READ / NODE_UNREAD (feeds
// of hosted streamlets to the peer's copies) and NODE_REQUEST (manager and
// host operations, run on the cluster's serving pool).

// maxPeerRequests bounds the NODE_REQUESTs served at once for one peer
// connection; more are answered OVERLOAD at once.
const maxPeerRequests = 256

// peerOutboundLimit bounds what waits to be written to one peer before
// feeds pause.
const peerOutboundLimit = 32 << 20

// peerFeedBytes bounds the record bytes of one NODE_FEED.
const peerFeedBytes = 256 << 10

// s2Min is the smallest record run a feed compresses (Options.S2).
const s2Min = wire.DefaultS2Threshold

// acceptPhase is where an inbound connection is in the handshake.
type acceptPhase uint8

const (
	awaitHello acceptPhase = iota // the first frame, NODE_HELLO, is next
	awaitProof                    // NODE_CHALLENGE sent
	welcomed                      // NODE_WELCOME sent: sealed frames
)

// acceptConn is one inbound node connection. It is owned by the loop that
// carries it: every field is used only there (feeds' scheduled flags and
// pool completions reach it through Conn.Execute).
type acceptConn struct {
	cl    *Cluster
	c     Conn
	o     ConnOptions
	io    nodeIO
	phase acceptPhase
	acc   *wire.NodeAcceptor // between NODE_HELLO and NODE_PROOF
	peer  string             // the peer's name, once welcomed

	feeds    map[uint64]*feed // streamlets this peer reads, by id
	requests int              // NODE_REQUESTs being served
	// waits holds, per replicated streamlet, the NODE_APPENDED answers
	// that wait until every replica holds their records (ackwait.go).
	waits map[uint64]*appendWait

	closing, closed bool

	// Timers (unix ns of the server's clock): opened for the handshake,
	// lastIn and pinged for the idle timeout, partialSince for the frame
	// timeout (0: no partial frame).
	opened, lastIn, partialSince int64
	pinged                       bool

	// Scratch reused by every batch.
	payloads [][]byte
	exts     []bool
	pos      []uint64
	dup      []bool
	z        []byte   // an inflated NODE_APPEND
	iov      [][]byte // a feed's record run
	stamps   []int64
	zin      []byte
}

// Accept returns the connection carried by c, whose first frame (not yet
// consumed) is NODE_HELLO: package engine hands such a connection over
// and from then on carries its bytes (NodeConn). Call it on c's loop.
func (cl *Cluster) Accept(c Conn) NodeConn {
	now := c.Now()
	return &acceptConn{cl: cl, c: c, o: cl.cfg.Conns, io: nodeIO{limit: wire.MinMaxBody}, opened: now, lastIn: now}
}

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
	a.cl.log.Warn("node connection closed: a sealed record did not open", "peer", a.peer, "remote", a.c.RemoteAddr(), "err", err)
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
	secret := a.cl.opts.Secret
	if secret == "" && a.o.RequireSecret {
		a.sendError(0, wire.CodeUnauthenticated, "node connections need a cluster secret on this server")
		return
	}
	var nonce [wire.NodeNonceLen]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		a.sendError(0, wire.CodeInternal, "no randomness for the node handshake")
		return
	}
	acc := wire.AcceptNodeHello(secret, a.cl.self, h, nonce)
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
		a.cl.log.Warn("node connection refused", "peer", a.acc.Hello().Name, "remote", a.c.RemoteAddr(), "err", err)
		a.sendError(0, code, "bad node proof")
		return
	}
	a.c.OwnEnd(b)
	a.acc, a.phase, a.peer = nil, welcomed, sess.Peer
	a.feeds = make(map[uint64]*feed)
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
			body = a.z // the records are copied into the streamlet below
		}
		a.append(h.ID, body)
	case wire.TypeNodeRead:
		id, from, err := wire.DecodeNodeRead(body)
		if err != nil {
			a.sendError(0, wire.CodeProtocolError, err.Error())
			return
		}
		a.read(id, int(from))
	case wire.TypeNodeUnread:
		id, err := wire.DecodeNodeUnread(body)
		if err != nil {
			a.sendError(0, wire.CodeProtocolError, err.Error())
			return
		}
		if f := a.feeds[id]; f != nil {
			f.stop()
		}
	case wire.TypeNodeRequest:
		a.serve(h.ID, body)
	case wire.TypeNodeReplicate:
		a.replicate(body)
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
	peer, cl := a.peer, a.cl
	if !cl.goServe(func() {
		status, res, text := cl.Serve(peer, op, ob)
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

// append appends a peer gateway's batch to a hosted streamlet and answers
// with how many records were appended and the first position.
func (a *acceptConn) append(id uint32, body []byte) {
	na, run, err := wire.DecodeNodeAppend(body)
	if err != nil {
		a.sendError(0, wire.CodeProtocolError, err.Error())
		return
	}
	res := wire.NodeAppended{Status: wire.NodeOK}
	s := a.cl.host.Streamlet(na.Streamlet)
	switch {
	case s == nil:
		res.Status = wire.NodeUnknown
	case s.Epoch() != na.Epoch:
		res.Status = wire.NodeStale
	default:
		payloads, exts := a.payloads[:0], a.exts[:0]
		for p, ext, rest, ok := wire.NextRecordExt(run); ok; p, ext, rest, ok = wire.NextRecordExt(rest) {
			payloads = append(payloads, p)
			exts = append(exts, ext)
		}
		if cap(a.pos) < len(payloads) {
			a.pos = make([]uint64, len(payloads))
			a.dup = make([]bool, len(payloads))
		}
		pos, dup := a.pos[:len(payloads)], a.dup[:len(payloads)]
		n := a.c.AppendBatch(s, payloads, exts, pos, dup)
		res.Done = uint32(n)
		stored := 0
		for k := 0; k < n; k++ {
			switch {
			case dup[k]:
				res.Dups = append(res.Dups, wire.NodeDup{Index: uint32(k), Position: pos[k]})
			case stored == 0:
				res.First = pos[k]
				stored++
			default:
				stored++
			}
		}
		if n < len(payloads) {
			res.Status = wire.NodeClosed
		}
		clear(payloads)
		a.payloads, a.exts = payloads[:0], exts[:0]
		if s.Replicated() && n > 0 {
			// Answered once every replica holds the batch (ackwait.go).
			a.waitDurable(s, id, res, pos[:n])
			return
		}
	}
	b := a.c.OwnStart()
	b = wire.AppendNodeAppended(b, id, res)
	a.c.OwnEnd(b)
}

// read starts feeding streamlet id to the peer from record from.
func (a *acceptConn) read(id uint64, from int) {
	if old := a.feeds[id]; old != nil {
		old.stop()
	}
	s := a.cl.host.Streamlet(id)
	if s == nil {
		a.feedNotice(id, uint32(from), wire.FeedGone)
		return
	}
	f := &feed{a: a, s: s, next: from}
	a.feeds[id] = f
	s.AddWaker(f)
	f.run()
}

func (a *acceptConn) feedNotice(id uint64, start uint32, flags uint8) {
	b := a.c.OwnStart()
	b = wire.AppendNodeFeedHeader(b, wire.NodeFeed{Streamlet: id, Start: start, Flags: flags}, nil, 0)
	a.c.OwnEnd(b)
}

// Write implements NodeConn.
func (a *acceptConn) Write(iov [][]byte, w Writer) error {
	if a.peer != "" && a.cl.cut(a.peer) {
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

// Closed implements NodeConn: the feeds stop, and so do the answers
// waiting for replicas.
func (a *acceptConn) Closed() {
	a.closed = true
	for _, f := range a.feeds {
		f.stop()
	}
	for _, w := range a.waits {
		w.s.RemoveWaker(w)
	}
	a.waits = nil
}

// feed streams one hosted streamlet to one peer's copy. It is owned by
// the peer connection's loop; scheduled is set by whichever goroutine
// changed the streamlet (Wake).
type feed struct {
	a         *acceptConn
	s         *host.Streamlet
	next      int // index of the next record to send
	done      bool
	retry     bool
	scheduled atomic.Bool
}

// stop ends the feed (on its connection's loop).
func (f *feed) stop() {
	if f.done {
		return
	}
	f.done = true
	delete(f.a.feeds, f.s.ID())
	f.s.RemoveWaker(f)
}

// Wake schedules the feed on its connection's loop (host.Waker): the
// streamlet was appended to, sealed or freed. Called from any goroutine,
// with no lock held.
func (f *feed) Wake() {
	if f.scheduled.CompareAndSwap(false, true) {
		f.a.c.Execute(f.task)
	}
}

func (f *feed) task() {
	f.scheduled.Store(false)
	f.run()
}

// run sends the records appended since the last run (on the connection's
// loop), sharing the streamlet's bytes with the write like DATA does.
func (f *feed) run() {
	a := f.a
	c := a.c
	for !f.done && !a.closed && !a.closing {
		if c.Outbound() > peerOutboundLimit {
			f.retryLater()
			return
		}
		s := f.s
		buf := s.Buf()
		if !buf.Acquire() {
			a.feedNotice(s.ID(), uint32(f.next), wire.FeedGone)
			f.stop()
			return
		}
		sealed := buf.Sealed()
		n := buf.Len()
		if f.next >= n {
			buf.Release()
			if sealed {
				a.feedNotice(s.ID(), uint32(n), wire.FeedSealed)
				f.stop()
			}
			return
		}
		var end, nb int
		a.iov, end, nb = buf.AppendRun(a.iov[:0], f.next, n, peerFeedBytes)
		c.Hold(s)
		stamps := a.stamps[:0]
		for i := f.next; i < end; i++ {
			stamps = append(stamps, buf.Stamp(i))
		}
		a.stamps = stamps
		var flags uint8
		if sealed && end == n {
			flags = wire.FeedSealed
		}
		nf := wire.NodeFeed{Streamlet: s.ID(), Start: uint32(f.next), Flags: flags}
		raw := uint64(wire.HeaderLen + wire.NodeFeedPrefixLen + 8*len(stamps) + nb)
		a.cl.feedRaw.Add(raw)
		b := c.OwnStart()
		b, ok := a.appendFeedS2(b, nf, stamps, nb)
		if !ok {
			a.cl.feedSent.Add(raw)
			b = wire.AppendNodeFeedHeader(b, nf, stamps, nb)
			c.OwnEnd(b)
			for _, r := range a.iov {
				c.Share(r)
			}
		} else {
			c.OwnEnd(b)
		}
		clear(a.iov)
		c.CountOut(end - f.next)
		f.next = end
		if flags != 0 {
			f.stop()
			return
		}
	}
}

// appendFeedS2 appends to b a compressed NODE_FEED of the run in a.iov
// (nb bytes) when Options.S2 is on, the run is long enough and the block
// is smaller; false leaves b as it was.
func (a *acceptConn) appendFeedS2(b []byte, f wire.NodeFeed, stamps []int64, nb int) ([]byte, bool) {
	if !a.cl.opts.S2 || nb < s2Min {
		return b, false
	}
	hdr := len(b)
	b = wire.AppendNodeFeedS2Header(b, f, stamps, 0)
	var ok bool
	b, ok, a.zin = wire.AppendCompressedRun(b, a.iov, nb, s2Min, a.zin)
	if !ok {
		return b[:hdr], false
	}
	binary.BigEndian.PutUint32(b[hdr:], uint32(len(b)-hdr-wire.HeaderLen))
	a.cl.feedSent.Add(uint64(len(b) - hdr))
	return b, true
}

func (f *feed) retryLater() {
	if f.retry {
		return
	}
	f.retry = true
	time.AfterFunc(2*time.Millisecond, func() {
		f.a.c.Execute(func() {
			f.retry = false
			f.run()
		})
	})
}

// FeedBytes returns the NODE_FEED bytes this node sent and what they
// would have been uncompressed.
func (cl *Cluster) FeedBytes() (sent, raw uint64) { return cl.feedSent.Load(), cl.feedRaw.Load() }
