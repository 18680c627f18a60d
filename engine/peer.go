package engine

import (
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/wire"
)

// peerConn is the state of an inbound connection from a peer node (the
// acceptor side of PROTOCOL.md 9), owned by the connection's loop.
type peerConn struct {
	name     string
	feeds    map[uint64]*feed // streamlets this peer reads, by id
	requests int              // NODE_REQUESTs being served
}

// maxPeerRequests bounds the NODE_REQUESTs served at once for one peer
// connection; more are answered OVERLOAD at once.
const maxPeerRequests = 256

// feed streams one hosted streamlet to one peer's copy. It is owned by
// the peer connection's loop; scheduled is set by whichever goroutine
// changed the streamlet (Wake).
type feed struct {
	c         *conn
	s         *host.Streamlet
	next      int // index of the next record to send
	done      bool
	retry     bool
	scheduled atomic.Bool
}

// peerOutboundLimit bounds what waits to be written to one peer before
// feeds pause.
const peerOutboundLimit = 32 << 20

// peerFeedBytes bounds the record bytes of one NODE_FEED.
const peerFeedBytes = 256 << 10

// nodeHello handles NODE_HELLO on a connection that has not said HELLO:
// the first flight of the node handshake (PROTOCOL.md 9.1). It answers
// NODE_CHALLENGE with a fresh nonce and waits for NODE_PROOF (nodeProof).
// Only a cluster node takes node connections, and not over WebSocket; a
// single node answers NODE_HELLO like any other frame before HELLO.
func (l *loop) nodeHello(c *conn, h0 wire.Header, body []byte) {
	srv := l.srv
	if srv.cl == nil || c.ws != nil {
		l.hello(c, h0, body)
		return
	}
	h, err := wire.DecodeNodeHello(body)
	if err != nil {
		if len(body) >= 2 && h.Version != wire.NodeVersion {
			c.sendError(0, wire.CodeUnsupportedVersion, fmt.Sprintf("node protocol %d, this node speaks %d", h.Version, wire.NodeVersion))
			return
		}
		c.sendError(0, wire.CodeProtocolError, err.Error())
		return
	}
	if h.Version != wire.NodeVersion {
		c.sendError(0, wire.CodeUnsupportedVersion, fmt.Sprintf("node protocol %d, this node speaks %d", h.Version, wire.NodeVersion))
		return
	}
	secret := srv.opts.Cluster.Secret
	if secret == "" && srv.opts.Auth != nil {
		c.sendError(0, wire.CodeUnauthenticated, "node connections need a cluster secret on this server")
		return
	}
	var nonce [wire.NodeNonceLen]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		c.sendError(0, wire.CodeInternal, "no randomness for the node handshake")
		return
	}
	a := wire.AcceptNodeHello(secret, srv.opts.ServerName, h, nonce)
	if a == nil {
		c.sendError(0, wire.CodeUnauthenticated, "NODE_HELLO carries this node's own name or nonce (a reflected handshake)")
		return
	}
	c.nodeAccept = a
	s, k := c.ownStart()
	c.scratch = a.AppendChallenge(c.scratch)
	c.ownEnd(s, k)
}

// nodeProof handles the frame after NODE_CHALLENGE, which must be
// NODE_PROOF: on a good proof it answers NODE_WELCOME, the last plaintext
// frame, and from then on the connection is a sealed peer connection.
func (l *loop) nodeProof(c *conn, h wire.Header, body []byte) {
	if h.Type != wire.TypeNodeProof {
		c.sendError(0, wire.CodeProtocolError, fmt.Sprintf("%v during the node handshake, want NODE_PROOF", h.Type))
		return
	}
	a := c.nodeAccept
	s, k := c.ownStart()
	var sess *wire.NodeSession
	var err error
	c.scratch, sess, err = a.Finish(c.scratch, body)
	if err != nil {
		code := wire.CodeUnauthenticated
		if !errors.Is(err, wire.ErrNodeAuth) {
			code = wire.CodeProtocolError
		}
		l.srv.log.Warn("node connection refused", "peer", a.Hello().Name, "remote", c.gc.RemoteAddr(), "err", err)
		c.sendError(0, code, "bad node proof")
		return
	}
	c.ownEnd(s, k)
	c.nodeAccept = nil
	c.hello = true
	c.peer = &peerConn{name: sess.Peer, feeds: make(map[uint64]*feed)}
	// NODE_WELCOME goes out in the clear; everything after it is sealed.
	c.flush()
	c.ns = l.srv.newNodeSeal(sess)
}

