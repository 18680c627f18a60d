package manager

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/sluice-rtm/sluice/role"
)

// chanState is a channel manager's state for one channel: its incarnation
// (epoch), the position the next streamlet starts at, and its streamlet
// list. It is pure logic: no clock, no I/O, no locks; the manager calls it
// under the channel's lock with the time passed in, and executes the
// decisions it returns (open on a host, seal, free).
//
// Invariants:
//   - list is ordered by First; every entry but possibly the last is
//     closed, and list[i].End == list[i+1].First (no gaps, no overlap);
//   - next == the open streamlet's First, or the last End when all are
//     closed, or base when the list has always been empty;
//   - Expires is non-decreasing along the list, so expiry only ever
//     removes a prefix: a later streamlet never expires before an earlier.
type chanState struct {
	epoch  uint64
	next   uint64 // first position of the next streamlet to open
	list   []role.StreamletRef
	limits role.Limits
	// readers counts the gateways reading the channel; a channel with
	// readers or streamlets is never dropped.
	readers int
	// lastUse is when the channel last changed (unix ns).
	lastUse int64
	// seq counts the streamlets opened (the placement key of the next).
	seq uint64
	// rnodes counts readers per node, so that a node's readers go with
	// it and reader nodes can be told of new streamlets. nil until the
	// first Interest.
	rnodes map[string]int
	// claimed is the id recorded as the successor of streamlet
	// claimedAfter on its host but not opened yet (its opening failed):
	// the next streamlet after claimedAfter gets that id, so that the
	// host's compare-and-set accepts it again instead of taking this
	// manager for another one.
	claimed, claimedAfter uint64
	// claimOver is a first-streamlet claim of another manager whose
	// streamlet this one barred (first.go): the next claim of the channel's
	// first streamlet replaces it. 0: none.
	claimOver uint64
	// recover marks the replicated streamlets that lost a replica and
	// wait for recovery (recovery.go); nil when none does.
	recover map[uint64]bool
	// floor is a position the channel must continue at or above once its
	// open streamlet closes: a former manager's mark (rebuildState) said
	// positions below it may have been handed out in streamlets nobody
	// reports, beyond the open one. close() turns [end, floor) into a
	// lost range. 0: none.
	floor uint64
	// unfound and unfoundHost: the successor that the newest reported
	// streamlet names and no host reported, and the node chosen to host
	// it (rebuildState). Another manager may be opening it right now (its
	// record came first); Manager.writeGrant fences it at that node
	// before it opens anything after it. 0: none.
	unfound     uint64
	unfoundHost string
	// partial: built from listings made while this node had no quorum
	// (a lookup); Manager.writeGrant rebuilds it before granting.
	partial bool
	// msgsPerSec is the channel's publish rate as measured over its last
	// closed streamlet (channel-specific load for placement).
	msgsPerSec, bytesPerSec float64
}

// positionBase returns the first position of a channel incarnation created
// at now. Positions are a 44-bit millisecond clock shifted left by 20 bits,
// so a channel recreated later (after a restart or after it was dropped)
// starts above every position of its earlier incarnations unless those
// published more than 2^20 messages per elapsed millisecond. The base also
// serves as the incarnation's epoch.
func positionBase(now time.Time) uint64 {
	ms := uint64(now.UnixMilli())
	if ms == 0 {
		ms = 1
	}
	return ms << 20
}

func newChanState(now time.Time, l role.Limits) *chanState {
	b := positionBase(now)
	return &chanState{epoch: b, next: b, limits: l, lastUse: now.UnixNano()}
}

// droppable reports whether the channel holds nothing, has no readers and
// has been unused for at least ttl at now.
func (cs *chanState) droppable(now int64) bool {
	return len(cs.list) == 0 && cs.readers == 0 && now-cs.lastUse >= int64(cs.limits.TTL)
}

// due returns the earliest time (unix ns) at which a single node's Tick
// has something to do for the channel as its state stands: the open
// streamlet's lease end (leaseOver), the oldest closed streamlet's expiry
// (expireRefs: Expires is non-decreasing, so the first entry's comes
// first), or, for a channel that holds nothing and has no readers, the
// time it becomes droppable. math.MaxInt64 when none applies (a channel
// with readers and no streamlets): only a change of the state brings
// something due.
func (cs *chanState) due() int64 {
	d := int64(math.MaxInt64)
	if s, ok := cs.open(); ok {
		d = s.LeaseEnd
	}
	if len(cs.list) > 0 && cs.list[0].Closed {
		d = min(d, cs.list[0].Expires)
	}
	if len(cs.list) == 0 && cs.readers == 0 {
		d = min(d, cs.lastUse+int64(cs.limits.TTL))
	}
	return d
}

