package cluster

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/cluster/nodelink"
	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// Replication (PROTOCOL.md 9.9, DESIGN.md "Replication"): the orderer of
// a replicated streamlet forwards its records, in order, to each follower
// over its link to it (NODE_REPLICATE), and each follower answers what it
// holds (NODE_REPLICATED); the host makes a record visible once every
// follower holds it (host.Streamlet.Acked). The forwarding is pulled from
// the streamlet's buffer, not pushed per append: a sender is a waker of
// the streamlet, and the link's loop, when it drains the link, sends every
// record written since the last time in a few frames, so batches form by
// themselves, any number are in flight per link, no lock is held across
// the network and no goroutine exists per message or per streamlet.

// senders is the registry of this node's senders, by streamlet id.
type senders struct {
	mu sync.Mutex
	m  map[uint64][]*sender
}

// sender forwards one streamlet this node orders to one follower.
type sender struct {
	c    *Cluster
	s    *host.Streamlet
	node string
	// scheduled coalesces wake-ups until the link's loop pulls; done is
	// set once the sender stopped (for good).
	scheduled, done atomic.Bool
	// acked is what the follower reported holding (its last answer).
	acked atomic.Int64
	// stall watches acked (the heartbeat's goroutine alone); asking is
	// set while a recovery request for it runs (unreachable.go).
	stall  stallClock
	asking atomic.Bool
	// Owned by the loop of lk (Pull and answer run there).
	lk         *nodelink.Link // the link the records went out on
	sent       int            // records sent on lk
	commitSent int            // the commit count last sent
	sealSent   bool           // the SEALED notice went out on lk
	retry      bool           // a retry after a backlog is scheduled
}

// replicateBytes bounds the record bytes of one NODE_REPLICATE, and
// replicateBurst the bytes one pull sends before it yields the loop.
const (
	replicateBytes = 256 << 10
	replicateBurst = 1 << 20
)

// startSenders starts forwarding streamlet s, which this node orders, to
// its followers (host hook, after HostStreamlet).
func (c *Cluster) startSenders(s *host.Streamlet) {
	set := s.Replicas()
	c.snd.mu.Lock()
	if c.snd.m == nil {
		c.snd.m = make(map[uint64][]*sender)
	}
	// Called again when a retried HOST changed the set (host.HostStreamlet):
	// a sender for each follower that has none; those of nodes no longer
	// in the set stop at their next pull.
	list := c.snd.m[s.ID()]
	var added []*sender
	for _, f := range set[1:] {
		if !slices.ContainsFunc(list, func(sd *sender) bool { return sd.node == f }) {
			added = append(added, &sender{c: c, s: s, node: f, commitSent: -1})
		}
	}
	if len(added) > 0 {
		c.snd.m[s.ID()] = append(slices.Clip(list), added...)
	}
	c.snd.mu.Unlock()
	for _, sd := range added {
		s.AddWaker(sd)
	}
}

// sendersOf returns the senders of streamlet id.
func (c *Cluster) sendersOf(id uint64) []*sender {
	c.snd.mu.Lock()
	defer c.snd.mu.Unlock()
	return c.snd.m[id]
}

// Wake schedules a pull (host.Waker: the streamlet was appended to,
// records became visible, it was sealed or freed). Any goroutine, no lock
// held.
func (sd *sender) Wake() {
	if sd.done.Load() || !sd.scheduled.CompareAndSwap(false, true) {
		return
	}
	if lk := sd.c.links.Existing(sd.node); lk != nil && lk.Pull(sd) {
		return
	}
	// No link: dial on the pool (a loop never waits for the network). A
	// follower that cannot be reached is the recovery's business; the
	// heartbeat wakes the sender again (nudgeSenders).
	if !sd.c.Go(func() {
		if lk := sd.c.links.Dial(sd.node); lk == nil || !lk.Pull(sd) {
			sd.scheduled.Store(false)
		}
	}) {
		sd.scheduled.Store(false)
	}
}

// stop ends the sender for good.
func (sd *sender) stop() {
	if sd.done.Swap(true) {
		return
	}
	sd.s.RemoveWaker(sd)
	c := sd.c
	c.snd.mu.Lock()
	list := c.snd.m[sd.s.ID()]
	if i := slices.Index(list, sd); i >= 0 {
		list = slices.Delete(slices.Clone(list), i, i+1)
	}
	if len(list) == 0 {
		delete(c.snd.m, sd.s.ID())
	} else {
		c.snd.m[sd.s.ID()] = list
	}
	c.snd.mu.Unlock()
}

