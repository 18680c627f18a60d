package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/sluice-rtm/sluice/cluster/nodelink"
	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/internal/mapshrink"
	"github.com/sluice-rtm/sluice/ringbuf"
	"github.com/sluice-rtm/sluice/wire"
	"github.com/sluice-rtm/sluice/ws"
)

// loop is Sluice's state for one gnet event loop. Every field is owned by
// that loop's goroutine: it is touched only from gnet callbacks of the
// loop's connections and from tasks run with el.Execute.
type loop struct {
	idx int
	el  gnet.EventLoop
	srv *Server

	now  int64 // unix ns, read once per iteration
	busy bool  // inside a callback or task: closes are deferred to reap
	// outbound is the bytes waiting to be written to this loop's
	// connections: outSum (loop-owned) kept by every flush (each written
	// connection's change since it was last counted, conn.outSeen) and
	// summed exactly by each sweep, published for other goroutines: the
	// retention budget (Server.outbound) and the outbound limit under
	// memory pressure (Server.outLimit).
	outbound atomic.Int64
	outSum   int64
	outPub   int64 // outSum as last added to Server.outTotal
	conns    map[*conn]struct{}
	chans    map[string]*loopChan // this loop's view of channels it uses
	chansPk  mapshrink.Peak       // chans' peak: sweep gives its memory back
	// unread holds the views of chans that no subscription on this loop
	// reads (nsubs == 0), the only ones sweep may forget, so that a sweep
	// of a loop whose channels all have subscribers visits none of them.
	unread   map[*loopChan]struct{}
	unreadPk mapshrink.Peak

	touched []*loopChan // channels published to in this iteration
	// wakes[i] are other loops' views (of loop index i) to wake when this
	// iteration ends, each already marked scheduled (gwChan.notify).
	wakes           [][]*loopChan
	dirty           []*conn // connections with pending output
	ackers          []*conn // connections with pending acks
	held            []*ringbuf.Buffer
	shared          []byte // DATA prefixes referenced by pending output
	iov             [][]byte
	closeAfterFlush []*conn
	reap            []*conn

	stats loopStats // counters for metrics (metrics.go)

	// lastChan is the channel the previous PUBLISH went to: consecutive
	// publishes to one channel skip the map lookup. Cleared when sweep
	// forgets channel views.
	lastChan *loopChan
	// countPubs: a console collected recently, so publishes are counted
	// per channel view (console.go); set by sweep and by a collection.
	countPubs bool

	// run holds consecutive PUBLISH frames of one connection to one
	// channel, read in the same OnTraffic call, not yet appended: they are
	// appended under one streamlet lock (flushRun) before any other frame
	// is acted on and before gnet's buffer, which the payloads alias, is
	// discarded.
	run pubRun

	// remoteBytes counts the publish bytes this loop holds for peer
	// hosts (remotewrite.go), bounded by maxLoopPend.
	remoteBytes int

	// durs holds the acks waiting for the replicas of replicated
	// streamlets this node orders (durable.go); releasing lists the waits
	// that got acks in this iteration.
	durs      map[*host.Streamlet]*durWait
	releasing []*durWait

	// inflated holds the decompressed bodies of the run's compressed
	// publishes until flushRun (msgext.go); zin and zrun are scratch of
	// compressed output.
	inflated []byte
	zin      []byte
	db       dataBatch // the batch being delivered (msgdata.go)
	ps       presenceScratch
	fmatch   []bool    // filter results of the batch being delivered (filter.go)
	rw       rawWriter // writes the connections' output (conn.writev)
}

// maxRun bounds a run of publishes, and so how long one loop holds a
// streamlet's writer lock that other loops may be waiting for.
const maxRun = 256

// pubRun is a batch of publishes waiting for flushRun.
type pubRun struct {
	c        *conn
	lc       *loopChan
	payloads [][]byte
	ext      []bool // payloads[k] is an extended record body (FlagExt)
	ids      []uint32
	acked    []bool
	pos      []uint64
}