// open returns the streamlet that is open, or false when a new one must be
// opened.
func (cs *chanState) open() (role.StreamletRef, bool) {
	if n := len(cs.list); n > 0 && !cs.list[n-1].Closed {
		return cs.list[n-1], true
	}
	return role.StreamletRef{}, false
}

// grantFor builds the write grant for streamlet ref under the channel's
// limits.
func (cs *chanState) grantFor(channel string, ref role.StreamletRef) role.Grant {
	return role.Grant{
		Channel: channel, Epoch: cs.epoch, Streamlet: ref.ID, Host: ref.Host, First: ref.First,
		LimitMsgs: cs.limits.Msgs, LimitSize: cs.limits.Size, LeaseEnd: ref.LeaseEnd, Replicas: ref.Replicas,
	}
}

// prior returns the closed streamlets (those before the one being opened,
// which WriteGrant records only once hosted) that may hold message ids of
// the last window at now (role.Grant.Prior): not lost, not
// holes, closed less than window ago (a closed streamlet's close time is
// Expires - TTL; a rebuilt list's are later, which only includes more),
// the newest role.MaxPrior of them, oldest first. window 0 takes every
// retained one.
func (cs *chanState) prior(now int64, window time.Duration) []role.StreamletRef {
	list := cs.list
	if _, open := cs.open(); open {
		list = list[:len(list)-1] // the new streamlet itself, once recorded
	}
	var out []role.StreamletRef
	for i := len(list) - 1; i >= 0 && len(out) < role.MaxPrior; i-- {
		r := list[i]
		if r.ID == 0 || r.Lost {
			continue
		}
		if window > 0 && r.Closed && r.Expires-int64(cs.limits.TTL) < now-int64(window) {
			break // closed before the window: so were all earlier ones
		}
		out = append(out, r)
	}
	slices.Reverse(out)
	return out
}

// leaseOver returns the open streamlet whose write lease has ended at now.
func (cs *chanState) leaseOver(now int64) (role.StreamletRef, bool) {
	if s, ok := cs.open(); ok && now >= s.LeaseEnd {
		return s, true
	}
	return role.StreamletRef{}, false
}

// addOpen records a newly opened streamlet held by replicas (the orderer
// first). The caller must have checked that none is open.
func (cs *chanState) addOpen(id uint64, replicas []string, now int64) role.StreamletRef {
	ref := cs.nextRef(id, replicas, now)
	cs.addRef(ref)
	return ref
}

// nextRef returns the streamlet id, held by replicas (the orderer first),
// that would open next at now, without recording it (its hosts are asked
// first; addRef records it).
func (cs *chanState) nextRef(id uint64, replicas []string, now int64) role.StreamletRef {
	ref := role.StreamletRef{ID: id, Host: replicas[0], First: cs.next, LeaseEnd: now + int64(cs.limits.Life)}
	if len(replicas) > 1 {
		ref.Replicas = append([]string(nil), replicas...)
	}
	return ref
}

// addRef records ref, made by nextRef with nothing opened since, as the
// open streamlet.
func (cs *chanState) addRef(ref role.StreamletRef) {
	cs.list = append(cs.list, ref)
	cs.seq++
}

// successorID returns the id of the streamlet to open after streamlet
// prev: the one claimed for it, or a fresh one from newID.
func (cs *chanState) successorID(prev uint64, newID func() uint64) uint64 {
	if cs.claimed != 0 && cs.claimedAfter == prev {
		return cs.claimed
	}
	return newID()
}

// claim records that id was recorded as prev's successor (0, 0: nothing
// is claimed).
func (cs *chanState) claim(prev, id uint64) { cs.claimed, cs.claimedAfter = id, prev }

// last returns the newest streamlet, if any.
func (cs *chanState) last() (role.StreamletRef, bool) {
	if n := len(cs.list); n > 0 {
		return cs.list[n-1], true
	}
	return role.StreamletRef{}, false
}

// interest records delta readers on node and reports the reader total.
func (cs *chanState) interest(node string, delta int) {
	if cs.rnodes == nil {
		cs.rnodes = make(map[string]int)
	}
	n := cs.rnodes[node] + delta
	if n <= 0 {
		delete(cs.rnodes, node)
	} else {
		cs.rnodes[node] = n
	}
	cs.readers = 0
	for _, k := range cs.rnodes {
		cs.readers += k
	}
}

