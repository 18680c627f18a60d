package engine

import (
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/sluice-rtm/sluice/cluster/nodelink"
	"github.com/sluice-rtm/sluice/wire"
)

// maxIov caps the vectors handed to one writev (IOV_MAX is 1024 on Linux);
// a connection with more pending vectors is flushed early.
const maxIov = 1000

// conn is one client connection. It is owned by its event loop: every
// field is read and written only on that loop's goroutine (in gnet
// callbacks or in tasks the loop executes), so it needs no lock.
//
// Output is assembled per loop iteration and written with one writev per
// connection at the end of it (conn.flush): own bytes (headers, acks,
// small frames) go to scratch, shared DATA bodies are referenced in iov
// without copying. gnet copies whatever the socket does not take at once
// into its outbound buffer, so after flush nothing references the
// streamlet memory any more.
type conn struct {
	gc     gnet.Conn
	l      *loop
	opened int64 // unix ns, for the handshake deadline
	// outSeen is this connection's output as last counted in its loop's
	// outbound sum (loop.outSum).
	outSeen int

	hello   bool
	headers bool // FeatureHeaders negotiated: EXT publishes, extended records delivered
	s2      bool // FeatureS2 negotiated: compressed publishes and DATA
	refresh bool // FeatureRefresh negotiated: AUTHED sent, REFRESH taken (jwt.go)
	// presence: FeaturePresence negotiated (presence.go); id is the
	// connection's id on this node, which presence reports.
	presence bool
	filters  bool // FeatureFilters negotiated: SUBSCRIBE with FILTER, FDATA (filter.go)
	id       uint64
	closing  bool // a fatal error was queued; input is ignored
	closed   bool // gnet closed it; cleanup done or pending
	// halfClosed: a fatal ERROR was written and the write side shut
	// down; the connection is closed when the client closes or at
	// lingerEnd (unix ns; loop.closeGracefully).
	halfClosed bool
	lingerEnd  int64
	// sentAway: GOAWAY was sent because this node cannot serve one of
	// the connection's channels (progress.go).
	sentAway bool
	refused  bool // refused at open and counted in Server.lingering
	// partialSince is when the first byte of the frame (or record) still
	// incomplete in the input came (unix ns; 0 = none): FrameTimeout.
	partialSince int64
	dirty        bool // in l.dirty

	subs map[uint32]*sub
	acks []wire.Ack

	iov      [][]byte
	one      [1][]byte // sockWriter.Write's vector
	scratch  []byte
	ownBegin int  // start in scratch of the last iov entry when lastOwn
	lastOwn  bool // the last iov entry is the tail of scratch
	pending  int  // bytes in iov not yet handed to gnet
	// gbuf is gnet's outbound buffer of c as last seen (conn.gnetOut): an
	// upper bound, exact when 0.
	gbuf int

	sec connSec // identity, permissions, rate limit, activity (auth.go)
	// clientID and clientInfo say who the client is (docs/auth.md): a
	// JWT's sub and info claim, or a static token's configured name ("" if
	// it has none) and no info. Set at HELLO, on a REFRESH and when a
	// reload resolves the connection again (conn.setPrincipal); presence
	// reports them. clientInfo is immutable: replaced, never changed.
	clientID   string
	clientInfo []byte

	// pubs holds the channels c counts as a publisher of and when it last
	// published to each (presence.go, notePublisher); lastPub and
	// lastPubAt the last entry written.
	pubs      map[string]int64
	lastPub   string
	lastPubAt int64

	// watchTok names c in the server's writeWatch (0: never armed);
	// watchArmed: a conn.writable call is due when the socket drains,
	// and until then subscribers of c waiting for it are passed over.
	watchTok   uint32
	watchArmed bool

	// node is set on a node connection, of either direction: its
	// protocol (package cluster), whose bytes the loop carries
	// (nodelink.go); nodeOwn and nodeOwnCap are its pending
	// OwnStart's.
	node       nodelink.NodeConn
	nodeOwn    int
	nodeOwnCap int
	// ws is set on a connection of the WebSocket listener (ws.go).
	ws *wsConn
}

// outbound is the number of bytes waiting to be written to the peer.
func (c *conn) outbound() int { return c.pending + c.gnetOut() }

// gnetOut returns the bytes gnet buffers for c (gnet.Conn.OutboundBuffered).
// Only conn.writev adds to gnet's buffer, and gnet only drains it, so while
// the value last seen (gbuf) is 0 the buffer is empty for sure and gnet is
// not asked: a connection whose socket takes every write costs no call per
// delivery.
func (c *conn) gnetOut() int {
	if c.gbuf > 0 {
		c.gbuf = c.gc.OutboundBuffered()
	}
	return c.gbuf
}

