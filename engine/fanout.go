package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/internal/mapshrink"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// gateway is the registry of channels this node's gateway loops use. For
// each channel it records which loops have subscribers (readers), so that
// a publish wakes exactly those loops. Loops hold references; an entry is
// removed when no loop uses the channel any more.
type gateway struct {
	loops int
	mu    sync.Mutex
	m     map[string]*gwChan
	peak  mapshrink.Peak // m's, for release (under mu)
}

// gwChan is one channel's entry. readers[i] is loop i's view when it has
// subscribers, nil otherwise; written by loop i, read by every loop.
type gwChan struct {
	name    string
	refs    int // loops holding it; guarded by gateway.mu
	readers []atomic.Pointer[loopChan]
	// inline holds readers when there are at most 6 loops: one
	// allocation of 104 bytes, in the allocator's 112-byte class, which
	// no long-lived per-channel object shares (role.StreamletRef is 96,
	// chanState 144, Streamlet 160, ringbuf.Buffer 192), so that when
	// idle views go their spans go back whole instead of leaving holes
	// among the channels' state (a 16-byte slot array beside each entry
	// did: it shares its class with names and small chunks).
	inline [6]atomic.Pointer[loopChan]
	// gen counts changes of the channel's streamlet list announced to
	// this node (cluster): a loop's cached role.ChannelInfo older than gen is
	// fetched again.
	gen atomic.Uint64
	// filt holds the channel's compiled filters on this node (filter.go);
	// nil until a filtered subscription came.
	filt atomic.Pointer[gwFilters]
}

func newGateway(loops int) *gateway {
	return &gateway{loops: loops, m: make(map[string]*gwChan)}
}

func (g *gateway) acquire(name string) *gwChan {
	g.mu.Lock()
	defer g.mu.Unlock()
	gc := g.m[name]
	if gc == nil {
		gc = &gwChan{name: name}
		if g.loops <= len(gc.inline) {
			gc.readers = gc.inline[:g.loops]
		} else {
			gc.readers = make([]atomic.Pointer[loopChan], g.loops)
		}
		g.m[name] = gc
	}
	gc.refs++
	return gc
}

func (g *gateway) release(gc *gwChan) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc.refs--; gc.refs == 0 {
		g.m = mapshrink.Delete(g.m, gc.name, &g.peak)
	}
}

// lookup returns the channel's entry, nil when no loop uses it.
func (g *gateway) lookup(name string) *gwChan {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[name]
}

// has reports whether some loop uses the channel.
func (g *gateway) has(name string) bool { return g.lookup(name) != nil }

// wake schedules every reader loop of the channel (from any goroutine):
// new data in a streamlet they know.
func (g *gateway) wake(name string) {
	if gc := g.lookup(name); gc != nil {
		gc.notify(nil)
	}
}

// changed is wake for a change of the channel's streamlet list (a new or
// lost streamlet): the loops fetch the list again.
func (g *gateway) changed(name string) {
	if gc := g.lookup(name); gc != nil {
		gc.gen.Add(1)
		gc.notify(nil)
	}
}

// interest registers delta reading loops of channel gc with its manager.
func (s *Server) interest(gc *gwChan, delta int) { s.plane.interest(gc.name, delta) }

// notify wakes the readers of the channel after messages were appended by
// loop from (nil: not on a loop): from's own view is served inline, other
// loops' views are woken by a task, at most one pending per view, so
// bursts coalesce. From a loop in an iteration the views to wake are
// gathered per target loop and posted as one task each when the
// iteration ends (loop.postWakes): a publisher's iteration that touched
// hundreds of channels read on another loop costs that loop one task and
// one flush, not one of each per channel.
func (gc *gwChan) notify(from *loop) {
	for i := range gc.readers {
		lc := gc.readers[i].Load()
		if lc == nil {
			continue
		}
		switch {
		case lc.l == from:
			lc.deliver()
		case from != nil && from.busy:
			from.wakeLater(lc)
		default:
			lc.schedule()
		}
	}
}