// lose closes the open streamlet id as lost: its host cannot be asked for
// its end, so it ends at the largest end it could have reached.
func (cs *chanState) lose(id uint64, now int64) {
	if s, ok := cs.open(); ok && s.ID == id {
		cs.list[len(cs.list)-1].Lost = true // before close, which may append a lost range
		cs.close(id, s.First+uint64(cs.limits.Msgs), now)
	}
}

// hostDown records that node died at now: the open streamlet it hosted is
// closed at the largest end it could have had (its First plus the message
// limit: the host refuses appends past it, so no position beyond can have
// been given out) and every streamlet it hosted is marked lost. Its readers
// are forgotten. It reports whether anything changed.
func (cs *chanState) hostDown(node string, now int64) bool {
	changed := false
	for i := range cs.list {
		s := &cs.list[i]
		if s.Host != node || s.Lost || len(s.Replicas) > 1 {
			continue // replicated streamlets are recovered (replicaDown)
		}
		changed = true
		s.Lost = true // before close, which may append to the list
		if !s.Closed {
			cs.close(s.ID, s.First+uint64(cs.limits.Msgs), now)
		}
	}
	if _, ok := cs.rnodes[node]; ok {
		cs.interest(node, -cs.rnodes[node])
	}
	return changed
}

// close records that streamlet id was sealed with end as its end position
// at time now; it expires ttl later, and never before its predecessor.
// Closing an unknown or already closed streamlet is a no-op.
func (cs *chanState) close(id, end uint64, now int64) {
	n := len(cs.list)
	if n == 0 || cs.list[n-1].ID != id || cs.list[n-1].Closed {
		return
	}
	s := &cs.list[n-1]
	if end < s.First {
		end = s.First
	}
	s.End, s.Closed = end, true
	if d := now - (s.LeaseEnd - int64(cs.limits.Life)); d > 0 {
		cs.msgsPerSec = float64(end-s.First) * 1e9 / float64(d)
	}
	cs.lastUse = now
	s.Expires = now + int64(cs.limits.TTL)
	if n > 1 && s.Expires < cs.list[n-2].Expires {
		s.Expires = cs.list[n-2].Expires
	}
	cs.next = end
	if cs.floor > end {
		// A former manager may have handed out positions up to floor:
		// they are lost (GAP lost), and never handed out again.
		cs.list = append(cs.list, role.StreamletRef{First: end, End: cs.floor, Closed: true, Lost: true, Expires: s.Expires})
		cs.next = cs.floor
	}
	cs.floor = 0
}

// mark returns what survives of the channel's state when this manager
// stops managing it without dropping it (role.Hosted.Mark): the newest
// entry of the list and the position the grants may have reached, its
// First plus the message limit while it is open. False for a state that
// lists nothing, which handed nothing out.
func (cs *chanState) mark() (role.Hosted, bool) {
	n := len(cs.list)
	if n == 0 {
		return role.Hosted{}, false
	}
	last := cs.list[n-1]
	reached := max(cs.next, cs.floor)
	if !last.Closed {
		reached = max(reached, last.First+uint64(max(cs.limits.Msgs, 1)))
	}
	return role.Hosted{Mark: true, ID: last.ID, Epoch: cs.epoch, First: last.First, Reached: reached}, true
}

// markReach returns how far the marks among hs oblige a channel rebuilt
// in epoch from the streamlets kept (its reported streamlets of that
// epoch) to continue: the largest Reached of the marks of that epoch
// whose newest entry is not among the streamlets and is not behind any of
// them. Such a mark's manager may have opened streamlets after the last
// one any host reports, without a record on their predecessor (its host
// was unreachable), and their hosts are gone: without the mark the
// rebuild would continue at the reported end and reuse their positions,
// and their acknowledged messages would be neither delivered nor
// announced. A mark whose entry was reported, or was followed by a
// reported streamlet, says nothing the hosts do not. 0: none applies.
func markReach(marks, kept []role.Hosted, epoch uint64) uint64 {
	var reach uint64
	for _, mk := range marks {
		if mk.Epoch != epoch || mk.Reached <= reach {
			continue
		}
		superseded := false
		for _, h := range kept {
			if (mk.ID != 0 && h.ID == mk.ID) || h.First >= mk.First {
				superseded = true
				break
			}
		}
		if !superseded {
			reach = mk.Reached
		}
	}
	return reach
}