// peerFrame handles one frame from a peer node.
func (l *loop) peerFrame(c *conn, h wire.Header, body []byte) {
	switch h.Type {
	case wire.TypeNodeAppend:
		if h.Flags&wire.FlagCompressed != 0 {
			var err error
			if l.nodeZ, err = wire.Inflate(l.nodeZ, body, wire.NodeAppendPrefixLen, l.srv.peerMaxBody, wire.TypeNodeAppend); err != nil {
				c.sendError(0, wire.CodeProtocolError, err.Error())
				return
			}
			body = l.nodeZ // the records are copied into the streamlet below
		}
		l.peerAppend(c, h.ID, body)
	case wire.TypeNodeRead:
		id, from, err := wire.DecodeNodeRead(body)
		if err != nil {
			c.sendError(0, wire.CodeProtocolError, err.Error())
			return
		}
		l.peerRead(c, id, int(from))
	case wire.TypeNodeUnread:
		id, err := wire.DecodeNodeUnread(body)
		if err != nil {
			c.sendError(0, wire.CodeProtocolError, err.Error())
			return
		}
		if f := c.peer.feeds[id]; f != nil {
			f.stop()
		}
	case wire.TypeNodeRequest:
		op, ob, err := wire.DecodeNodeRequest(body)
		if err != nil {
			c.sendError(0, wire.CodeProtocolError, err.Error())
			return
		}
		cl := l.srv.cl // set: only cluster nodes take node connections
		if c.peer.requests >= maxPeerRequests {
			s, k := c.ownStart()
			c.scratch = wire.AppendNodeResponse(c.scratch, h.ID, wire.NodeOverload, nil,
				fmt.Sprintf("more than %d requests in progress", maxPeerRequests))
			c.ownEnd(s, k)
			return
		}
		ob = append([]byte(nil), ob...) // gnet's buffer is reused
		peer, id := c.peer.name, h.ID
		if !cl.Go(func() {
			status, res, text := cl.Serve(peer, op, ob)
			l.execute(func() {
				c.peer.requests--
				if c.closed || c.closing {
					return
				}
				s, k := c.ownStart()
				c.scratch = wire.AppendNodeResponse(c.scratch, id, status, res, text)
				c.ownEnd(s, k)
			})
		}) {
			s, k := c.ownStart()
			c.scratch = wire.AppendNodeResponse(c.scratch, id, wire.NodeOverload, nil, "the node's request pool is full")
			c.ownEnd(s, k)
			return
		}
		c.peer.requests++
	case wire.TypePing:
		s, k := c.ownStart()
		c.scratch = wire.AppendPong(c.scratch, h.ID)
		c.ownEnd(s, k)
	case wire.TypePong:
	default:
		c.sendError(h.ID, wire.CodeUnknownType, fmt.Sprintf("%v is not a node-to-node request", h.Type))
	}
}

// peerAppend appends a peer gateway's batch to a hosted streamlet and
// answers with how many records were appended and the first position.
func (l *loop) peerAppend(c *conn, id uint32, body []byte) {
	a, run, err := wire.DecodeNodeAppend(body)
	if err != nil {
		c.sendError(0, wire.CodeProtocolError, err.Error())
		return
	}
	res := wire.NodeAppended{Status: wire.NodeOK}
	s := l.srv.host.Streamlet(a.Streamlet)
	switch {
	case s == nil:
		res.Status = wire.NodeUnknown
	case s.Epoch() != a.Epoch:
		res.Status = wire.NodeStale
	default:
		payloads, exts := l.peerPayloads[:0], l.peerExt[:0]
		for p, ext, rest, ok := wire.NextRecordExt(run); ok; p, ext, rest, ok = wire.NextRecordExt(rest) {
			payloads = append(payloads, p)
			exts = append(exts, ext)
		}
		if cap(l.peerPos) < len(payloads) {
			l.peerPos = make([]uint64, len(payloads))
			l.peerDup = make([]bool, len(payloads))
		}
		pos, dup := l.peerPos[:len(payloads)], l.peerDup[:len(payloads)]
		n := s.AppendBatchExt(payloads, exts, pos, dup, l.now)
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
		if stored > 0 {
			l.stats.msgsIn += uint64(stored)
			if gc := l.srv.gw.lookup(s.Channel()); gc != nil {
				gc.notify(l)
			}
		}
		if n < len(payloads) {
			res.Status = wire.NodeClosed
		}
		clear(payloads)
		l.peerPayloads, l.peerExt = payloads[:0], exts[:0]
	}
	st, k := c.ownStart()
	c.scratch = wire.AppendNodeAppended(c.scratch, id, res)
	c.ownEnd(st, k)
}

