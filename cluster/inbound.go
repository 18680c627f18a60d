package cluster

import (
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/cluster/nodelink"
	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/wire"
)

// The data plane of an inbound node connection (the transport, handshake
// included, is package cluster/nodelink's): a peer node's NODE_APPEND (a
// batch for a streamlet hosted here, appended on the connection's loop,
// answered once durable: ackwait.go), NODE_READ / NODE_UNREAD (feeds of
// hosted streamlets to the peer's copies) and NODE_REPLICATE (records of
// a streamlet this node follows: replicate.go).

// peerFeedBytes bounds the record bytes of one NODE_FEED.
const peerFeedBytes = 256 << 10

// s2Min is the smallest record run a feed compresses (Options.S2).
const s2Min = wire.DefaultS2Threshold

// Conn is an event loop's side of an inbound node connection as the data
// plane uses it (package engine): the transport's, and the append of a
// peer's batch to a hosted streamlet. Its methods run on the connection's
// loop and must not block.
type Conn interface {
	nodelink.Conn
	// AppendBatch appends payloads (exts[k]: payloads[k] is an extended
	// record body) to the hosted streamlet s, as the gateway's own
	// publishes are, with this loop's time: pos and dup receive each
	// appended record's position and whether it was a duplicate
	// (idempotent publish). It returns how many were appended (fewer when
	// s closed), counts them and wakes the channel's local readers.
	AppendBatch(s *host.Streamlet, payloads [][]byte, exts []bool, pos []uint64, dup []bool) int
}

// Accept returns the connection carried by c, whose first frame (not yet
// consumed) is NODE_HELLO: package engine hands such a connection over
// and from then on carries its bytes (NodeConn). Call it on c's loop.
func (cl *Cluster) Accept(c Conn) nodelink.NodeConn {
	return cl.links.Accept(c, func(in nodelink.Inbound) nodelink.InboundHandler {
		return &peerConn{cl: cl, in: in, c: c, feeds: make(map[uint64]*feed)}
	})
}

// peerConn is the data plane of one welcomed inbound connection. It is
// owned by the loop that carries it: every field is used only there
// (feeds' and waits' scheduled flags reach it through Conn.Execute).
type peerConn struct {
	cl *Cluster
	in nodelink.Inbound
	c  Conn

	feeds map[uint64]*feed // streamlets this peer reads, by id
	// waits holds, per replicated streamlet, the NODE_APPENDED answers
	// that wait until every replica holds their records (ackwait.go).
	waits map[uint64]*appendWait

	// Scratch reused by every batch.
	payloads [][]byte
	exts     []bool
	pos      []uint64
	dup      []bool
	iov      [][]byte // a feed's record run
	stamps   []int64
	zin      []byte
}

// done reports whether nothing more is to be written to the peer.
func (a *peerConn) done() bool { return a.in.Done() }

// Append appends a peer gateway's batch to a hosted streamlet and answers
// with how many records were appended and the first position
// (nodelink.InboundHandler).
func (a *peerConn) Append(id uint32, na wire.NodeAppend, run []byte) {
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

// Read starts feeding streamlet id to the peer from record from
// (nodelink.InboundHandler).
func (a *peerConn) Read(id uint64, from uint32) {
	if old := a.feeds[id]; old != nil {
		old.stop()
	}
	s := a.cl.host.Streamlet(id)
	if s == nil {
		a.feedNotice(id, from, wire.FeedGone)
		return
	}
	f := &feed{a: a, s: s, next: int(from)}
	a.feeds[id] = f
	s.AddWaker(f)
	f.run()
}

// Unread stops the feed of streamlet id (nodelink.InboundHandler).
func (a *peerConn) Unread(id uint64) {
	if f := a.feeds[id]; f != nil {
		f.stop()
	}
}

// Closed stops the feeds, and the answers waiting for replicas
// (nodelink.InboundHandler).
func (a *peerConn) Closed() {
	for _, f := range a.feeds {
		f.stop()
	}
	for _, w := range a.waits {
		w.s.RemoveWaker(w)
	}
	a.waits = nil
}

func (a *peerConn) feedNotice(id uint64, start uint32, flags uint8) {
	b := a.c.OwnStart()
	b = wire.AppendNodeFeedHeader(b, wire.NodeFeed{Streamlet: id, Start: start, Flags: flags}, nil, 0)
	a.c.OwnEnd(b)
}

// feed streams one hosted streamlet to one peer's copy. It is owned by
// the peer connection's loop; scheduled is set by whichever goroutine
// changed the streamlet (Wake).
type feed struct {
	a         *peerConn
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
	for !f.done && !a.done() {
		if c.Outbound() > nodelink.OutboundLimit {
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
		c.Hold(buf)
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
func (a *peerConn) appendFeedS2(b []byte, f wire.NodeFeed, stamps []int64, nb int) ([]byte, bool) {
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