// loopChan is one loop's view of a channel: its cached write grant and the
// shared read path of all the loop's subscribers to the channel. Owned by
// the loop, except scheduled, which other loops set.
type loopChan struct {
	l       *loop
	name    string
	gc      *gwChan
	lastUse int64
	touched bool

	// write side: the streamlet of the current write grant when it is
	// hosted here (w), or the grant when a peer hosts it (rg; the remote
	// path of remotewrite.go, with its in-flight and pending batches).
	w        *host.Streamlet
	wAfter   uint64 // streamlet whose grant stopped working
	rg       *role.Grant
	inflight *rbatch
	pend     *rbatch
	granting bool    // a grant request is in flight (cluster)
	spare    *rbatch // a completed batch whose arrays are reused

	// cluster: the channel's info as last fetched from its manager, valid
	// while gc.gen == infoGen; infoPending while a fetch is in flight.
	info        role.ChannelInfo
	infoFound   bool
	infoGen     uint64
	infoValid   bool
	infoPending bool
	pendingSubs int // SUBSCRIBEs waiting for the manager's answer

	// read side. live subscribers are at position live.pos and share one
	// read stream; catchup subscribers have cursors of their own and join
	// live when they reach it.
	live     cursor
	liveSubs []*sub // unfiltered; the filtered ones are in groups (filter.go)
	catchup  []*sub
	nsubs    int
	// groups are the filtered subscriptions by expression (filter.go);
	// nil when there are none, the only cost unfiltered delivery pays.
	groups    map[string]*filterGroup
	scheduled atomic.Bool
	// progressPos and progressAt: where the live stream was when it last
	// moved, and when (progress.go).
	progressPos uint64
	progressAt  int64
	// blockedSince: the live stream waits for a copy whose feed broke
	// and that its host, blockedOn, cannot give (progress.go); 0
	// otherwise.
	blockedSince int64
	blockedOn    string

	// pubMsgs and pubBytes count the publishes stored through this loop
	// since the console last collected them (console.go).
	pubMsgs, pubBytes uint64
	// presSubs are the subscriptions that want presence events or
	// occupancy (presence.go).
	presSubs []*sub
}

// sub is one subscription of one connection.
type sub struct {
	c  *conn
	id uint32
	lc *loopChan
	// pending: SUBSCRIBE waits for the manager's answer (cluster);
	// cancel records an UNSUBSCRIBE (cancelReq) that arrived meanwhile.
	pending   bool
	cancel    bool
	cancelReq uint32
	cur       cursor        // used while catching up
	fg        *filterGroup  // its filter's group (filter.go); nil: unfiltered
	sf        *sharedFilter // its filter while pending, before it joins fg
	lagging   bool          // in lc.catchup: reads with cur, not the live stream
	skipping  bool          // slow: messages from skipFrom on were not sent
	skipFrom  uint64
	// pflags are the presence flags it was subscribed with; ppaused is
	// the EVENTS_PAUSED state it was last sent; pclient the client id it
	// entered the channel's presence with (presence.go).
	pflags  wire.Flags
	ppaused bool
	pclient string
}

// cursor is a read position in a channel and the streamlet holding it.
// A catch-up cursor's progress check (progress.go) keeps the position it
// last saw, progPos, and when (progAt, unix ns; 0: not yet looked at).
type cursor struct {
	s       *host.Streamlet
	pos     uint64
	progPos uint64
	progAt  int64
}

// maxBatch bounds the record bytes of one DATA frame.
const maxBatch = 64 << 10

// catchupBudget bounds the bytes one catch-up subscriber is sent per
// task, so that replays share the loop with live traffic.
const catchupBudget = 256 << 10

// channelInfo returns the channel's streamlet list when the control plane
// has it at hand; otherwise it asks for it and reports false, and the loop
// delivers again when the answer is in.
func (lc *loopChan) channelInfo() (role.ChannelInfo, bool) {
	if lc.infoPending {
		return role.ChannelInfo{}, false
	}
	var info role.ChannelInfo
	found, inline := false, true
	lc.infoPending = true
	lc.l.srv.plane.info(lc, false, func(i role.ChannelInfo, f bool, _ error) {
		lc.infoPending = false
		if inline {
			info, found = i, f
			return
		}
		lc.deliver()
	})
	if lc.infoPending { // answered later
		inline = false
		return role.ChannelInfo{}, false
	}
	return info, found
}

// cacheInfo keeps info, fetched when the channel's change count was gen.
func (lc *loopChan) cacheInfo(info role.ChannelInfo, found bool, gen uint64) {
	lc.info, lc.infoFound, lc.infoGen, lc.infoValid = info, found, gen, true
}