func newLoop(idx int, el gnet.EventLoop, srv *Server) *loop {
	l := &loop{idx: idx, el: el, srv: srv, conns: make(map[*conn]struct{}), chans: make(map[string]*loopChan),
		unread: make(map[*loopChan]struct{})}
	// A loop created while a console polls counts from its start.
	l.countPubs = srv.clock().UnixNano()-srv.consoleLast.Load() < int64(consoleWindow)
	return l
}

// begin starts a loop iteration (a callback or a task).
func (l *loop) begin() {
	l.busy = true
	l.now = l.srv.clock().UnixNano()
}

// end finishes an iteration: acks are encoded, readers of the channels
// published to are woken (this loop's inline, other loops by a task),
// every dirty connection is written with one writev, and connections
// closed meanwhile are cleaned up.
func (l *loop) end() {
	l.releaseDurable()
	for _, c := range l.ackers {
		c.flushAcks(l.srv.maxBody)
	}
	clear(l.ackers)
	l.ackers = l.ackers[:0]
	for i := 0; i < len(l.touched); i++ { // local delivery may touch more
		lc := l.touched[i]
		lc.touched = false
		lc.gc.notify(l)
	}
	clear(l.touched)
	l.touched = l.touched[:0]
	l.postWakes()
	// A live batch is skipped only once the limit is exceeded, so a
	// subscriber may legitimately reach limit + one batch: the hard limit
	// leaves room for that.
	hard := 2*l.srv.opts.OutboundLimit + maxBatch + 64
	for _, c := range l.dirty {
		if c.node != nil {
			if !c.closing && c.outbound() > nodelink.LinkBacklog {
				c.node.Stalled(c.outbound())
			}
			continue
		}
		if !c.closing && c.outbound() > hard {
			// The peer does not read (e.g. a publisher ignoring its acks):
			// bound its memory by closing it.
			c.sendError(0, wire.CodeSlowConsumer,
				fmt.Sprintf("more than %d bytes pending to a connection that does not read", hard))
		}
	}
	l.flush()
	for _, c := range l.closeAfterFlush {
		if !c.closed {
			l.closeGracefully(c)
		}
	}
	clear(l.closeAfterFlush)
	l.closeAfterFlush = l.closeAfterFlush[:0]
	for _, c := range l.reap {
		l.cleanup(c)
	}
	clear(l.reap)
	l.reap = l.reap[:0]
	l.postWakes() // any queued after the first post
	l.busy = false
}

// wakeLater queues lc, a view of another loop, for this iteration's
// wake-up task to its loop (postWakes), unless a wake is pending already.
func (l *loop) wakeLater(lc *loopChan) {
	if !lc.scheduled.CompareAndSwap(false, true) {
		return
	}
	i := lc.l.idx
	for len(l.wakes) <= i {
		l.wakes = append(l.wakes, nil)
	}
	l.wakes[i] = append(l.wakes[i], lc)
}

// postWakes posts one task per loop with views queued by wakeLater; the
// task owns its list.
func (l *loop) postWakes() {
	for i, batch := range l.wakes {
		if len(batch) == 0 {
			continue
		}
		l.wakes[i] = nil
		l.stats.wakeTasks++
		batch[0].l.execute(func() {
			for _, lc := range batch {
				lc.run()
			}
		})
	}
}

// flush writes every dirty connection and then drops the streamlet
// references and shared prefixes that the output referenced.
func (l *loop) flush() {
	for _, c := range l.dirty {
		c.dirty = false
		if o := c.flush(); !c.closed {
			l.outSum += int64(o - c.outSeen)
			c.outSeen = o
		}
	}
	l.publishOut()
	clear(l.dirty)
	l.dirty = l.dirty[:0]
	for _, b := range l.held {
		b.Release()
	}
	clear(l.held)
	l.held = l.held[:0]
	l.shared = l.shared[:0]
	if len(l.run.payloads) == 0 {
		l.inflated = l.inflated[:0] // no publish refers to it any more
	}
}

// task adapts a function to gnet.Runnable, wrapping it in begin/end.
type task struct {
	l  *loop
	fn func()
}