// expireRefs removes the closed streamlets whose TTL has passed at now and
// appends them to dst.
func (cs *chanState) expireRefs(now int64, dst []role.StreamletRef) []role.StreamletRef {
	k := 0
	for k < len(cs.list) && cs.list[k].Closed && cs.list[k].Expires <= now {
		dst = append(dst, cs.list[k])
		k++
	}
	if k > 0 {
		cs.list = append(cs.list[:0], cs.list[k:]...)
	}
	return dst
}

// expireThrough removes the closed streamlets up to and including id, ahead
// of their TTL (the retention budget of id's host is exceeded), and appends
// them to dst. An id that is not a closed streamlet of the list (expired
// already, or still open) removes nothing. Only a prefix is removed, so a
// later streamlet still never expires before an earlier one.
func (cs *chanState) expireThrough(id uint64, dst []role.StreamletRef) []role.StreamletRef {
	k := -1
	for i := range cs.list {
		if !cs.list[i].Closed {
			break
		}
		if cs.list[i].ID == id && id != 0 {
			k = i
			break
		}
	}
	if k < 0 {
		return dst
	}
	dst = append(dst, cs.list[:k+1]...)
	cs.list = append(cs.list[:0], cs.list[k+1:]...)
	return dst
}

// info builds a role.ChannelInfo; openLen is how many messages the open
// streamlet holds (as reported by its host).
func (cs *chanState) info(openLen int) role.ChannelInfo {
	ci := role.ChannelInfo{Epoch: cs.epoch, Next: cs.next, Earliest: cs.next}
	if len(cs.list) > 0 {
		ci.Earliest = cs.list[0].First
		ci.Streamlets = append([]role.StreamletRef(nil), cs.list...)
		if s, ok := cs.open(); ok {
			ci.Next = s.First + uint64(openLen)
		}
	}
	return ci
}

// rebuildState builds a channel's state from the streamlets its hosts
// reported, for a manager that took the channel over (its previous manager
// died or the membership moved it). Every entry but the newest must be
// final: sealed (Len final) or marked Lost; the newest may be open, and
// then stays the channel's open streamlet. Only the newest epoch's
// streamlets are kept.
//
// Positions are never reused: holes between reported streamlets become
// lost ranges; when the newest reported streamlet names a successor that
// no host reported (it died with its host, or the old manager died while
// opening it), the successor's range up to its message limit is lost, and
// since further streamlets might have followed it on dead nodes too, the
// next position is also raised to the clock base of now+skew (DESIGN.md,
// "Positions are never reused"). With nothing reported the channel starts
// a new incarnation at that clock base.
func rebuildState(now time.Time, l role.Limits, hs []role.Hosted, skew time.Duration) *chanState {
	cs := rebuildList(now, l, hs, skew)
	short := missingReplicas(hs)
	for _, s := range cs.list {
		if s.ID != 0 && !s.Lost && short[s.ID] {
			if cs.recover == nil {
				cs.recover = make(map[uint64]bool)
			}
			cs.recover[s.ID] = true
		}
	}
	return cs
}

// missingReplicas returns the replicated streamlets of the reports hs
// whose recorded replica set names a node that did not report them (pure;
// for rebuildState). Such a streamlet lost a replica before this manager
// knew the channel (a replica died with the channel's manager, or the
// NodeDown that would have recovered it ran at a manager that died): its
// orderer still counts the missing follower, so it shows no record the
// follower did not confirm, and a seal there would end the streamlet at
// what it wrote rather than at what it shows. The rebuilt channel marks
// it for recovery, as NodeDown does (recovery.go).
func missingReplicas(hs []role.Hosted) map[uint64]bool {
	reported := make(map[uint64][]string)
	for _, h := range hs {
		if !h.Mark && len(h.Replicas) > 1 {
			reported[h.ID] = append(reported[h.ID], h.Host)
		}
	}
	var out map[uint64]bool
	for _, h := range hs {
		if h.Mark || len(h.Replicas) <= 1 || h.Lost {
			continue
		}
		for _, n := range h.Replicas {
			if !slices.Contains(reported[h.ID], n) {
				if out == nil {
					out = make(map[uint64]bool)
				}
				out[h.ID] = true
				break
			}
		}
	}
	return out
}