// peerRead starts feeding streamlet id to the peer from record from.
func (l *loop) peerRead(c *conn, id uint64, from int) {
	if old := c.peer.feeds[id]; old != nil {
		old.stop()
	}
	s := l.srv.host.Streamlet(id)
	if s == nil {
		sendFeedNotice(c, id, uint32(from), wire.FeedGone)
		return
	}
	f := &feed{c: c, s: s, next: from}
	c.peer.feeds[id] = f
	s.AddWaker(f)
	f.run()
}

func sendFeedNotice(c *conn, id uint64, start uint32, flags uint8) {
	s, k := c.ownStart()
	c.scratch = wire.AppendNodeFeedHeader(c.scratch, wire.NodeFeed{Streamlet: id, Start: start, Flags: flags}, nil, 0)
	c.ownEnd(s, k)
}

// stop ends the feed (on its connection's loop).
func (f *feed) stop() {
	if f.done {
		return
	}
	f.done = true
	delete(f.c.peer.feeds, f.s.ID())
	f.s.RemoveWaker(f)
}

// Wake schedules the feed on its connection's loop (host.Waker): the
// streamlet was appended to, sealed or freed. Called from any goroutine,
// with no lock held.
func (f *feed) Wake() {
	if f.scheduled.CompareAndSwap(false, true) {
		f.c.l.execute(f.task)
	}
}

func (f *feed) task() {
	f.scheduled.Store(false)
	f.run()
}

// run sends the records appended since the last run (on the connection's
// loop), sharing the streamlet's bytes with the write like DATA does.
func (f *feed) run() {
	c := f.c
	l := c.l
	for !f.done && !c.closed && !c.closing {
		if c.outbound() > peerOutboundLimit {
			f.retryLater()
			return
		}
		s := f.s
		buf := s.Buf()
		if !buf.Acquire() {
			sendFeedNotice(c, s.ID(), uint32(f.next), wire.FeedGone)
			f.stop()
			return
		}
		sealed := buf.Sealed()
		n := buf.Len()
		if f.next >= n {
			buf.Release()
			if sealed {
				sendFeedNotice(c, s.ID(), uint32(n), wire.FeedSealed)
				f.stop()
			}
			return
		}
		var end, nb int
		l.iov, end, nb = buf.AppendRun(l.iov[:0], f.next, n, peerFeedBytes)
		l.held = append(l.held, s)
		stamps := l.stamps[:0]
		for i := f.next; i < end; i++ {
			stamps = append(stamps, buf.Stamp(i))
		}
		l.stamps = stamps
		var flags uint8
		if sealed && end == n {
			flags = wire.FeedSealed
		}
		st, k := c.ownStart()
		nf := wire.NodeFeed{Streamlet: s.ID(), Start: uint32(f.next), Flags: flags}
		raw := uint64(wire.HeaderLen + wire.NodeFeedPrefixLen + 8*len(stamps) + nb)
		l.srv.feedRaw.Add(raw)
		if !l.appendFeedS2(c, nf, stamps, nb) {
			l.srv.feedSent.Add(raw)
			c.scratch = wire.AppendNodeFeedHeader(c.scratch, nf, stamps, nb)
			c.ownEnd(st, k)
			for _, b := range l.iov {
				c.shared(b)
			}
		} else {
			c.ownEnd(st, k)
		}
		l.stats.msgsOut += uint64(end - f.next)
		f.next = end
		if len(c.iov) > maxIov {
			c.flush()
		}
		if flags != 0 {
			f.stop()
			return
		}
	}
}

func (f *feed) retryLater() {
	if f.retry {
		return
	}
	f.retry = true
	time.AfterFunc(2*time.Millisecond, func() {
		f.c.l.execute(func() {
			f.retry = false
			f.run()
		})
	})
}

// closePeer stops a closed peer connection's feeds (on its loop).
func closePeer(c *conn) {
	for _, f := range c.peer.feeds {
		f.stop()
	}
}