func (t task) Run(context.Context) error {
	t.l.begin()
	t.fn()
	t.l.end()
	return nil
}

// execute runs fn on the loop's goroutine later. It fails only once the
// engine stopped; fn is then dropped, which is logged unless the server is
// shutting down (every loop's state goes with it).
func (l *loop) execute(fn func()) {
	if err := l.el.Execute(context.Background(), task{l, fn}); err != nil && !l.srv.shutting.Load() {
		l.srv.log.Warn("sluice: a task for an event loop was dropped", "loop", l.idx, "err", err)
	}
}

func (l *loop) open(gc gnet.Conn) *conn {
	c := &conn{gc: gc, l: l, opened: l.srv.clock().UnixNano(), subs: make(map[uint32]*sub), id: l.srv.pres.conns.Add(1)}
	gc.SetContext(c)
	l.conns[c] = struct{}{}
	return c
}

// closed is gnet's OnClose for c.
func (l *loop) closed(c *conn) {
	if c.closed {
		return
	}
	c.closed = true
	l.srv.ww.forget(c) // while its descriptor is open
	if l.busy {
		l.reap = append(l.reap, c)
	} else {
		l.cleanup(c)
	}
}

func (l *loop) cleanup(c *conn) {
	if c.node != nil {
		c.node.Closed()
	}
	for _, s := range c.subs {
		if !s.pending {
			s.lc.removeSub(s)
		}
	}
	clear(c.subs)
	l.expirePublishers(c, true)
	delete(l.conns, c)
	l.outSum -= int64(c.outSeen)
	c.outSeen = 0
	l.publishOut()
	l.srv.conns.Add(-1)
	l.srv.forget(c)
}

// traffic is gnet's OnTraffic: decode every complete frame, act on it,
// and leave a partial frame in gnet's buffer. A frame's declared length
// is checked before its bytes are waited for, so at most HeaderLen+maxBody
// bytes of one frame are ever buffered.
func (l *loop) traffic(c *conn) gnet.Action {
	if c.node != nil {
		l.begin()
		l.nodeTraffic(c)
		l.end()
		return gnet.None
	}
	if c.ws != nil {
		return l.wsTraffic(c)
	}
	l.begin()
	c.noteInput(l.now)
	buf, _ := c.gc.Peek(-1)
	off := 0
	if c.sec.addr == addrProxyHeader {
		if off = l.proxyHeader(c, buf); off < 0 {
			l.end() // the rest of a PROXY header (clientaddr.go) comes later
			return gnet.None
		}
	}
	for !c.closing && !c.closed {
		limit := l.srv.maxBody
		if !c.hello {
			// Before the handshake only a HELLO is valid: never buffer
			// more than the smallest body limit for an unidentified peer.
			limit = wire.MinMaxBody
			if l.nodeHello(c, buf[off:]) {
				// A node connection from now on, this frame included.
				l.nodeTraffic(c)
				l.end()
				return gnet.None
			}
		}
		h, body, n, err := wire.Split(buf[off:], limit)
		if err == wire.ErrIncomplete {
			break
		}
		if err != nil {
			code := wire.CodeProtocolError
			if isTooLarge(err) {
				code = wire.CodeFrameTooLarge
			}
			c.sendError(0, code, err.Error()) // malformed: id 0 (PROTOCOL.md 7.1)
			break
		}
		off += n
		l.frame(c, h, body)
	}
	l.flushRun()
	if c.closing {
		off = len(buf)
	}
	l.stats.bytesIn += uint64(off)
	if off > 0 {
		// Never Discard(0): gnet treats n <= 0 as "discard everything",
		// which would drop a partial frame and desynchronise the stream.
		_, _ = c.gc.Discard(off)
	}
	c.notePartial(l.now, len(buf)-off, off > 0)
	l.end()
	return gnet.None
}