// Dropped: the link ended before the pull ran (nodelink.Puller); the
// next wake tries again.
func (sd *sender) Dropped() { sd.scheduled.Store(false) }

// Pull sends, on lk's loop (nodelink.Puller), the records written since
// the last pull, the commit count when it grew, and the SEALED notice
// once the streamlet is final; the record bytes are shared with the
// write, not copied.
func (sd *sender) Pull(lk *nodelink.Link) {
	sd.scheduled.Store(false)
	if sd.done.Load() {
		return
	}
	s := sd.s
	if !s.Orderer() || !slices.Contains(s.Replicas(), sd.node) {
		sd.stop() // recovery dropped the follower from the set, or a retried HOST changed it
		return
	}
	if sd.lk != lk {
		// A new link: resend from what the follower reported holding
		// (it skips what it has).
		sd.lk, sd.sent, sd.commitSent, sd.sealSent = lk, int(sd.acked.Load()), -1, false
	}
	c := lk.Conn()
	if c.Outbound() > nodelink.OutboundLimit {
		sd.retryLater()
		return
	}
	buf := s.Buf()
	if !buf.Acquire() {
		sd.stop() // freed
		return
	}
	held := false
	for sent := 0; sent < replicateBurst; {
		written := buf.Written()
		commit, final := s.Durable()
		if sd.sent >= written {
			r := wire.NodeReplicate{Streamlet: s.ID(), Epoch: s.Epoch(), Start: uint32(written), Commit: uint32(commit)}
			switch {
			case final && !sd.sealSent:
				r.Flags = wire.ReplicateSealed
				sd.sealSent = true
			case commit > sd.commitSent:
			default:
				r.Streamlet = 0
			}
			if r.Streamlet != 0 {
				sd.commitSent = commit
				b := c.OwnStart()
				b = wire.AppendNodeReplicateHeader(b, r, nil, 0)
				c.OwnEnd(b)
			}
			break
		}
		var iov [][]byte
		var end, nb int
		scr := lk.Scratch()
		iov, end, nb = buf.AppendHeldRun(scr.Iov[:0], sd.sent, written, replicateBytes)
		stamps := scr.Stamps[:0]
		for i := sd.sent; i < end; i++ {
			stamps = append(stamps, buf.HeldStamp(i))
		}
		r := wire.NodeReplicate{Streamlet: s.ID(), Epoch: s.Epoch(), Start: uint32(sd.sent),
			Commit: uint32(min(commit, end)), Count: uint32(end - sd.sent)}
		b := c.OwnStart()
		b = wire.AppendNodeReplicateHeader(b, r, stamps, nb)
		c.OwnEnd(b)
		for _, part := range iov {
			c.Share(part)
		}
		clear(iov)
		scr.Iov, scr.Stamps = iov[:0], stamps[:0]
		held = true
		sd.c.replSent.Add(uint64(end - sd.sent))
		sd.sent, sd.commitSent = end, int(r.Commit)
		sent += nb
	}
	if held {
		c.Hold(buf) // released after the loop's flush
	} else {
		buf.Release()
	}
	if sd.sent < buf.Written() {
		sd.Wake() // the rest at the next drain, after other work
	}
}

// retryLater pulls again shortly: the link's output is backlogged.
func (sd *sender) retryLater() {
	if sd.retry {
		return
	}
	sd.retry = true
	lk := sd.lk
	time.AfterFunc(2*time.Millisecond, func() {
		lk.Conn().Execute(func() {
			sd.retry = false
			sd.Wake()
		})
	})
}

// answered handles the follower's NODE_REPLICATED (on the link's loop).
func (sd *sender) answered(lk *nodelink.Link, r wire.NodeReplicated) {
	s := sd.s
	switch r.Status {
	case wire.NodeOK:
		sd.acked.Store(int64(r.Held))
		if !s.Acked(sd.node, int(r.Held)) {
			sd.stop()
			return
		}
		if _, final := s.Durable(); final && sd.sealSent && int(r.Held) >= s.Buf().Written() {
			sd.stop() // the follower holds everything and knows it ended
		}
	case wire.NodeOrder:
		// The follower holds less than was sent (it lost a frame to a
		// reconnect, or restarted the stream): resend from there.
		sd.acked.Store(int64(r.Held))
		if sd.lk == lk {
			sd.sent, sd.commitSent = int(r.Held), -1
		}
		sd.Wake()
	default:
		// Fenced (recovery runs), unknown or stale at the follower: no
		// more to send it.
		sd.stop()
	}
}