func (lc *loopChan) schedule() {
	if lc.scheduled.CompareAndSwap(false, true) {
		lc.l.execute(lc.run)
	}
}

func (lc *loopChan) run() {
	lc.scheduled.Store(false)
	lc.deliver()
}

// readResult is what cursor.read found.
type readResult struct {
	kind   int // readNone, readData or readGap
	first  uint64
	count  int
	nbytes int
	gapTo  uint64
	reason wire.GapReason // of a readGap
}

const (
	readNone = iota
	readData
	readGap
)

// read finds the next messages at cur.pos, up to position limit
// (exclusive; 0 means no limit) and about maxBytes. For readData the record
// run is appended to l.iov and the streamlet stays acquired (in l.held)
// until the loop flushes. For readGap, positions [cur.pos, gapTo] are no
// longer retained. The caller advances cur.pos.
func (lc *loopChan) read(cur *cursor, limit uint64, maxBytes int) readResult {
	l := lc.l
	for tries := 0; tries < 16; tries++ {
		if cur.s == nil {
			info, ok := lc.channelInfo()
			if !ok {
				return readResult{}
			}
			if cur.pos < info.Earliest {
				return readResult{kind: readGap, gapTo: info.Earliest - 1, reason: wire.GapExpired}
			}
			i := info.Locate(cur.pos)
			if i < 0 {
				// Nothing written at cur.pos yet. When it will be written
				// to the open streamlet, hold it (on a peer: start this
				// node's copy, whose feed wakes the readers).
				n := len(info.Streamlets)
				if n == 0 || info.Streamlets[n-1].Closed || cur.pos < info.Streamlets[n-1].First {
					return readResult{}
				}
				i = n - 1
			}
			ref := info.Streamlets[i]
			if ref.Lost {
				// The host died: read what this node's copy holds, the
				// rest of the range is lost.
				if s := l.srv.mirrors.existing(ref.ID); s != nil && ref.ID != 0 && cur.pos < s.First()+uint64(s.Buf().Len()) {
					cur.s = s
				} else {
					return readResult{kind: readGap, gapTo: ref.End - 1, reason: wire.GapLost}
				}
			} else if cur.s = l.srv.streamletFor(lc.name, ref); cur.s == nil {
				continue // freed meanwhile: look again
			} else if s := cur.s; s.CopyOf() != "" && !s.Buf().Sealed() && l.srv.plane.staleAfter() > 0 &&
				copyStalled(l.now, s.LastFill(), s.First()+uint64(s.Buf().Len()), listedEnd(ref, info.Next), l.srv.plane.staleAfter()) {
				// The committed list holds records that this node's copy
				// has not received for a while: its feed is dead.
				l.srv.mirrors.end(s)
				cur.s = nil
				return readResult{}
			} else if end, ok := copyShort(cur.s, ref); ok && cur.pos >= end {
				// The host ended this node's copy short of the end its
				// manager lists (it no longer holds the streamlet): the
				// rest is not to be had.
				cur.s = nil
				return readResult{kind: readGap, gapTo: ref.End - 1, reason: wire.GapLost}
			}
		}
		s := cur.s
		if cur.pos < s.First() || !s.Buf().Acquire() {
			cur.s = nil
			continue
		}
		sealed := s.Buf().Sealed() // before Len: once sealed, Len is final
		n := s.Buf().Len()
		from := int(cur.pos - s.First())
		to := n
		if limit != 0 && limit-s.First() < uint64(to) {
			to = int(limit - s.First())
		}
		if from < to {
			var end, nb int
			l.iov, end, nb = s.Buf().AppendRun(l.iov[:0], from, to, maxBytes)
			l.held = append(l.held, s.Buf())
			return readResult{kind: readData, first: cur.pos, count: end - from, nbytes: nb}
		}
		s.Buf().Release()
		if sealed && from >= n {
			if s.BrokenAt() != 0 && cur == &lc.live {
				lc.blockedOnCopy(l.now, s.CopyOf()) // its feed broke (progress.go)
			}
			cur.s = nil // continue in the next streamlet
			continue
		}
		return readResult{}
	}
	return readResult{}
}