// rebuildList is rebuildState without the recovery marks.
func rebuildList(now time.Time, l role.Limits, hs []role.Hosted, skew time.Duration) *chanState {
	cs := newChanState(now.Add(skew), l)
	var marks []role.Hosted
	streamlets := make([]role.Hosted, 0, len(hs))
	for _, h := range hs {
		if h.Mark {
			marks = append(marks, h)
		} else {
			streamlets = append(streamlets, h)
		}
	}
	hs = mergeReplicas(streamlets)
	if len(hs) == 0 && len(marks) == 0 {
		return cs
	}
	var epoch uint64
	for _, h := range hs {
		epoch = max(epoch, h.Epoch)
	}
	for _, mk := range marks {
		epoch = max(epoch, mk.Epoch)
	}
	kept := make([]role.Hosted, 0, len(hs))
	for _, h := range hs {
		if h.Epoch == epoch {
			kept = append(kept, h)
		}
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].First < kept[j].First })
	ns := now.UnixNano()
	exp := ns + int64(l.TTL)
	clockBase := cs.next
	reach := markReach(marks, kept, epoch)
	if len(kept) == 0 {
		// Only a mark of the newest epoch: every streamlet its manager
		// listed is gone; what they may have held is lost.
		for _, mk := range marks {
			if mk.Epoch == epoch && mk.Reached == reach {
				cs.epoch, cs.next = epoch, reach
				cs.list = []role.StreamletRef{{First: mk.First, End: reach, Closed: true, Lost: true, Expires: exp}}
				return cs
			}
		}
		return cs
	}
	cs.epoch, cs.list = epoch, nil
	found := make(map[uint64]bool, len(kept))
	for k, h := range kept {
		if !h.Sealed && !h.Lost && k == len(kept)-1 {
			// The newest streamlet is open: it stays open and the
			// channel continues in it.
			if n := len(cs.list); n > 0 && cs.list[n-1].End > h.First {
				continue
			} else if n > 0 && cs.list[n-1].End < h.First {
				cs.list = append(cs.list, role.StreamletRef{First: cs.list[n-1].End, End: h.First, Closed: true, Lost: true, Expires: exp})
			}
			cs.list = append(cs.list, role.StreamletRef{ID: h.ID, Host: h.Host, Replicas: h.Replicas, First: h.First, LeaseEnd: h.LeaseEnd})
			cs.next = h.First
			cs.seq = uint64(len(kept))
			if reach > h.First {
				cs.floor = reach // applied when it closes (close)
			}
			return cs
		}
		end := h.First + uint64(h.Len)
		if h.Lost {
			end = h.First + uint64(max(h.LimitMsgs, 1))
		}
		if n := len(cs.list); n > 0 {
			prev := cs.list[n-1].End
			if h.First < prev {
				continue // overlaps what is kept: only after a split brain
			}
			if h.First > prev {
				cs.list = append(cs.list, role.StreamletRef{First: prev, End: h.First, Closed: true, Lost: true, Expires: exp})
			}
		}
		cs.list = append(cs.list, role.StreamletRef{ID: h.ID, Host: h.Host, Replicas: h.Replicas, First: h.First, End: end,
			Closed: true, Lost: h.Lost, Expires: exp})
		found[h.ID] = true
	}
	lastRef := cs.list[len(cs.list)-1]
	cs.next = lastRef.End
	var lastH role.Hosted
	for _, h := range kept {
		if h.ID == lastRef.ID {
			lastH = h
		}
	}
	if lastH.Succ != 0 && !found[lastH.Succ] {
		end := max(cs.next+uint64(l.Msgs), clockBase)
		cs.list = append(cs.list, role.StreamletRef{First: cs.next, End: end, Closed: true, Lost: true, Expires: exp})
		cs.next = end
		cs.unfound, cs.unfoundHost = lastH.Succ, lastH.SuccHost
	}
	if reach > cs.next {
		cs.list = append(cs.list, role.StreamletRef{First: cs.next, End: reach, Closed: true, Lost: true, Expires: exp})
		cs.next = reach
	}
	cs.seq = uint64(len(kept))
	return cs
}

