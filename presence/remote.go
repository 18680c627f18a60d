package presence

import (
	"errors"

	"github.com/sluice-rtm/sluice/wire"
)

// remote is the Registry's picture of the other nodes: one origin per
// live node that pushed to this one.
type remote struct {
	origins map[string]*origin
	alive   map[string]bool // the live members, self excluded (Peers)
}

// origin is what one other node pushed: its incarnation, the next push
// number expected, and its part of each channel.
type origin struct {
	name   string
	inc    uint64
	expect uint64
	gen    uint32 // the current snapshot's generation
	snap   bool   // a snapshot is being received (BEGIN came, END not yet)
	parts  map[string]*part
}

func (r *Registry) initRemote() {
	r.origins = make(map[string]*origin)
	r.alive = make(map[string]bool)
}

// ErrNotMember: a push came from a node that is not a live member in
// this node's view (yet, or any more); the sender tries again later.
var ErrNotMember = errors.New("presence: push from a node that is not a live member here")

// Apply applies one push of peer and returns the result to answer:
// wire.SyncApplied, or wire.SyncResync when the push does not continue
// what this node holds from peer (a push was missed, or either node
// restarted), so that peer sends a snapshot. A repeat of a push already
// applied is answered SyncApplied and ignored.
func (r *Registry) Apply(peer string, p wire.PresenceSync, items []wire.SyncItem) (uint8, error) {
	r.mu.Lock()
	if !r.alive[peer] {
		r.mu.Unlock()
		return 0, ErrNotMember
	}
	o := r.origins[peer]
	switch {
	case o != nil && o.inc == p.Incarnation && p.Seq < o.expect:
		r.syncStats.Repeats++
		r.mu.Unlock()
		return wire.SyncApplied, nil
	case p.Flags&wire.SyncBegin != 0:
		if o == nil {
			o = &origin{name: peer, parts: make(map[string]*part)}
			r.origins[peer] = o
		}
		if po := r.peers[peer]; po != nil && po.peerInc != 0 && (po.peerInc != p.Incarnation || p.Flags&wire.SyncWant != 0) {
			// peer restarted, or dropped this node as dead: it lost
			// what this node pushed to it.
			po.reset()
			po.peerInc = 0
			r.outPending = true
		}
		o.inc, o.expect, o.snap = p.Incarnation, p.Seq, true
		o.gen++
		for _, pt := range o.parts {
			pt.dropped = 0 // the snapshot counts its own
		}
		r.syncStats.Snapshots++
	case o == nil || o.inc != p.Incarnation || p.Seq != o.expect:
		r.syncStats.Resyncs++
		r.mu.Unlock()
		return wire.SyncResync, nil
	}
	o.expect++
	for i := range items {
		r.applyItem(o, &items[i])
	}
	if p.Flags&wire.SyncEnd != 0 && o.snap {
		r.endSnapshot(o)
	}
	r.syncStats.Applied++
	r.unlockWaking()
	return wire.SyncApplied, nil
}

// applyItem applies one item of o's push. r.mu is held.
func (r *Registry) applyItem(o *origin, it *wire.SyncItem) {
	name := string(it.Channel)
	c := r.chanFor(name)
	pt := c.remote[o.name]
	if pt == nil {
		if it.Kind == wire.SyncLeave {
			r.release(c)
			return
		}
		pt = &part{}
		if c.remote == nil {
			c.remote = make(map[string]*part)
		}
		c.remote[o.name] = pt
		r.parts++
		o.parts[name] = pt
	}
	switch it.Kind {
	case wire.SyncCounts:
		ds := int(it.Counts.Subscribers) - int(pt.subs)
		dp := int(it.Counts.Publishers) - int(pt.pubs)
		dm := int(it.Counts.Members) - int(pt.nmembers)
		pt.subs, pt.pubs, pt.nmembers, pt.gen = it.Counts.Subscribers, it.Counts.Publishers, it.Counts.Members, o.gen
		r.changed(c, ds, dp, dm, 0, nil)
	case wire.SyncJoin:
		r.remoteJoin(o, c, pt, it)
	case wire.SyncLeave:
		k := key{it.Conn, string(it.ClientID)}
		if e := pt.members[k]; e != nil {
			r.removeRemote(o, c, pt, k, e)
		} else if pt.dropped > 0 {
			pt.dropped--
		}
	}
	r.forgetPart(o, c, pt)
}

