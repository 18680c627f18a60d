package presence

import (
	"math/rand/v2"

	"github.com/sluice-rtm/sluice/wire"
)

// Bounds of the pushes to one peer.
const (
	// maxPush bounds the items of one push, in bytes (a node link takes
	// bodies of at least 3 MiB).
	maxPush = 512 << 10
	// maxOps bounds the joins and leaves waiting for one peer, in bytes:
	// past it (a peer that does not answer for long) they are dropped and
	// the peer gets a snapshot instead, which never exceeds the local
	// state.
	maxOps = 8 << 20
)

// SyncStats count the pushes of a Registry.
type SyncStats struct {
	Sent      int64 // pushes answered by their peer
	Failures  int64 // pushes that got no answer (sent again)
	Overflows int64 // peers whose waiting changes exceeded maxOps (a snapshot replaced them)
	Applied   int64 // pushes received and applied
	Repeats   int64 // pushes received again and ignored
	Snapshots int64 // snapshots received (their first push)
	Resyncs   int64 // pushes received and answered RESYNC
}

// out is what this node pushes to each live peer.
type out struct {
	peers map[string]*peerOut
	inc   uint64 // this registry's incarnation: new at every start
	// seqs keeps the last push number of peers that went, so that a
	// peer that comes back gets higher numbers: a receiver takes a
	// number it saw already for a repeat.
	seqs      map[string]uint64
	syncStats SyncStats
	// outPending: a change was recorded for the peers since the last
	// kick (unlockWaking kicks the senders).
	outPending bool
}

type peerState uint8

const (
	snapPending peerState = iota // a snapshot is due: nothing is recorded meanwhile
	snapSending                  // the snapshot's pushes are being sent; changes are recorded
	live                         // changes are recorded and pushed
)

// peerOut is one peer's outbound state.
type peerOut struct {
	state peerState
	seq   uint64 // the last push's number; never reused within an incarnation
	// names are the channels of the snapshot not yet encoded (captured at
	// its start: channels that appear later are in ops); cur the members
	// of names[0] still to encode, and started that names[0]'s counts
	// went out.
	names   []string
	cur     []key
	started bool
	ops     []byte   // joins and leaves, encoded, in order
	opLens  []uint16 // the length of each item in ops
	counts  map[string]struct{}
	// inflight is the push sent and not answered: sent again until it is.
	inflight []byte
	// peerInc is the incarnation of the peer that applied this node's
	// pushes, as its answers say (0: none applied yet). A snapshot from
	// the peer with another incarnation means that the peer restarted
	// and lost what it was pushed, which it then gets again (Apply).
	peerInc uint64
}

func (r *Registry) initOut() {
	r.peers = make(map[string]*peerOut)
	r.seqs = make(map[string]uint64)
	r.inc = rand.Uint64() | 1
}

// addPeer starts pushing to n: a snapshot first. r.mu is held.
func (r *Registry) addPeer(n string) {
	r.peers[n] = &peerOut{state: snapPending, seq: r.seqs[n]}
	delete(r.seqs, n)
	r.outPending = true
}

// dropPeer stops pushing to n. r.mu is held.
func (r *Registry) dropPeer(n string) {
	if p := r.peers[n]; p != nil {
		r.seqs[n] = p.seq
		delete(r.peers, n)
	}
}

// recordJoin records a local member's join for every peer.
func (r *Registry) recordJoin(c *channel, m *Member) {
	r.recordOp(c, &wire.SyncItem{Kind: wire.SyncJoin, Channel: []byte(c.name), ClientID: []byte(m.ClientID), Conn: m.Conn, Info: m.Info})
}

// recordLeave records a local member's leave for every peer.
func (r *Registry) recordLeave(c *channel, m *Member) {
	r.recordOp(c, &wire.SyncItem{Kind: wire.SyncLeave, Channel: []byte(c.name), ClientID: []byte(m.ClientID), Conn: m.Conn})
}

func (r *Registry) recordOp(c *channel, it *wire.SyncItem) {
	var enc []byte
	for _, p := range r.peers {
		if p.state == snapPending {
			continue // the snapshot will carry it
		}
		if enc == nil {
			enc = wire.AppendSyncItem(nil, it)
		}
		if len(p.ops)+len(enc) > maxOps {
			r.syncStats.Overflows++
			p.reset()
			continue
		}
		p.ops = append(p.ops, enc...)
		p.opLens = append(p.opLens, uint16(len(enc)))
		p.markCounts(c.name)
	}
	r.outPending = true
}

// recordCounts records that c's local counts changed, for every peer.
func (r *Registry) recordCounts(c *channel) {
	for _, p := range r.peers {
		if p.state != snapPending {
			p.markCounts(c.name)
		}
	}
	r.outPending = true
}

func (p *peerOut) markCounts(name string) {
	if p.counts == nil {
		p.counts = make(map[string]struct{})
	}
	p.counts[name] = struct{}{}
}

// reset makes p due for a snapshot, dropping what it recorded.
func (p *peerOut) reset() {
	p.state = snapPending
	p.names, p.cur, p.started = nil, nil, false
	p.ops, p.opLens, p.counts = nil, nil, nil
}