// mergeReplicas folds the reports of one streamlet by several replicas
// into one entry (pure; for rebuildState). The entry is the orderer's
// report when the orderer answered (it holds everything any replica
// holds), else the longest; a final (recovered) report wins over both,
// since its length is the streamlet's content. Replicas becomes the
// recorded set restricted to the nodes that reported, in the recorded
// order, always led by Host, the recorded orderer, even when it did not
// report (the first replica is the orderer everywhere): an open streamlet
// whose orderer is gone is recovered when it is sealed (the manager then
// reads the survivors' tails). Single-copy reports pass through unchanged.
func mergeReplicas(hs []role.Hosted) []role.Hosted {
	idx := make(map[uint64]int, len(hs))
	out := make([]role.Hosted, 0, len(hs))
	reporters := make(map[uint64][]string)
	for _, h := range hs {
		if len(h.Replicas) > 1 {
			reporters[h.ID] = append(reporters[h.ID], h.Host)
		}
		i, ok := idx[h.ID]
		if !ok {
			idx[h.ID] = len(out)
			out = append(out, h)
			continue
		}
		cur := &out[i]
		orderer := len(h.Replicas) > 0 && h.Host == h.Replicas[0]
		curOrderer := len(cur.Replicas) > 0 && cur.Host == cur.Replicas[0]
		switch {
		case cur.Final:
		case h.Final, orderer, !curOrderer && h.Len > cur.Len:
			*cur = h
		}
	}
	for i := range out {
		h := &out[i]
		rep, ok := reporters[h.ID]
		if !ok || len(h.Replicas) == 0 {
			continue // (a single-copy report chosen: it names no set to restrict)
		}
		set := []string{h.Replicas[0]}
		for _, n := range h.Replicas[1:] {
			if slices.Contains(rep, n) {
				set = append(set, n)
			}
		}
		h.Host = h.Replicas[0]
		h.Replicas = set
		if len(set) == 1 {
			h.Replicas = nil
		}
	}
	return out
}

// toCopy appends to dst the streamlets that must be copied to another
// node: closed, not lost, with data (an id), held by fewer usable nodes
// than the channel's replica count (Limits.Replicas, at least 1: a
// holder that drains is not usable, one that died was taken out of the
// set), and that busy does not report as being copied already. Oldest
// first, so that what expires first is not the last to be saved.
func (cs *chanState) toCopy(usable func(node string) bool, busy func(id uint64) bool, dst []role.StreamletRef) []role.StreamletRef {
	want := max(cs.limits.Replicas, 1)
	for _, s := range cs.list {
		if !s.Closed || s.Lost || s.ID == 0 || busy(s.ID) || cs.recover[s.ID] {
			continue // (one that waits for recovery is copied once it is sealed where it ends)
		}
		set := s.Set()
		n := 0
		for _, h := range set {
			if usable(h) {
				n++
			}
		}
		if n < want && len(set) > 0 {
			dst = append(dst, s)
		}
	}
	return dst
}

// copySource returns the holder of ref a copy is read from: the first
// usable one, else the first (a draining holder still serves reads).
func copySource(ref role.StreamletRef, usable func(node string) bool) string {
	set := ref.Set()
	for _, h := range set {
		if usable(h) {
			return h
		}
	}
	if len(set) == 0 {
		return ""
	}
	return set[0]
}

// maxHolders is the most holders a list entry names (the REF encoding's
// limit, PROTOCOL.md 9.5).
const maxHolders = 16

// addHolder records that closed streamlet id, as listed with the holders
// in was, is also held by to (a complete copy was made there): to leads
// the set from then on (the holder readers go to; an old holder may be
// leaving). It reports false, changing nothing, when the list no longer
// has id with that set (expired, lost or changed meanwhile) or to holds
// it already.
func (cs *chanState) addHolder(id uint64, was []string, to string) bool {
	for i := range cs.list {
		s := &cs.list[i]
		if s.ID != id {
			continue
		}
		set := s.Set()
		if s.Lost || !s.Closed || !slices.Equal(set, was) || slices.Contains(set, to) {
			return false
		}
		set = append([]string{to}, set...)
		if len(set) > maxHolders {
			set = set[:maxHolders]
		}
		s.Host, s.Replicas = to, set
		return true
	}
	return false
}

// successorOf returns what is known to follow streamlet id: the next
// entry of the list, or the id claimed as its successor (claim), with
// false when nothing does.
func (cs *chanState) successorOf(id uint64) (uint64, string, bool) {
	for i := range cs.list {
		if cs.list[i].ID != id {
			continue
		}
		if i+1 < len(cs.list) && cs.list[i+1].ID != 0 {
			return cs.list[i+1].ID, cs.list[i+1].Host, true
		}
		break
	}
	if cs.claimed != 0 && cs.claimedAfter == id {
		return cs.claimed, "", true
	}
	return 0, "", false
}
