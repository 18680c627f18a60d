package host

import (
	"bytes"
	"sort"
	"sync"
	"time"

	"github.com/sluice-rtm/sluice/dedup"
	"github.com/sluice-rtm/sluice/internal/mapshrink"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// Deduplication of publishes that carry a message id (PROTOCOL.md 2.14).
//
// The host that appends to a channel's open streamlet holds the channel's
// dedup window (package dedup): the ids of the messages appended in the
// last Window, and their positions. An extended record whose id is in the
// window is not appended; its publisher is answered with the first
// message's position.
//
// The window belongs to the channel on this host, not to one streamlet:
// when the channel's next streamlet opens here (rollover) it continues the
// same window. Otherwise it is completed before the new streamlet takes
// its first append, from the ids stored in the retained records (the ids
// live in the records, so whoever holds them can rebuild):
//
//   - In a cluster the manager's HOST request lists the channel's earlier
//     streamlets within the window and their hosts (role.Grant.Prior).
//     HostStreamlet reads the ids of those this host did not see, the ones
//     here from their buffers and the others from their hosts over the node
//     links (IDSource, op DEDUP_IDS), one page of at most IDPageBytes at a
//     time and within the rebuild budget (SetIDSource), before it hosts
//     the streamlet. A window that already saw the channel up to some
//     position (this host held an earlier streamlet) reads only what came
//     after it. This covers a change of host and a manager failover (the
//     new manager's list comes from the hosts' reports) alike.
//   - Without a prior list (a single node, or the channel's first
//     streamlet) the first append with an id rebuilds the window from the
//     channel's streamlets on this host (window).
//
// What cannot be read (a streamlet lost with its host, a host that does
// not answer within the budget) is missing from the window and counted in
// DedupStats.Partial. The window is dropped with the channel's last
// streamlet on this host.
//
// Memory per channel: the window's at most maxIDs fingerprints (about 40
// bytes each, dedup.Window); a rebuild holds one page of ids besides.
// Publishes without ids wait for a rebuild only as long as the
// streamlet's grant does, that is for the reading of the ids.

// chanWindow is one channel's window on this host. Its fields are guarded
// by mu; the streamlet appending takes it inside its own mu (lock order:
// Streamlet.mu, then Host.wmu or chanWindow.mu; never Host.mu).
type chanWindow struct {
	mu    sync.Mutex
	w     *dedup.Window // nil until the first id (an empty window)
	epoch uint64
	// built: the window has seen every record with an id before next,
	// the position after the last record it has seen.
	built bool
	next  uint64
}

// lookup is w.Lookup of an empty window too; cw.mu is held.
func (cw *chanWindow) lookup(k dedup.Key, now int64) (uint64, bool) {
	if cw.w == nil {
		return 0, false
	}
	return cw.w.LookupKey(k, now)
}

// add is w.Add, creating the window at its first id; cw.mu is held.
func (cw *chanWindow) add(h *Host, k dedup.Key, pos uint64, stamp int64) {
	if cw.w == nil {
		cw.w = dedup.New(h.window(), h.maxIDs())
	}
	cw.w.AddKey(k, pos, stamp)
}

// DedupStats are the host's deduplication counters.
type DedupStats struct {
	Windows    int    // channels with a window on this host (possibly empty)
	Duplicates uint64 // publishes answered with an earlier position
	Rebuilds   uint64 // windows rebuilt or completed from retained records
	Partial    uint64 // rebuilds that could not read every earlier record
	Fetched    uint64 // ids read from other nodes' streamlets
}

// SetDedup sets the dedup window and the most ids remembered per channel
// (defaults dedup.DefaultWindow and dedup.DefaultMaxIDs). Call it before
// the host takes appends.
func (h *Host) SetDedup(window time.Duration, maxIDs int) {
	h.ddWindow, h.ddMax = window, maxIDs
}

// IDSource reads the message ids stored in streamlets other nodes host;
// package cluster implements it over the node links (op DEDUP_IDS). It may
// block on the network; it is called with no lock held.
type IDSource interface {
	// MessageIDs returns one page of the ids in streamlets (all hosted by
	// node), as Host.MessageIDs does there, or an error after deadline.
	MessageIDs(node string, streamlets []uint64, from int, since int64, deadline time.Time) (IDPage, error)
}

// SetIDSource lets the host read the ids of other nodes' streamlets when
// it completes a window (see above); a rebuild stops asking for more pages
// after budget (default 2 s). Call it before the host takes grants.
func (h *Host) SetIDSource(src IDSource, budget time.Duration) {
	h.idSrc, h.idBudget = src, budget
}

// IDPageBytes bounds the ids (and their fields) of one IDPage.
const IDPageBytes = 512 << 10

// IDPage is one page of stored message ids (Host.MessageIDs).
type IDPage struct {
	// Done is how many of the asked streamlets were read to their end;
	// when it is less than their number, the next page starts at record
	// Next of streamlets[Done].
	Done, Next int
	IDs        []StoredID
}

// StoredID is one stored record's message id.
type StoredID struct {
	K     int   // the streamlet: index in the request's list
	Index int   // the record's index in it (position - first)
	Stamp int64 // its append stamp (unix ns, the host's clock)
	ID    []byte
}

// MessageIDs returns the message ids of the records of streamlets (hosted
// here; unknown ones are skipped as read) stamped at or after since, in
// order, from record from of the first, at most about limit bytes of them
// (IDPageBytes when limit is 0; each id counts 15 bytes more). The ids are
// copies. Safe for concurrent use: it reads the buffers as readers do.
func (h *Host) MessageIDs(streamlets []uint64, from int, since int64, limit int) IDPage {
	if limit <= 0 {
		limit = IDPageBytes
	}
	var pg IDPage
	size := 0
	for k, id := range streamlets {
		s := h.Streamlet(id)
		if s == nil || !s.hasIDs.Load() || !s.buf.Acquire() {
			pg.Done, from = k+1, 0
			continue
		}
		n := s.buf.Len()
		i := max(s.buf.SearchStamp(since), from, 0)
		for ; i < n && size < limit; i++ {
			if body, ext := s.buf.GetExt(i); ext {
				if id := wire.ExtMsgIDOf(body); len(id) > 0 {
					pg.IDs = append(pg.IDs, StoredID{K: k, Index: i, Stamp: s.buf.Stamp(i), ID: bytes.Clone(id)})
					size += 15 + len(id)
				}
			}
		}
		s.buf.Release()
		if i < n {
			pg.Next = i
			return pg
		}
		pg.Done, from = k+1, 0
	}
	return pg
}

// Dedup returns the deduplication counters.
func (h *Host) Dedup() DedupStats {
	h.wmu.Lock()
	n := len(h.windows)
	h.wmu.Unlock()
	return DedupStats{Windows: n, Duplicates: h.ddDups.Load(), Rebuilds: h.ddRebuilds.Load(),
		Partial: h.ddPartial.Load(), Fetched: h.ddFetched.Load()}
}

// window returns s's channel window, continuing or rebuilding it so that
// it has seen every record before s's next position. s.mu is held.
func (s *Streamlet) window(now int64) *chanWindow {
	h := s.h
	next := s.first + uint64(s.buf.Written())
	if cw := s.dd; cw != nil {
		return cw
	}
	h.wmu.Lock()
	cw := h.windows[s.channel]
	if cw == nil || cw.epoch != s.epoch {
		cw = &chanWindow{epoch: s.epoch}
		h.windows[s.channel] = cw
	}
	// The channel's earlier streamlets on this host, for a rebuild.
	var mine []*Streamlet
	for _, o := range h.byChan[s.channel] {
		if o != s && o.epoch == s.epoch && o.first < s.first {
			mine = append(mine, o)
		}
	}
	h.wmu.Unlock()
	s.dd = cw
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if cw.built && cw.next == next {
		return cw // continues without a hole
	}
	cw.w = nil
	h.ddRebuilds.Add(1)
	since := now - int64(h.window())
	sort.Slice(mine, func(i, j int) bool { return mine[i].first < mine[j].first })
	expect := uint64(0)
	for _, o := range append(mine, s) {
		if expect != 0 && o.first != expect {
			h.ddPartial.Add(1) // a streamlet hosted elsewhere lies between
		}
		// Another streamlet is read like any reader does, holding a
		// buffer reference, not its lock (s.mu is held).
		if o != s && !o.buf.Acquire() {
			continue // freed meanwhile
		}
		o.scanIDs(cw, 0, since)
		expect = o.first + uint64(o.buf.Len())
		if o != s {
			o.buf.Release()
		}
	}
	cw.built, cw.next = true, next
	return cw
}

// complete brings the channel's window up to s's first position before s
// is hosted, from the ids in the channel's earlier streamlets prior (the
// manager's list; see the top of the file). No lock is held: the pages
// from other nodes are read without one and added under cw.mu.
func (h *Host) complete(s *Streamlet, prior []role.StreamletRef) {
	h.wmu.Lock()
	cw := h.windows[s.channel]
	if cw == nil || cw.epoch != s.epoch {
		cw = &chanWindow{epoch: s.epoch}
		h.windows[s.channel] = cw
	}
	h.wmu.Unlock()
	cw.mu.Lock()
	from := uint64(0) // rebuild from the oldest retained record
	if cw.built && cw.next <= s.first {
		from = cw.next // extend: the window saw everything before next
	} else {
		cw.w, cw.built = nil, false
	}
	cw.mu.Unlock()
	h.ddRebuilds.Add(1)
	now := h.clock().UnixNano()
	since := now - int64(h.window())
	parts, partial := dedupParts(prior, from, s.first)
	add := func(ref role.StreamletRef, ids []StoredID) {
		cw.mu.Lock()
		for _, x := range ids {
			cw.add(h, dedup.KeyOf(x.ID), ref.First+uint64(x.Index), x.Stamp)
		}
		cw.mu.Unlock()
	}
	// Those hosted here first, then each other node's in one run of
	// pages (stamps of different nodes need not be ordered; the window
	// only compares each id's own stamp with the clock).
	byNode := map[string][]dedupPart{}
	var nodes []string
	for _, p := range parts {
		if p.ref.Host == h.node {
			o := h.Streamlet(p.ref.ID)
			if o == nil || !o.buf.Acquire() {
				partial = true
				continue
			}
			cw.mu.Lock()
			o.scanIDs(cw, p.start, since)
			cw.mu.Unlock()
			o.buf.Release()
			continue
		}
		if byNode[p.ref.Host] == nil {
			nodes = append(nodes, p.ref.Host)
		}
		byNode[p.ref.Host] = append(byNode[p.ref.Host], p)
	}
	budget := h.idBudget
	if budget <= 0 {
		budget = 2 * time.Second
	}
	deadline := time.Now().Add(budget) // a timer, not a decision: wall time
	for _, node := range nodes {
		if h.idSrc == nil {
			partial = true
			break
		}
		if !h.fetchIDs(node, byNode[node], since, deadline, add) {
			partial = true
		}
	}
	if partial {
		h.ddPartial.Add(1)
	}
	cw.mu.Lock()
	cw.built, cw.next = true, s.first
	cw.mu.Unlock()
	s.dd = cw // before s is hosted: its appends see it under s.mu
}

// dedupPart is a streamlet whose ids complete a window, with the record
// its reading starts at.
type dedupPart struct {
	ref   role.StreamletRef
	start int
}

// dedupParts returns the streamlets of prior to read, in order, to bring
// a window that saw everything before position from up to position first
// (the new streamlet's); partial when a hole lies before first (a
// streamlet lost, or left out of the list).
func dedupParts(prior []role.StreamletRef, from, first uint64) (parts []dedupPart, partial bool) {
	expect := from
	for _, r := range prior {
		end := r.End
		if !r.Closed || end > first {
			end = first
		}
		if r.ID == 0 || r.Lost || r.First >= first || end <= from {
			continue
		}
		if expect != 0 && r.First > expect {
			partial = true // a hole: lost, or left out of the list
		}
		expect = end
		parts = append(parts, dedupPart{r, int(max(from, r.First) - r.First)})
	}
	if expect != 0 && expect < first {
		partial = true
	}
	return parts, partial
}

// fetchIDs reads the ids of ps, streamlets hosted on node, from that node
// in runs of pages (IDSource.MessageIDs) until deadline, and hands each
// streamlet's ids to add; false when it could not read them all (an
// error, the deadline, or a page that made no progress). It waits for
// the network.
func (h *Host) fetchIDs(node string, ps []dedupPart, since int64, deadline time.Time, add func(role.StreamletRef, []StoredID)) bool {
	ids := make([]uint64, len(ps))
	for i, p := range ps {
		ids[i] = p.ref.ID
	}
	k, at := 0, ps[0].start
	for k < len(ps) {
		if time.Now().After(deadline) {
			return false
		}
		pg, err := h.idSrc.MessageIDs(node, ids[k:], at, since, deadline)
		if err != nil {
			return false
		}
		h.ddFetched.Add(uint64(len(pg.IDs)))
		for len(pg.IDs) > 0 {
			j := 0
			for j < len(pg.IDs) && pg.IDs[j].K == pg.IDs[0].K {
				j++
			}
			if kk := k + pg.IDs[0].K; kk < len(ps) {
				add(ps[kk].ref, pg.IDs[:j])
			}
			pg.IDs = pg.IDs[j:]
		}
		if pg.Done <= 0 && pg.Next <= at {
			return false // no progress: a confused peer
		}
		if k += pg.Done; k < len(ps) {
			at = max(pg.Next, ps[k].start)
		}
	}
	return true
}

// inherit gives a new streamlet, before anyone can append to it, its
// channel's window when the window has seen everything up to its first
// position (a rollover on this host): no rebuild is needed then.
func (h *Host) inherit(s *Streamlet) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if cw := h.windows[s.channel]; cw != nil && cw.epoch == s.epoch {
		cw.mu.Lock()
		if cw.built && cw.next == s.first {
			s.dd = cw
		}
		cw.mu.Unlock()
	}
}

