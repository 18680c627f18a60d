package engine

import (
	"sync"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// mirrorSet is a node's copies of remote streamlets, by streamlet id: the
// one read stream per channel portion per gateway node that all of the
// node's local subscribers share (host.Host.NewCopy). A copy is written
// only by its link's loop (NODE_FEED, feed) and read by the loops like a
// hosted streamlet. Safe for concurrent use; mu is never held across I/O
// or a streamlet's lock.
type mirrorSet struct {
	srv *Server
	mu  sync.Mutex
	m   map[uint64]*host.Streamlet
}

func newMirrorSet(srv *Server) *mirrorSet {
	return &mirrorSet{srv: srv, m: make(map[uint64]*host.Streamlet)}
}

// get returns the copy of ref (a streamlet of channel on a peer), creating
// it and asking the host to feed it from its first record.
func (ms *mirrorSet) get(channel string, ref role.StreamletRef) *host.Streamlet {
	ms.mu.Lock()
	s := ms.m[ref.ID]
	if s != nil || ref.Lost {
		ms.mu.Unlock()
		return s
	}
	s = ms.srv.host.NewCopy(ref.ID, channel, ref.First, ms.srv.opts.limitsFor(channel), ref.Host)
	ms.m[ref.ID] = s
	ms.mu.Unlock()
	// Ask the host to feed the copy, off the caller's loop (dialing may
	// take a while).
	if !ms.srv.cl.Go(func() {
		if err := ms.srv.cl.Read(ref.Host, ref.ID, 0); err != nil {
			ms.srv.log.Debug("sluice: a copy's host cannot feed it", "streamlet", ref.ID, "host", ref.Host, "err", err)
			ms.end(s) // the host is unreachable: what the copy lacks is lost
		}
	}) {
		ms.end(s)
	}
	return s
}

// existing returns the copy of streamlet id if this node has one.
func (ms *mirrorSet) existing(id uint64) *host.Streamlet {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.m[id]
}

// feed applies a NODE_FEED (on the link's loop): records are appended with
// their original stamps, a sealed or gone feed ends the copy, and the
// channel's reader loops are woken.
func (ms *mirrorSet) feed(f wire.NodeFeed, stamps, run []byte) {
	s := ms.existing(f.Streamlet)
	if s == nil {
		return // dropped meanwhile
	}
	s.Fill(int(f.Start), int(f.Count), func(i int) ([]byte, bool, int64) {
		var p []byte
		var ext bool
		p, ext, run, _ = wire.NextRecordExt(run) // validated by DecodeNodeFeed
		return p, ext, wire.FeedStamp(stamps, i)
	}, f.Flags&(wire.FeedSealed|wire.FeedGone) != 0)
	ms.srv.gw.wake(s.Channel())
}

// end seals a copy whose feed cannot continue and wakes its readers.
func (ms *mirrorSet) end(s *host.Streamlet) {
	s.End()
	ms.srv.gw.changed(s.Channel())
}

// hostDown ends every copy fed by node: readers read what arrived, and the
// channel's manager reports the rest as lost.
func (ms *mirrorSet) hostDown(node string) {
	ms.mu.Lock()
	var ended []*host.Streamlet
	for _, s := range ms.m {
		if s.CopyOf() == node {
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
	var drop []*host.Streamlet
	for id, s := range ms.m {
		at := s.SealedAt() // when the feed ended (or the copy filled up)
		expired := at != 0 && now-at > int64(ms.srv.opts.limitsFor(s.Channel()).TTL)
		if expired || !ms.srv.gw.has(s.Channel()) {
			delete(ms.m, id)
			drop = append(drop, s)
		}
	}
	ms.mu.Unlock()
	for _, s := range drop {
		if s.Drop() {
			ms.srv.cl.Unread(s.CopyOf(), s.ID())
		}
	}
}

// footprint returns the bytes held by the copies and appends the sealed
// ones to *cands (the retention budget, retention.go).
func (ms *mirrorSet) footprint(cands *[]host.Retained) int64 {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return host.Footprint(ms.m, cands)
}

// drop frees copy s now, unless it was replaced or dropped meanwhile.
func (ms *mirrorSet) drop(s *host.Streamlet) bool {
	ms.mu.Lock()
	if ms.m[s.ID()] != s {
		ms.mu.Unlock()
		return false
	}
	delete(ms.m, s.ID())
	ms.mu.Unlock()
	s.Drop()
	return true
}
