package engine

import (
	"math"
	"sync"

	"github.com/sluice-rtm/sluice/ringbuf"
	"github.com/sluice-rtm/sluice/wire"
)

// mirrorState marks a streamlet as a gateway's copy of one hosted by a
// peer node: the one read stream per channel portion per gateway node that
// all of the node's local subscribers share. The copy is written only by
// the link's reader goroutine (NODE_FEED) and read by the loops like a
// hosted streamlet.
type mirrorState struct {
	host string
}

// mirrorSet is a node's copies of remote streamlets, by streamlet id.
// Safe for concurrent use; mu is never held across I/O or a streamlet's
// lock.
type mirrorSet struct {
	srv *Server
	mu  sync.Mutex
	m   map[uint64]*streamlet
}

func newMirrorSet(srv *Server) *mirrorSet {
	return &mirrorSet{srv: srv, m: make(map[uint64]*streamlet)}
}

// get returns the copy of ref (a streamlet of channel on a peer), creating
// it and asking the host to feed it from its first record.
func (ms *mirrorSet) get(channel string, ref StreamletRef) *streamlet {
	ms.mu.Lock()
	s := ms.m[ref.ID]
	if s != nil || ref.Lost {
		ms.mu.Unlock()
		return s
	}
	lim := ms.srv.opts.limitsFor(channel)
	s = &streamlet{id: ref.ID, channel: channel, first: ref.First, leaseEnd: math.MaxInt64,
		buf: ringbuf.New(lim.msgs, lim.size), limitMsgs: lim.msgs, mirror: &mirrorState{host: ref.Host}}
	s.buf.Account(&ms.srv.host.retained)
	ms.m[ref.ID] = s
	ms.mu.Unlock()
	// Ask the host to feed the copy, off the caller's loop (dialing may
	// take a while).
	go func() {
		var l *link
		if cl := ms.srv.cl; cl != nil {
			l = cl.link(ref.Host)
		}
		if l == nil || l.send(wire.AppendNodeRead(nil, ref.ID, 0)) != nil {
			ms.end(s) // the host is unreachable: what the copy lacks is lost
		}
	}()
	return s
}

// existing returns the copy of streamlet id if this node has one.
func (ms *mirrorSet) existing(id uint64) *streamlet {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.m[id]
}

// feed applies a NODE_FEED (on the link's reader goroutine): records are
// appended with their original stamps, a sealed or gone feed ends the
// copy, and the channel's reader loops are woken.
func (ms *mirrorSet) feed(f wire.NodeFeed, stamps, run []byte) {
	s := ms.existing(f.Streamlet)
	if s == nil || s.mirror == nil {
		return // dropped meanwhile
	}
	s.mu.Lock()
	n := s.buf.Len()
	idx := int(f.Start)
	for i := 0; i < int(f.Count); i++ {
		var p []byte
		p, run, _ = wire.NextRecord(run) // validated by DecodeNodeFeed
		if idx+i < n || s.buf.Sealed() {
			continue // already held (a re-read after a reconnect)
		}
		if idx+i > s.buf.Len() {
			break // a hole: cannot happen on one ordered link
		}
		if _, err := s.buf.Append(p, wire.FeedStamp(stamps, i)); err != nil {
			s.sealLocked()
		}
	}
	if f.Flags&(wire.FeedSealed|wire.FeedGone) != 0 {
		s.sealLocked()
	}
	s.mu.Unlock()
	ms.srv.gw.wake(s.channel)
}

// end seals a copy whose feed cannot continue and wakes its readers.
func (ms *mirrorSet) end(s *streamlet) {
	s.mu.Lock()
	s.sealLocked()
	s.mu.Unlock()
	ms.srv.gw.changed(s.channel)
}

// hostDown ends every copy fed by node: readers read what arrived, and the
// channel's manager reports the rest as lost.
func (ms *mirrorSet) hostDown(node string) {
	ms.mu.Lock()
	var ended []*streamlet
	for _, s := range ms.m {
		if s.mirror.host == node {
			ended = append(ended, s)
		}
	}
	ms.mu.Unlock()
	for _, s := range ended {
		ms.end(s)
	}
}

// sweep drops copies that no loop needs: those of channels without a
// local view, and ended ones older than the channel's TTL.
func (ms *mirrorSet) sweep(now int64) {
	ms.mu.Lock()
	var drop []*streamlet
	for id, s := range ms.m {
		at := s.sealedAt.Load() // when the feed ended (or the copy filled up)
		expired := at != 0 && now-at > int64(ms.srv.opts.limitsFor(s.channel).ttl)
		if expired || !ms.srv.gw.has(s.channel) {
			delete(ms.m, id)
			drop = append(drop, s)
		}
	}
	ms.mu.Unlock()
	for _, s := range drop {
		s.mu.Lock()
		sealed := s.buf.Sealed()
		s.buf.Seal()
		s.buf.Free()
		s.mu.Unlock()
		if !sealed && ms.srv.cl != nil {
			if l := ms.srv.cl.existingLink(s.mirror.host); l != nil {
				_ = l.send(wire.AppendNodeUnread(nil, s.id))
			}
		}
	}
}

// count reports the copies held (tests).
func (ms *mirrorSet) count() int {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return len(ms.m)
}