// nodeHello reports whether the first frame of c, a connection that has
// not said HELLO (off == 0 in traffic: every frame before HELLO but HELLO
// ends the connection), is NODE_HELLO and the control plane took c as a
// node connection (a cluster node; a single node answers NODE_HELLO like
// any other frame before HELLO). Only the header's type is looked at;
// the frame is the node connection's to read.
func (l *loop) nodeHello(c *conn, buf []byte) bool {
	if len(buf) < wire.HeaderLen || wire.Type(buf[4]) != wire.TypeNodeHello {
		return false
	}
	nc := l.srv.plane.acceptNode((*nodeCarrier)(c))
	if nc == nil {
		return false
	}
	c.node = nc
	c.partialSince = 0
	return true
}

func (l *loop) frame(c *conn, h wire.Header, body []byte) {
	if h.Flags&wire.FlagCompressed != 0 && !l.compressedOK(c, h) {
		// PROTOCOL.md 1.3 and 2.15: only a PUBLISH after FeatureS2 was
		// negotiated, or a node's NODE_APPEND / NODE_FEED.
		c.sendError(0, wire.CodeProtocolError, fmt.Sprintf("%v has flag COMPRESSED, which was not negotiated", h.Type))
		return
	}
	if !c.hello {
		l.hello(c, h, body)
		return
	}
	if h.Type == wire.TypePublish {
		l.publish(c, h, body)
		return
	}
	l.flushRun() // earlier publishes take effect before this frame
	switch h.Type {
	case wire.TypeSubscribe:
		var sb wire.Subscribe
		var filter []byte
		var err error
		switch {
		case h.Flags&wire.FlagFilter == 0:
			sb, err = wire.DecodeSubscribe(body)
		case !c.filters:
			err = fmt.Errorf("SUBSCRIBE has flag FILTER, but FeatureFilters was not negotiated")
		default:
			sb, filter, err = wire.DecodeSubscribeFilter(body)
		}
		if err != nil {
			c.sendError(0, wire.CodeProtocolError, err.Error())
			return
		}
		l.subscribe(c, h.ID, h.Flags, sb, filter)
	case wire.TypeUnsubscribe:
		id, err := wire.DecodeUnsubscribe(body)
		if err != nil {
			c.sendError(0, wire.CodeProtocolError, err.Error())
			return
		}
		l.unsubscribe(c, h.ID, id)
	case wire.TypePing:
		if err := wire.DecodePing(body); err != nil {
			c.sendError(0, wire.CodeProtocolError, err.Error())
			return
		}
		s, k := c.ownStart()
		c.scratch = wire.AppendPong(c.scratch, h.ID)
		c.ownEnd(s, k)
	case wire.TypePong:
		// Nothing to do, but a PONG body is exactly 0 bytes (PROTOCOL.md 2).
		if err := wire.DecodePong(body); err != nil {
			c.sendError(0, wire.CodeProtocolError, err.Error())
		}
	case wire.TypeRefresh:
		if !c.refresh {
			c.sendError(h.ID, wire.CodeUnknownType, "REFRESH without FeatureRefresh")
			return
		}
		tok, err := wire.DecodeRefresh(body)
		if err != nil {
			c.sendError(0, wire.CodeProtocolError, err.Error())
			return
		}
		l.refreshToken(c, h.ID, tok)
	case wire.TypePresence:
		l.presenceQuery(c, h, body)
	case wire.TypeHello:
		c.sendError(h.ID, wire.CodeHelloRequired, "HELLO was already received on this connection")
	default:
		// UNKNOWN_TYPE covers the types the server may not receive too
		// (PROTOCOL.md 7.2).
		if h.Type.Known() {
			c.sendError(h.ID, wire.CodeUnknownType, fmt.Sprintf("%v is not a client frame", h.Type))
		} else {
			c.sendError(h.ID, wire.CodeUnknownType, fmt.Sprintf("unknown frame type 0x%02x", uint8(h.Type)))
		}
	}
}