// remoteJoin stores a member o reports, or counts it as dropped when a
// limit is reached. A member already held only takes the new info.
func (r *Registry) remoteJoin(o *origin, c *channel, pt *part, it *wire.SyncItem) {
	k := key{it.Conn, string(it.ClientID)}
	if e := pt.members[k]; e != nil {
		e.gen = o.gen
		if string(e.info) != string(it.Info) {
			r.bytes += int64(len(it.Info)) - int64(len(e.info))
			e.info = append([]byte(nil), it.Info...)
		}
		return
	}
	cost := EntryCost(k.id, it.Info)
	if c.stored >= r.lim.MaxMembers || r.bytes+cost > r.lim.MaxBytes {
		pt.dropped++
		r.stats.Dropped++
		return
	}
	if pt.members == nil {
		pt.members = make(map[key]*entry)
	}
	e := &entry{info: append([]byte(nil), it.Info...), gen: o.gen}
	pt.members[k] = e
	r.account(c, cost, 1)
	m := Member{ClientID: k.id, Node: o.name, Conn: k.conn, Info: e.info}
	r.changed(c, 0, 0, 0, Join, &m)
}

// removeRemote forgets a member of o; its leave goes to the watchers.
func (r *Registry) removeRemote(o *origin, c *channel, pt *part, k key, e *entry) {
	delete(pt.members, k)
	r.account(c, -EntryCost(k.id, e.info), -1)
	m := Member{ClientID: k.id, Node: o.name, Conn: k.conn, Info: e.info}
	r.changed(c, 0, 0, 0, Leave, &m)
}

// forgetPart drops pt when it holds nothing (no counts, no members), and
// c when nothing refers to it.
func (r *Registry) forgetPart(o *origin, c *channel, pt *part) {
	if pt.subs != 0 || pt.pubs != 0 || pt.nmembers != 0 || len(pt.members) != 0 || pt.dropped != 0 {
		return
	}
	delete(c.remote, o.name)
	r.parts--
	if len(c.remote) == 0 {
		c.remote = nil
	}
	delete(o.parts, c.name)
	r.release(c)
}

// endSnapshot completes o's snapshot: members and counts that it did not
// report (an older generation) are gone.
func (r *Registry) endSnapshot(o *origin) {
	o.snap = false
	for name, pt := range o.parts {
		c := r.chans[name]
		for k, e := range pt.members {
			if e.gen != o.gen {
				r.removeRemote(o, c, pt, k, e)
			}
		}
		if pt.gen != o.gen {
			ds, dp, dm := -int(pt.subs), -int(pt.pubs), -int(pt.nmembers)
			pt.subs, pt.pubs, pt.nmembers = 0, 0, 0
			r.changed(c, ds, dp, dm, 0, nil)
		}
		r.forgetPart(o, c, pt)
	}
}

// dropOrigin forgets everything o pushed: its members leave, its counts
// go. r.mu is held.
func (r *Registry) dropOrigin(o *origin) {
	for name, pt := range o.parts {
		c := r.chans[name]
		for k, e := range pt.members {
			r.removeRemote(o, c, pt, k, e)
		}
		ds, dp, dm := -int(pt.subs), -int(pt.pubs), -int(pt.nmembers)
		pt.subs, pt.pubs, pt.nmembers, pt.dropped = 0, 0, 0, 0
		r.changed(c, ds, dp, dm, 0, nil)
		r.forgetPart(o, c, pt)
	}
	delete(r.origins, o.name)
}

// Peers sets the live members of the cluster (self included or not):
// every other node's part of the picture is dropped when it is not among
// them (its members leave at once), and the pushes to nodes that are not
// live stop. It returns the live peers that are new, which get a
// snapshot, and the ones that went.
func (r *Registry) Peers(alive []string) (added, gone []string) {
	r.mu.Lock()
	now := make(map[string]bool, len(alive))
	for _, n := range alive {
		if n != r.self {
			now[n] = true
		}
	}
	for n := range r.alive {
		if !now[n] {
			gone = append(gone, n)
			if o := r.origins[n]; o != nil {
				r.dropOrigin(o)
			}
			r.dropPeer(n)
		}
	}
	for n := range now {
		if !r.alive[n] {
			added = append(added, n)
			r.addPeer(n)
		}
	}
	r.alive = now
	r.unlockWaking()
	return added, gone
}