// index adds a hosted streamlet to the by-channel index.
func (h *Host) index(s *Streamlet) {
	h.wmu.Lock()
	h.byChan[s.channel] = append(h.byChan[s.channel], s)
	h.wmu.Unlock()
}

// unindex removes a freed streamlet; the channel's window goes with its
// last streamlet on this host.
func (h *Host) unindex(s *Streamlet) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	list := h.byChan[s.channel]
	for i, o := range list {
		if o == s {
			list[i] = list[len(list)-1]
			list[len(list)-1] = nil
			list = list[:len(list)-1]
			break
		}
	}
	if len(list) == 0 {
		h.byChan = mapshrink.Delete(h.byChan, s.channel, &h.byChanPeak)
		if _, ok := h.windows[s.channel]; ok {
			h.windows = mapshrink.Delete(h.windows, s.channel, &h.windowsPeak)
		}
		return
	}
	h.byChan[s.channel] = list
}

// scanIDs adds to cw the ids of s's records from index from on that are
// stamped at or after since; cw.mu is held.
func (s *Streamlet) scanIDs(cw *chanWindow, from int, since int64) {
	if !s.hasIDs.Load() {
		return
	}
	n := s.buf.Len()
	for i := max(s.buf.SearchStamp(since), from, 0); i < n; i++ {
		body, ext := s.buf.GetExt(i)
		if !ext {
			continue
		}
		if id := wire.ExtMsgIDOf(body); len(id) > 0 {
			cw.add(s.h, dedup.KeyOf(id), s.first+uint64(i), s.buf.Stamp(i))
		}
	}
}

func (h *Host) window() time.Duration {
	if h.ddWindow <= 0 {
		return dedup.DefaultWindow
	}
	return h.ddWindow
}

func (h *Host) maxIDs() int {
	if h.ddMax <= 0 {
		return dedup.DefaultMaxIDs
	}
	return h.ddMax
}