// prefix returns the shared 12-byte DATA prefix for a batch.
func (l *loop) prefix(first uint64, count int) []byte {
	start := len(l.shared)
	l.shared = wire.AppendDataPrefix(l.shared, first, uint32(count))
	return l.shared[start:len(l.shared):len(l.shared)]
}

// deliver advances the shared live stream to the end of what is written,
// sending each batch to every live subscriber, then lets catch-up
// subscribers read.
func (lc *loopChan) deliver() {
	if lc.nsubs == 0 {
		return
	}
	l := lc.l
	for {
		r := lc.read(&lc.live, 0, min(maxBatch, int(l.srv.maxBody)-wire.DataPrefixLen))
		if r.kind == readNone {
			break
		}
		if r.kind == readGap {
			for _, s := range lc.liveSubs {
				s.c.sendGap(s.id, lc.live.pos, r.gapTo, r.reason)
			}
			lc.live.pos = r.gapTo + 1
			continue
		}
		b := l.batch(r)
		keep := lc.liveSubs[:0]
		for _, s := range lc.liveSubs {
			if s.send(b) {
				lc.catchup = append(lc.catchup, s) // lagging from r.first on
			} else {
				keep = append(keep, s)
			}
		}
		clear(lc.liveSubs[len(keep):])
		lc.liveSubs = keep
		lc.live.pos += uint64(r.count)
	}
	lc.settleSkips()
	lc.deliverCatchup()
	if lc.groups != nil {
		lc.deliverGroups() // filtered subscriptions, after everyone else (filter.go)
	}
}

// settleSkips ends the skipping of live subscribers whose connection has
// drained: they get GAP reason slow for what they missed and continue at
// the live edge. Without it a subscriber that was skipping when the
// channel went quiet would never learn of its gap.
func (lc *loopChan) settleSkips() {
	for _, s := range lc.liveSubs {
		if !s.skipping {
			continue
		}
		c := s.c
		if c.closing || c.closed || c.watchArmed {
			continue
		}
		if c.over() {
			c.armWritable()
			continue
		}
		if lc.live.pos > s.skipFrom {
			c.sendGap(s.id, s.skipFrom, lc.live.pos-1, wire.GapSlow)
		}
		s.skipping = false
	}
}

// liveAction is what happens to a live batch for one subscriber under
// the slow-consumer policy: over says its connection has more than the
// outbound limit waiting, skipping that it is skipping (policy skip).
type liveAction uint8

const (
	actSend       liveAction = iota // send the batch
	actEndSkip                      // send GAP slow for what was skipped, then the batch
	actLag                          // leave the live stream for a cursor of its own at this batch
	actSkip                         // begin skipping at this batch
	actStillSkip                    // skip this batch too
	actDisconnect                   // ERROR SLOW_CONSUMER and close
)

// decideLive is the slow-consumer policy as a pure function.
func decideLive(p SlowPolicy, over, skipping bool) liveAction {
	switch {
	case !over && skipping:
		return actEndSkip
	case !over:
		return actSend
	case p == SlowDisconnect:
		return actDisconnect
	case p == SlowSkip && skipping:
		return actStillSkip
	case p == SlowSkip:
		return actSkip
	default: // SlowLag
		return actLag
	}
}

// send delivers one live batch to s, applying the slow-consumer policy.
// It reports true when s leaves the live stream (policy lag): its cursor
// is then at the batch's first position and the caller moves it to the
// catch-up subscribers.
func (s *sub) send(b *dataBatch) bool {
	send, leave := s.policy(b.r.first)
	if send {
		b.sendTo(s.c, s.id)
	}
	return leave
}

// policy applies the slow-consumer policy to the live batch starting at
// first for s: whether to send it now (a GAP slow for what was skipped
// is queued first), and whether s leaves the live stream (policy lag:
// its cursor is then at first).
func (s *sub) policy(first uint64) (send, leave bool) {
	c := s.c
	if c.closing || c.closed {
		return false, false
	}
	srv := c.l.srv
	switch decideLive(srv.opts.SlowPolicy, c.over(), s.skipping) {
	case actDisconnect:
		c.sendError(0, wire.CodeSlowConsumer,
			fmt.Sprintf("more than %d bytes pending to subscriber", c.l.outLimit()))
	case actLag:
		s.cur = cursor{pos: first}
		s.lagging = true
		srv.slowLags.Add(1)
		c.armWritable()
		return false, true
	case actSkip:
		s.skipping, s.skipFrom = true, first
		srv.slowSkips.Add(1)
		c.armWritable() // settleSkips sends the GAP once it drains
	case actStillSkip:
	case actEndSkip:
		c.sendGap(s.id, s.skipFrom, first-1, wire.GapSlow)
		s.skipping = false
		return true, false
	case actSend:
		return true, false
	}
	return false, false
}