// over reports whether c has more output waiting than the outbound limit
// that applies now (loop.outLimit): past it the slow-consumer policy
// applies to live subscribers and catch-up readers wait.
func (c *conn) over() bool { return c.outbound() > c.l.outLimit() }

// armWritable asks for c.writable once c's socket can take bytes again:
// subscribers over the outbound limit wait for that instead of polling.
func (c *conn) armWritable() {
	if c.watchArmed || c.closed || c.closing {
		return
	}
	c.watchArmed = true
	if !c.l.srv.ww.arm(c) {
		// No readiness watch (another OS, or epoll refused the socket):
		// retry on a timer.
		time.AfterFunc(2*time.Millisecond, func() { c.l.execute(c.writable) })
	}
}

// writable runs on c's loop when its socket drained after armWritable:
// gnet's outbound buffer is pushed into the socket, and the channels of
// c's waiting subscribers deliver again.
func (c *conn) writable() {
	c.watchArmed = false
	c.l.srv.writableWakes.Add(1)
	if c.closed || c.closing {
		return
	}
	_ = c.gc.Flush() // on error gnet closes c
	if !c.closed {
		o := c.gnetOut()
		c.l.outSum += int64(o - c.outSeen)
		c.outSeen = o
		c.l.publishOut()
	}
	for _, s := range c.subs {
		if !c.closed && !s.pending && (s.lagging || s.skipping) {
			s.lc.deliver()
		}
	}
}

// ownStart begins appending own bytes; pass its results to ownEnd.
func (c *conn) ownStart() (start, capBefore int) { return len(c.scratch), cap(c.scratch) }

// ownEnd records scratch[start:] as the next output, merging it with the
// previous own entry when they are adjacent in the same backing array.
func (c *conn) ownEnd(start, capBefore int) {
	end := len(c.scratch)
	if end == start {
		return
	}
	if c.lastOwn && cap(c.scratch) == capBefore && len(c.iov) > 0 {
		c.iov[len(c.iov)-1] = c.scratch[c.ownBegin:end:end]
	} else {
		// A new entry; if append moved scratch, earlier entries keep the
		// old array alive until the flush.
		c.iov = append(c.iov, c.scratch[start:end:end])
		c.ownBegin = start
	}
	c.lastOwn = true
	c.pending += end - start
	c.counted(end - start)
	c.markDirty()
}

// shared appends b to the output without copying; b must stay valid and
// unchanged until the next flush.
func (c *conn) shared(b []byte) {
	c.iov = append(c.iov, b)
	c.lastOwn = false
	c.pending += len(b)
	c.counted(len(b))
	c.markDirty()
}

// counted adds n bytes of new output to the loop's outbound sum at once,
// so that the limit under memory pressure (loop.outLimit) sees output
// queued in this iteration, before the flush publishes it.
func (c *conn) counted(n int) {
	c.outSeen += n
	c.l.outSum += int64(n)
}

func (c *conn) markDirty() {
	if !c.dirty {
		c.dirty = true
		c.l.dirty = append(c.l.dirty, c)
	}
}

// flush writes the pending output (conn.writev), usually in one writev,
// and returns what gnet then buffers for c (0 once c is closed).
func (c *conn) flush() (buffered int) {
	if c.ws != nil {
		c.wsFlush()
	} else if len(c.iov) > 0 && !c.closed {
		if c.node != nil {
			// Sealed by the node connection's record layer. On a write
			// error gnet closes the conn (OnClose).
			if err := c.node.Write(c.iov, (*sockWriter)(c)); err != nil {
				_ = c.gc.Close()
			}
		} else {
			c.writev(c.iov)
		}
		c.l.stats.bytesOut += uint64(c.pending)
	}
	clear(c.iov)
	c.iov = c.iov[:0]
	if cap(c.scratch) > 1<<20 {
		c.scratch = nil
	} else {
		c.scratch = c.scratch[:0]
	}
	c.lastOwn = false
	c.pending = 0
	if c.closed {
		return 0
	}
	return c.gnetOut()
}