// replicated dispatches a NODE_REPLICATED from node to its sender.
func (c *Cluster) replicated(lk *nodelink.Link, r wire.NodeReplicated) {
	for _, sd := range c.sendersOf(r.Streamlet) {
		if sd.node == lk.Node() {
			sd.answered(lk, r)
		}
	}
}

// nudgeSenders wakes the senders that wait for a follower (heartbeat): a
// pull that found no link is tried again, on a new link if one is made;
// a follower that acknowledged nothing for stallAfter gets the streamlet
// recovered without it (watchStall, unreachable.go). paused: the
// heartbeat itself ran late.
func (c *Cluster) nudgeSenders(now int64, paused bool) {
	c.snd.mu.Lock()
	var all []*sender
	for _, list := range c.snd.m {
		all = append(all, list...)
	}
	c.snd.mu.Unlock()
	for _, sd := range all {
		if !sd.done.Load() && (int(sd.acked.Load()) < sd.s.Buf().Written() || !sd.s.Buf().Sealed()) {
			sd.Wake()
			sd.watchStall(now, paused)
		}
	}
}

// Replicate handles a NODE_REPLICATE from the streamlet's orderer on an
// inbound connection (the follower's side): the records are appended in
// order after what the follower holds, the commit count makes them
// visible, and the answer says what the follower holds. A bare commit
// notice is not answered unless it is refused (nodelink.InboundHandler).
func (a *peerConn) Replicate(r wire.NodeReplicate, stamps, run []byte) {
	res := wire.NodeReplicated{Streamlet: r.Streamlet}
	s := a.cl.host.Streamlet(r.Streamlet)
	if s == nil {
		res.Status = wire.NodeUnknown
	} else {
		payloads, exts := a.payloads[:0], a.exts[:0]
		for p, ext, rest, ok := wire.NextRecordExt(run); ok; p, ext, rest, ok = wire.NextRecordExt(rest) {
			payloads = append(payloads, p)
			exts = append(exts, ext)
		}
		held, err := s.Replicate(a.in.Peer(), r.Epoch, int(r.Start), int(r.Count), int(r.Commit), r.Flags&wire.ReplicateSealed != 0,
			func(i int) ([]byte, bool, int64) { return payloads[i], exts[i], wire.FeedStamp(stamps, i) })
		clear(payloads)
		a.payloads, a.exts = payloads[:0], exts[:0]
		res.Held = uint32(held)
		switch {
		case err == nil:
		case errors.Is(err, host.ErrFenced):
			res.Status = wire.NodeFenced
		case errors.Is(err, host.ErrOutOfOrder):
			res.Status = wire.NodeOrder
		case errors.Is(err, host.ErrEpoch):
			res.Status = wire.NodeStale
		default:
			res.Status = wire.NodeFailed
		}
		a.cl.replHeld.Add(uint64(r.Count))
	}
	if res.Status == wire.NodeOK && r.Count == 0 && r.Flags&wire.ReplicateSealed == 0 {
		return
	}
	b := a.c.OwnStart()
	b = wire.AppendNodeReplicated(b, res)
	a.c.OwnEnd(b)
}

var _ host.Waker = (*sender)(nil)

// fence and sealAt are the FENCE and SEAL_AT ops of a remote host.
func (h remoteHost) Fence(id uint64) (role.Tail, error) {
	var e wire.NodeEnc
	e.U64(id)
	b, err := h.c.call(h.node, wire.OpFence, e.B)
	if err != nil {
		return role.Tail{}, err
	}
	return decTail(b)
}

func (h remoteHost) SealAt(id uint64, n uint32, keep []string) error {
	var e wire.NodeEnc
	e.U64(id)
	e.U32(n)
	encKeep(&e, keep)
	_, err := h.c.call(h.node, wire.OpSealAt, e.B)
	return err
}