// NextPush returns the body of the next push to peer (a NODE_REQUEST's
// op body, op wire.OpPresenceSync): the unanswered one again, else the
// next part of a snapshot, else the changes recorded since the last
// push; nil when there is nothing to send or peer is not a live peer.
// The push counts as in flight until Done.
func (r *Registry) NextPush(peer string) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.peers[peer]
	if p == nil {
		return nil
	}
	if p.inflight != nil {
		return p.inflight
	}
	var items []byte
	var n uint32
	var flags uint8
	switch p.state {
	case snapPending:
		p.names = make([]string, 0, len(r.chans))
		for name, c := range r.chans {
			if c.local.subs > 0 || c.local.pubs > 0 || len(c.local.members) > 0 {
				p.names = append(p.names, name)
			}
		}
		p.state, flags = snapSending, wire.SyncBegin
		if r.origins[peer] == nil {
			flags |= wire.SyncWant // this node holds nothing from peer
		}
		fallthrough
	case snapSending:
		items, n = r.snapChunk(p)
		if len(p.names) == 0 {
			p.state, flags = live, flags|wire.SyncEnd
		}
	default:
		items, n = r.deltas(p)
		if n == 0 {
			return nil
		}
	}
	p.seq++
	p.inflight = wire.AppendPresenceSync(nil, wire.PresenceSync{Incarnation: r.inc, Seq: p.seq, Flags: flags, Count: n}, items)
	return p.inflight
}

// snapChunk encodes the next part of p's snapshot: the local counts and
// members of the channels in p.names, up to maxPush bytes (a channel
// with more members continues in the next push). r.mu is held.
func (r *Registry) snapChunk(p *peerOut) (items []byte, n uint32) {
	for len(p.names) > 0 && len(items) < maxPush {
		c := r.chans[p.names[0]]
		if c == nil {
			p.names, p.started = p.names[1:], false
			continue
		}
		if !p.started {
			items = wire.AppendSyncItem(items, &wire.SyncItem{Kind: wire.SyncCounts, Channel: []byte(c.name), Counts: c.localCounts()})
			n++
			p.cur = p.cur[:0]
			for k := range c.local.members {
				p.cur = append(p.cur, k)
			}
			p.started = true
		}
		for len(p.cur) > 0 && len(items) < maxPush {
			k := p.cur[0]
			p.cur = p.cur[1:]
			if e := c.local.members[k]; e != nil {
				items = wire.AppendSyncItem(items, &wire.SyncItem{Kind: wire.SyncJoin, Channel: []byte(c.name),
					ClientID: []byte(k.id), Conn: k.conn, Info: e.info})
				n++
			}
		}
		if len(p.cur) == 0 {
			p.names, p.started = p.names[1:], false
		}
	}
	if len(p.names) == 0 {
		p.names, p.cur = nil, nil
	}
	return items, n
}

// deltas encodes the changes recorded for p: joins and leaves in order up
// to maxPush bytes, then, once they are all in, the local counts of the
// channels whose counts changed. r.mu is held.
func (r *Registry) deltas(p *peerOut) (items []byte, n uint32) {
	k, size := 0, 0
	for k < len(p.opLens) && (k == 0 || size+int(p.opLens[k]) <= maxPush) {
		size += int(p.opLens[k])
		k++
	}
	items = append(items, p.ops[:size]...)
	n = uint32(k)
	p.ops = append(p.ops[:0], p.ops[size:]...)
	p.opLens = append(p.opLens[:0], p.opLens[k:]...)
	if len(p.opLens) > 0 {
		return items, n
	}
	if cap(p.ops) > maxPush {
		p.ops, p.opLens = nil, nil
	}
	for name := range p.counts {
		var counts wire.Occupancy
		if c := r.chans[name]; c != nil {
			counts = c.localCounts()
		}
		items = wire.AppendSyncItem(items, &wire.SyncItem{Kind: wire.SyncCounts, Channel: []byte(name), Counts: counts})
		n++
		delete(p.counts, name)
		if len(items) >= maxPush {
			break
		}
	}
	if len(p.counts) == 0 {
		p.counts = nil
	}
	return items, n
}

// localCounts returns this node's counts of c.
func (c *channel) localCounts() wire.Occupancy {
	return wire.Occupancy{Subscribers: c.local.subs, Publishers: c.local.pubs, Members: c.local.nmembers}
}

// Done reports the outcome of the push to peer that NextPush returned:
// err when it got no answer (it is sent again), else the peer's result
// and incarnation; wire.SyncResync makes the next push a snapshot.
func (r *Registry) Done(peer string, result uint8, peerInc uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.peers[peer]
	if p == nil || p.inflight == nil {
		return
	}
	if err != nil {
		r.syncStats.Failures++
		return
	}
	r.syncStats.Sent++
	p.inflight = nil
	if result == wire.SyncResync {
		p.reset()
		return
	}
	p.peerInc = peerInc
}

// Pending reports whether a push to peer is due (in flight, a snapshot,
// or recorded changes).
func (r *Registry) Pending(peer string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.peers[peer]
	return p != nil && (p.inflight != nil || p.state != live || len(p.opLens) > 0 || len(p.counts) > 0)
}