// writev writes bs to c's socket in order after whatever gnet still
// buffers for c, and returns what gnet buffers afterwards. While gnet's
// outbound buffer is empty the vectors go to the socket directly
// (rawWriter, without the runtime's syscall bookkeeping where the OS
// allows); what the socket does not take, exactly the unwritten rest, is
// handed to gnet's Writev, which buffers it and writes it when the socket
// drains (EPOLLOUT), so later output queues behind it. A write error other
// than a full socket is left to gnet too: its writev meets the error again
// and closes the connection (OnClose), as it always did. bs may be longer
// than IOV_MAX; its elements may be shortened in place.
func (c *conn) writev(bs [][]byte) (buffered int) {
	for len(bs) > 0 && !c.closed {
		k := min(len(bs), maxIov)
		chunk := bs[:k]
		bs = bs[k:]
		if c.gnetOut() == 0 {
			rest, _ := c.l.rw.write(c.gc.Fd(), chunk)
			if len(rest) == 0 {
				continue
			}
			chunk = rest
		}
		_, _ = c.gc.Writev(chunk) // on error gnet closes the conn (OnClose)
		if c.closed {
			return 0
		}
		if c.gbuf = c.gc.OutboundBuffered(); c.gbuf > 0 {
			c.l.stats.writesBuffered++
		}
	}
	if c.closed {
		return 0
	}
	return c.gbuf
}

// sockWriter is how a node connection's record layer writes to c
// (nodelink.Writer): through conn.writev.
type sockWriter conn

func (w *sockWriter) Write(b []byte) (int, error) {
	c := (*conn)(w)
	c.one[0] = b
	c.writev(c.one[:])
	c.one[0] = nil
	return len(b), nil
}

func (w *sockWriter) Writev(bs [][]byte) (int, error) {
	n := 0
	for _, b := range bs {
		n += len(b)
	}
	(*conn)(w).writev(bs)
	return n, nil
}

// sendError queues an ERROR frame. A fatal code also marks the connection
// closing: its input is ignored and it is closed after the output is
// flushed.
func (c *conn) sendError(id uint32, code wire.Code, text string) {
	if c.closing || c.closed {
		return
	}
	if c.ws != nil && !c.ws.up {
		// Still in its upgrade: the answer is HTTP.
		c.l.stats.countError(code)
		c.wsRefuse(wsHTTPStatus(code), text)
		return
	}
	if c.l.run.c == c {
		// Publishes of this connection read before the failed frame take
		// effect first, whatever the error.
		c.l.flushRun()
	}
	if code.Fatal() {
		// Their acks go out first too: nothing may follow a fatal ERROR
		// (PROTOCOL.md 7.1).
		c.flushAcks(c.l.srv.maxBody)
	}
	c.l.stats.countError(code)
	s, k := c.ownStart()
	c.scratch = wire.AppendError(c.scratch, id, wire.Error{Code: code, Retriable: code.Retriable(), Text: text})
	c.ownEnd(s, k)
	if code.Fatal() {
		c.closing = true
		c.l.closeAfterFlush = append(c.l.closeAfterFlush, c)
		if c.ws != nil {
			c.wsClose(wsCloseCode(code), code.String())
		}
	}
}

// sendGap queues a GAP frame for subscription subID.
func (c *conn) sendGap(subID uint32, from, to uint64, r wire.GapReason) {
	if c.closing || c.closed {
		return // nothing follows a fatal ERROR
	}
	c.l.stats.countGap(r)
	s, k := c.ownStart()
	c.scratch = wire.AppendGap(c.scratch, subID, wire.Gap{From: from, To: to, Reason: r})
	c.ownEnd(s, k)
}

// sendData queues a DATA frame for subID whose body is prefix followed by
// the record run; prefix and run are shared, only the header is copied.
// It takes header flags (FlagCompressed: run is one S2 block of nbytes).
func (c *conn) sendDataFlags(subID uint32, flags wire.Flags, prefix []byte, run [][]byte, nbytes int) {
	_, count, _ := wire.DataPrefix(prefix) // made by loop.prefix
	c.l.stats.msgsOut += uint64(count)
	s, k := c.ownStart()
	c.scratch = wire.AppendHeader(c.scratch, wire.TypeData, flags, subID, len(prefix)+nbytes)
	c.ownEnd(s, k)
	c.shared(prefix)
	for _, b := range run {
		c.shared(b)
	}
	if len(c.iov) > maxIov {
		c.flush()
	}
}

// flushAcks encodes the acknowledgements gathered in this iteration into
// as few PUBACK frames as the limits allow.
func (c *conn) flushAcks(maxBody uint32) {
	per := min(wire.MaxAcks, int(maxBody-2)/12)
	for i := 0; i < len(c.acks); i += per {
		s, k := c.ownStart()
		c.scratch = wire.AppendPubAck(c.scratch, c.acks[i:min(i+per, len(c.acks))])
		c.ownEnd(s, k)
	}
	c.acks = c.acks[:0]
}

// advanceVecs drops the first n bytes of bs: whole vectors, then the front of
// the next one, which is shortened in place.
func advanceVecs(bs [][]byte, n int) [][]byte {
	for len(bs) > 0 && n >= len(bs[0]) {
		n -= len(bs[0])
		bs = bs[1:]
	}
	if n > 0 {
		bs[0] = bs[0][n:]
	}
	return bs
}
