package engine

import (
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
)

// reopenAfter is how long a broken copy waits before its streamlet is
// read again from the host: readers that reach its end meanwhile wait,
// and are woken when it is time.
const reopenAfter = 250 * time.Millisecond

// copyReopen decides what a reader does with the copy of a streamlet
// that its manager lists as lost or not (lost), broken at brokenAt (0:
// not broken), at now: read it again from its host (reopen), or wait
// for the given time before asking again (wait > 0); neither means the
// copy is used as it is.
func copyReopen(now, brokenAt int64, lost bool) (reopen bool, wait time.Duration) {
	switch {
	case brokenAt == 0 || lost:
		return false, 0 // healthy, or what it lacks is reported lost
	case now-brokenAt >= int64(reopenAfter):
		return true, 0
	}
	return false, time.Duration(brokenAt + int64(reopenAfter) - now)
}

// mirrorSet is a node's copies of remote streamlets, by streamlet id: the
// one read stream per channel portion per gateway node that all of the
// node's local subscribers share (host.Host.NewCopy). A copy is written
// only by its link's loop (NODE_FEED, package cluster, through
// clusterGateway.Copy) and read by the loops like a
// hosted streamlet. Safe for concurrent use; mu is never held across I/O
// or a streamlet's lock.
type mirrorSet struct {
	srv *Server
	mu  sync.Mutex
	m   map[uint64]*host.Streamlet
	// retry marks the copies whose readers are to be woken for a
	// reopening (copyReopen).
	retry map[uint64]bool
}

func newMirrorSet(srv *Server) *mirrorSet {
	return &mirrorSet{srv: srv, m: make(map[uint64]*host.Streamlet), retry: make(map[uint64]bool)}
}

// get returns the copy of ref (a streamlet of channel on a peer), creating
// it and asking the host to feed it from its first record.
//
// A copy whose feed broke (copyReopen) is replaced by a fresh one read
// from the host's first record, unless the manager lists the streamlet as
// lost; until it is time to, the broken copy is returned and the
// channel's readers are woken when it is.
func (ms *mirrorSet) get(channel string, ref role.StreamletRef) *host.Streamlet {
	ms.mu.Lock()
	s := ms.m[ref.ID]
	var old *host.Streamlet
	avoid := ""
	if s != nil && s.BrokenAt() != 0 && len(ref.Replicas) > 1 &&
		readReplica(ref, ms.srv.host.Node(), s.CopyOf(), ms.srv.plane.reachable) != s.CopyOf() {
		// Another replica can feed it: read it from there at once
		// instead of waiting for the one whose feed broke.
		avoid = s.CopyOf()
	}
	if s != nil && avoid == "" {
		reopen, wait := copyReopen(ms.srv.clock().UnixNano(), s.BrokenAt(), ref.Lost)
		if wait > 0 && !ms.retry[ref.ID] {
			ms.retry[ref.ID] = true
			gw, id := ms.srv.gw, ref.ID
			time.AfterFunc(wait, func() {
				ms.mu.Lock()
				delete(ms.retry, id)
				ms.mu.Unlock()
				gw.changed(channel)
			})
		}
		if !reopen {
			ms.mu.Unlock()
			return s
		}
	}
	if s != nil {
		old = s
		delete(ms.m, ref.ID)
	}
	if ref.Lost {
		ms.mu.Unlock()
		return nil
	}
	if old != nil {
		ms.mu.Unlock()
		ms.release(old)
		ms.mu.Lock()
		if s = ms.m[ref.ID]; s != nil { // another loop was quicker
			ms.mu.Unlock()
			return s
		}
	}
	src := readReplica(ref, ms.srv.host.Node(), avoid, ms.srv.plane.reachable)
	s = ms.srv.host.NewCopy(ref.ID, channel, ref.First, ms.srv.opts.limitsFor(channel), src)
	ms.m[ref.ID] = s
	ms.mu.Unlock()
	// Ask the replica to feed the copy, off the caller's loop (dialing
	// may take a while).
	if !ms.srv.plane.background(func() {
		if err := ms.srv.plane.readCopy(src, ref.ID, 0); err != nil {
			ms.srv.log.Debug("sluice: a copy's host cannot feed it", "streamlet", ref.ID, "host", src, "err", err)
			ms.end(s) // unreachable: another replica is tried, or what the copy lacks is lost
		}
	}) {
		ms.end(s)
	}
	return s
}

// readReplica chooses the replica a reader node's copy of ref reads
// from: one of the reachable replicas, spread over the streamlet's
// replicas by a hash of the reader node and the streamlet (so the readers
// of one channel share the read load), avoiding avoid (the replica whose
// feed broke) when another is left, and this node (a replica it does not
// hold: not hosted yet, or lost in a restart). A single copy reads from its
// host.
func readReplica(ref role.StreamletRef, self, avoid string, reachable func(string) bool) string {
	set := ref.Set()
	if len(set) < 2 {
		return ref.Host
	}
	var live []string
	for _, n := range set {
		if n != avoid && n != self && reachable(n) {
			live = append(live, n)
		}
	}
	if len(live) == 0 {
		if avoid != "" {
			return avoid
		}
		return set[0]
	}
	h := xxhash.Sum64String(self) ^ ref.ID*0x9E3779B97F4A7C15
	return live[h%uint64(len(live))]
}

// existing returns the copy of streamlet id if this node has one.
func (ms *mirrorSet) existing(id uint64) *host.Streamlet {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.m[id]
}

// end seals a copy whose feed cannot continue (marking it broken) and
// wakes its readers.
func (ms *mirrorSet) end(s *host.Streamlet) {
	s.Break()
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
		ms.release(s)
	}
}

// release frees a copy taken out of the map and stops its feed.
func (ms *mirrorSet) release(s *host.Streamlet) {
	if s.Drop() {
		ms.srv.plane.unreadCopy(s.CopyOf(), s.ID())
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

// copyShort reports whether s is a copy that its host ended (SEALED or
// GONE, not a broken feed) before the end of the closed streamlet ref,
// and where it ends.
func copyShort(s *host.Streamlet, ref role.StreamletRef) (uint64, bool) {
	if s.CopyOf() == "" || !ref.Closed || s.BrokenAt() != 0 || !s.Buf().Sealed() {
		return 0, false
	}
	end := s.First() + uint64(s.Buf().Len())
	return end, end < ref.End
}
