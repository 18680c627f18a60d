package engine

import "time"

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
	list   []StreamletRef
	limits limits
	// readers counts the gateways reading the channel; a channel with
	// readers or streamlets is never dropped.
	readers int
	// lastUse is when the channel last changed (unix ns).
	lastUse int64
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

func newChanState(now time.Time, l limits) *chanState {
	b := positionBase(now)
	return &chanState{epoch: b, next: b, limits: l, lastUse: now.UnixNano()}
}

// tombstone is what survives of a dropped channel: enough to recreate it
// as the same incarnation, positions continuing.
type tombstone struct{ epoch, next uint64 }

// droppable reports whether the channel holds nothing, has no readers and
// has been unused for at least ttl at now.
func (cs *chanState) droppable(now int64) bool {
	return len(cs.list) == 0 && cs.readers == 0 && now-cs.lastUse >= int64(cs.limits.ttl)
}

// open returns the streamlet that is open, or false when a new one must be
// opened.
func (cs *chanState) open() (StreamletRef, bool) {
	if n := len(cs.list); n > 0 && !cs.list[n-1].Closed {
		return cs.list[n-1], true
	}
	return StreamletRef{}, false
}

// grantFor builds the write grant for streamlet ref under the channel's
// limits.
func (cs *chanState) grantFor(channel string, ref StreamletRef) Grant {
	return Grant{
		Channel: channel, Epoch: cs.epoch, Streamlet: ref.ID, Host: ref.Host, First: ref.First,
		LimitMsgs: cs.limits.msgs, LimitSize: cs.limits.size, LeaseEnd: ref.LeaseEnd,
	}
}

// leaseOver returns the open streamlet whose write lease has ended at now.
func (cs *chanState) leaseOver(now int64) (StreamletRef, bool) {
	if s, ok := cs.open(); ok && now >= s.LeaseEnd {
		return s, true
	}
	return StreamletRef{}, false
}

// addOpen records a newly opened streamlet. The caller must have checked
// that none is open.
func (cs *chanState) addOpen(id uint64, host string, now int64) StreamletRef {
	ref := StreamletRef{ID: id, Host: host, First: cs.next, LeaseEnd: now + int64(cs.limits.life)}
	cs.list = append(cs.list, ref)
	return ref
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
	cs.lastUse = now
	s.Expires = now + int64(cs.limits.ttl)
	if n > 1 && s.Expires < cs.list[n-2].Expires {
		s.Expires = cs.list[n-2].Expires
	}
	cs.next = end
}

// expire removes the closed streamlets whose TTL has passed at now and
// appends their ids to dst.
func (cs *chanState) expire(now int64, dst []uint64) []uint64 {
	k := 0
	for k < len(cs.list) && cs.list[k].Closed && cs.list[k].Expires <= now {
		dst = append(dst, cs.list[k].ID)
		k++
	}
	if k > 0 {
		cs.list = append(cs.list[:0], cs.list[k:]...)
	}
	return dst
}

// info builds a ChannelInfo; openLen is how many messages the open
// streamlet holds (as reported by its host).
func (cs *chanState) info(openLen int) ChannelInfo {
	ci := ChannelInfo{Epoch: cs.epoch, Next: cs.next, Earliest: cs.next}
	if len(cs.list) > 0 {
		ci.Earliest = cs.list[0].First
		ci.Streamlets = append([]StreamletRef(nil), cs.list...)
		if s, ok := cs.open(); ok {
			ci.Next = s.First + uint64(openLen)
		}
	}
	return ci
}