func (l *loop) hello(c *conn, h wire.Header, body []byte) {
	if h.Type != wire.TypeHello {
		c.sendError(h.ID, wire.CodeHelloRequired, fmt.Sprintf("%v before HELLO", h.Type))
		return
	}
	hello, err := wire.DecodeHello(body)
	if err != nil {
		c.sendError(0, wire.CodeProtocolError, err.Error())
		return
	}
	v, ok := wire.Negotiate(hello.MinVersion, hello.MaxVersion, wire.Version1, wire.Version1)
	if !ok {
		c.sendError(h.ID, wire.CodeUnsupportedVersion,
			fmt.Sprintf("client speaks versions %d..%d, server speaks %d", hello.MinVersion, hello.MaxVersion, wire.Version1))
		return
	}
	if !l.authenticate(c, h.ID, hello.Token) {
		return
	}
	if l.srv.draining.Load() {
		c.sendError(h.ID, wire.CodeShuttingDown, "this node drains: connect to another node")
		return
	}
	if l.srv.plane.refusesClients() {
		c.sendError(h.ID, wire.CodeShuttingDown, "this node is cut off from the majority of its cluster: connect to another node")
		return
	}
	c.hello = true
	s, k := c.ownStart()
	w := l.srv.welcomeNow()
	w.Version = v
	w.Features = hello.Features & serverFeatures
	c.headers = w.Features&wire.FeatureHeaders != 0
	c.s2 = w.Features&wire.FeatureS2 != 0
	c.refresh = w.Features&wire.FeatureRefresh != 0
	c.presence = w.Features&wire.FeaturePresence != 0
	c.filters = w.Features&wire.FeatureFilters != 0
	c.scratch = wire.AppendWelcome(c.scratch, h.ID, w)
	c.ownEnd(s, k)
	if c.refresh {
		l.sendAuthed(c, h.ID)
	}
}

func (l *loop) publish(c *conn, h wire.Header, body []byte) {
	if h.Flags&wire.FlagCompressed != 0 {
		if body = l.inflatePublish(c, body); body == nil {
			return
		}
	}
	name, payload, err := wire.DecodePublish(body)
	if err != nil {
		c.sendError(0, wire.CodeProtocolError, err.Error())
		return
	}
	if len(payload) > l.srv.opts.MaxPayload {
		c.sendError(h.ID, wire.CodePayloadTooLarge,
			fmt.Sprintf("payload of %d bytes exceeds the limit of %d", len(payload), l.srv.opts.MaxPayload))
		return
	}
	ext := h.Flags&wire.FlagExt != 0
	if ext && !l.checkExt(c, h, payload) {
		return
	}
	if !l.allowPublish(c, h.ID, name) {
		return
	}
	lc := l.lastChan
	if lc == nil || lc.name != string(name) {
		lc = l.chans[string(name)]
		if lc == nil {
			if err := wire.ValidChannel(name); err != nil {
				c.sendError(h.ID, wire.CodeInvalidChannel, err.Error())
				return
			}
			lc = l.channel(string(name))
		}
		l.lastChan = lc
	}
	r := &l.run
	if r.lc != lc || r.c != c || len(r.payloads) >= maxRun {
		l.flushRun()
		r.c, r.lc = c, lc
	}
	r.payloads = append(r.payloads, payload)
	r.ext = append(r.ext, ext)
	r.ids = append(r.ids, h.ID)
	r.acked = append(r.acked, h.Flags&wire.FlagAck != 0)
}