// deliverCatchup lets each catch-up subscriber (a replay, or a subscriber
// lagging under policy lag) read towards the live position, within a
// budget and while its connection is under the outbound limit; past the
// limit it waits, costing nothing, until its socket drains
// (conn.armWritable). A subscriber that reaches the live position joins
// the shared stream.
func (lc *loopChan) deliverCatchup() {
	l := lc.l
	more := false
	for i := 0; i < len(lc.catchup); {
		s := lc.catchup[i]
		c := s.c
		budget := catchupBudget
		for {
			r, ok := lc.catchupRead(s, budget)
			if !ok {
				break
			}
			l.batch(r).sendTo(c, s.id)
			s.cur.pos += uint64(r.count)
			budget -= r.nbytes
		}
		if s.cur.pos == lc.live.pos {
			s.cur.s = nil
			s.lagging = false
			lc.catchup[i] = lc.catchup[len(lc.catchup)-1]
			lc.catchup[len(lc.catchup)-1] = nil
			lc.catchup = lc.catchup[:len(lc.catchup)-1]
			lc.liveSubs = append(lc.liveSubs, s)
			continue
		}
		if s.cur.pos < lc.live.pos && budget <= 0 {
			more = true
		}
		i++
	}
	if more {
		lc.schedule()
	}
}

// catchupRead reads s's next batch between its cursor and the live
// position, sending the GAPs it meets on the way. false: nothing more to
// send to s now (it reached the live position, budget is spent, its
// connection waits to drain or closes, or the streamlet has no more yet).
func (lc *loopChan) catchupRead(s *sub, budget int) (readResult, bool) {
	c := s.c
	for !c.watchArmed && s.cur.pos < lc.live.pos && budget > 0 && !c.closing && !c.closed {
		if c.over() {
			c.armWritable()
			return readResult{}, false
		}
		r := lc.read(&s.cur, lc.live.pos, min(maxBatch, int(lc.l.srv.maxBody)-wire.DataPrefixLen))
		switch r.kind {
		case readNone:
			return r, false
		case readGap:
			c.sendGap(s.id, s.cur.pos, r.gapTo, r.reason)
			s.cur.pos = r.gapTo + 1
		default:
			return r, true
		}
	}
	return readResult{}, false
}

// addSub registers a new subscription starting at position start.
func (lc *loopChan) addSub(s *sub, start uint64) {
	if lc.nsubs == 0 {
		lc.gc.readers[lc.l.idx].Store(lc)
		lc.l.srv.interest(lc.gc, +1)
		l := lc.l
		l.unread = mapshrink.Delete(l.unread, lc, &l.unreadPk)
	}
	lc.nsubs++
	s.cur = cursor{pos: start}
	if s.fg != nil {
		// A member of its group, reading with its own cursor (filter.go).
	} else if start == lc.live.pos {
		lc.liveSubs = append(lc.liveSubs, s)
	} else {
		s.lagging = true
		lc.catchup = append(lc.catchup, s)
	}
}

// removeSub forgets s; the last one unregisters the loop as a reader.
func (lc *loopChan) removeSub(s *sub) {
	lc.l.presenceRemoved(lc, s)
	if s.fg != nil {
		lc.leaveGroup(s)
	} else {
		lc.liveSubs = removeFrom(lc.liveSubs, s)
		lc.catchup = removeFrom(lc.catchup, s)
	}
	lc.nsubs--
	if lc.nsubs == 0 {
		lc.gc.readers[lc.l.idx].Store(nil)
		lc.l.srv.interest(lc.gc, -1)
		lc.live = cursor{}
		lc.lastUse = lc.l.now
		lc.l.unread[lc] = struct{}{}
	}
}

func removeFrom(list []*sub, s *sub) []*sub {
	for i, x := range list {
		if x == s {
			copy(list[i:], list[i+1:])
			list[len(list)-1] = nil
			return list[:len(list)-1]
		}
	}
	return list
}