// flushRun appends the pending run of publishes (one streamlet lock for
// the whole run while the write grant holds) and queues their acks or
// errors in frame order.
func (l *loop) flushRun() {
	r := &l.run
	n := len(r.payloads)
	if n == 0 || r.c == nil {
		return
	}
	c, lc := r.c, r.lc
	r.c = nil // detached: the sendError calls below must not flush it again
	if cap(r.pos) < n {
		r.pos = make([]uint64, n, max(n, 2*cap(r.pos)))
	}
	pos := r.pos[:n]
	done := 0
	if lc.w == nil && !lc.remoteBusy() {
		// No grant yet: ask for one. A single node's answer is installed
		// inline; in a cluster the publishes queue in the remote path
		// (remotewrite.go) until it is in.
		lc.requestGrant()
	}
	w := lc.w // the streamlet appended to (lc.w is dropped when it closes)
	if lc.w != nil && !lc.remoteBusy() {
		done = lc.w.AppendBatchExt(r.payloads, r.ext, pos, nil, l.now)
		if done < n {
			// The streamlet closed: the rest goes through the grant path.
			lc.wAfter = lc.w.ID()
			lc.w = nil
		}
	}
	remote := false
	for k := 0; k < n; k++ {
		if k >= done {
			// Not appended under the grant at hand: the rest queues, in
			// order, for the next grant (remotewrite.go).
			remote = true
			lc.queueRemote(c, r.ids[k], r.acked[k], r.payloads[k], r.ext[k])
			continue
		}
		l.stats.msgsIn++
		l.stats.payloadIn += uint64(len(r.payloads[k]))
		if l.countPubs {
			lc.pubMsgs++
			lc.pubBytes += uint64(len(r.payloads[k]))
		}
		if r.acked[k] {
			l.ackDurable(w, c, r.ids[k], pos[k])
		}
	}
	if remote {
		lc.pump()
	}
	l.notePublisher(c, lc)
	lc.lastUse = l.now
	if !lc.touched {
		lc.touched = true
		l.touched = append(l.touched, lc)
	}
	clear(r.payloads) // drop references into gnet's buffer and l.inflated
	r.payloads, r.ext, r.ids, r.acked = r.payloads[:0], r.ext[:0], r.ids[:0], r.acked[:0]
	r.c, r.lc = nil, nil
}

// channel returns this loop's view of the channel, creating it.
func (l *loop) channel(name string) *loopChan {
	if lc := l.chans[name]; lc != nil {
		return lc
	}
	lc := &loopChan{l: l, name: name, gc: l.srv.gw.acquire(name), lastUse: l.now}
	l.chans[name] = lc
	l.unread[lc] = struct{}{}
	return lc
}

// outLimit returns the outbound limit that applies to a client connection
// of this loop now: Options.OutboundLimit, or pressureLimit while this
// node's output waiting to be written (the other loops' as of their last
// flush, this loop's up to now) exceeds half of MaxRetained. The budget
// covers history and output together (retentionSweep expires history to
// make room), but output cannot be expired: 50 subscribers that never read
// held 50 x 8 MiB, 400 MiB, under a 64 MiB budget (issue 14). Under
// pressure a live subscriber past the lower limit lags (reads on from
// history as its socket drains, policy lag) or is skipped or disconnected
// as its policy says, and catch-up readers wait, so output stays within
// half the budget plus about pressureLimit and one batch per connection.
func (l *loop) outLimit() int {
	o := &l.srv.opts
	if o.MaxRetained > 0 && o.OutboundLimit > pressureLimit &&
		2*(l.srv.outTotal.Load()+l.outSum-l.outPub) > int64(o.MaxRetained) {
		return pressureLimit
	}
	return o.OutboundLimit
}

// publishOut makes outSum this loop's share of the node's outbound
// bytes (loop.outbound, Server.outTotal).
func (l *loop) publishOut() {
	if d := l.outSum - l.outPub; d != 0 {
		l.outPub = l.outSum
		l.outbound.Store(l.outSum)
		l.srv.outTotal.Add(d)
	}
}

// sweep runs periodically on the loop: it closes connections that did not
// complete the handshake in time and forgets idle channel views.
func (l *loop) sweep() {
	deadline := l.now - int64(l.srv.opts.HandshakeTimeout)
	var out int64
	for c := range l.conns {
		if !c.closed {
			c.outSeen = c.outbound()
			out += int64(c.outSeen)
		}
		if c.halfClosed && !c.closed {
			l.closeGracefully(c)
			continue
		}
		if c.node != nil {
			if !c.closed {
				c.node.Sweep(l.now) // its handshake and timers are its own
			}
			continue
		}
		if !c.hello && !c.closing && c.opened < deadline {
			c.sendError(0, wire.CodeHandshakeTimeout,
				fmt.Sprintf("no HELLO within %v", l.srv.opts.HandshakeTimeout))
		}
		l.checkIdle(c)
		l.checkFrame(c)
		l.checkExpiry(c)
		l.expirePublishers(c, false)
	}
	l.outSum = out
	l.publishOut()
	idle := l.now - int64(time.Second)
	// While a console polls, a view keeps its uncollected publish counts
	// until the next collection (console.go).
	l.countPubs = l.now-l.srv.consoleLast.Load() < int64(consoleWindow)
	if stale := l.srv.plane.staleAfter(); stale > 0 {
		for _, lc := range l.chans {
			lc.checkProgress(l.now, stale)
		}
	}
	l.chansPk.Seen(len(l.chans))
	l.unreadPk.Seen(len(l.unread))
	for lc := range l.unread {
		if lc.nsubs == 0 && lc.pendingSubs == 0 && !lc.touched && !lc.remoteBusy() && !lc.granting &&
			!lc.infoPending && lc.lastUse < idle && (lc.pubMsgs == 0 || !l.countPubs) {
			if l.lastChan == lc {
				l.lastChan = nil
			}
			delete(l.chans, lc.name)
			delete(l.unread, lc)
			l.srv.gw.release(lc.gc)
		}
	}
	l.chans = mapshrink.Shrink(l.chans, &l.chansPk)
	l.unread = mapshrink.Shrink(l.unread, &l.unreadPk)
}

// lingerTime bounds how long a client connection that got a fatal ERROR
// stays half-closed, its input read and dropped, before it is closed.
const lingerTime = 2 * time.Second

// closeGracefully ends c after a fatal ERROR. Closing at once while the
// client is still sending makes the kernel answer with a reset, and the
// client may then see "connection reset" instead of the ERROR. So when
// gnet has written all of c's output, c's write side is shut down (the
// client reads the ERROR, then end of stream) and its input is dropped
// until the client closes or lingerTime passes (sweep calls this again).
// A connection with output still waiting (a slow consumer) is closed at
// once: its ERROR would wait behind that output anyway. So are TLS
// connections and node connections past their handshake.
func (l *loop) closeGracefully(c *conn) {
	switch {
	case c.halfClosed:
		if l.now >= c.lingerEnd {
			_ = l.el.Close(c.gc)
		}
	case (c.node != nil && !c.node.Linger()) || c.sec.tls || c.gc.OutboundBuffered() > 0,
		syscall.Shutdown(c.gc.Fd(), syscall.SHUT_WR) != nil: // (tried only when the above is false)
		_ = l.el.Close(c.gc)
	default:
		c.halfClosed = true
		c.lingerEnd = l.now + int64(lingerTime)
	}
}

// goAway tells every connection that the server is shutting down.
// goAwayCutOff sends every client GOAWAY UNAVAILABLE: the node has known
// no leader of the metadata log for long (a minority side), so its clients
// resume elsewhere.
func (l *loop) goAwayCutOff() {
	for c := range l.conns {
		if c.closing || c.closed || c.node != nil || !c.hello {
			continue
		}
		s, k := c.ownStart()
		c.scratch = wire.AppendGoAway(c.scratch, wire.GoAway{Code: wire.CodeUnavailable,
			Text: "this node is cut off from the majority of its cluster"})
		c.ownEnd(s, k)
	}
}

func (l *loop) goAway() {
	for c := range l.conns {
		if c.closing || c.closed {
			continue
		}
		if c.node != nil {
			c.node.GoAway()
			continue
		}
		s, k := c.ownStart()
		c.scratch = wire.AppendGoAway(c.scratch, wire.GoAway{Code: wire.CodeShuttingDown, Text: "server shutting down"})
		c.ownEnd(s, k)
		if c.ws != nil && c.ws.up {
			c.ws.closeQueued = true // 1001 after the GOAWAY; the engine stops after the drain
			c.ws.post = ws.AppendClose(c.ws.post, ws.CodeGoingAway, "server shutting down")
		}
	}
}
