package engine

import (
	"time"

	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// Progress checks of a gateway's read streams (cluster). A live read
// stream that has not advanced for cluster.StaleAfter looks its channel up again
// at the manager, even if no NOTIFY said that the list changed: a NOTIFY
// can be lost (the manager rebuilt the channel and forgot who reads it,
// or the link carrying it failed). A copy of the open streamlet that got
// no NODE_FEED for that long while its manager reports more records than
// it holds is stalled (its feed died without the link noticing, or the
// host dropped it): it is treated as broken and read again from the host
// (mirror.go, copyReopen); so is the copy of a closed streamlet that got
// no feed for that long short of its listed end. A catch-up cursor (a
// replay) that has not advanced for that long lets go of its streamlet and
// looks its position up again (checkCatchup). So a reader waits at most
// about StaleAfter plus a round trip for a change it was not told of.

// readerStalled reports whether a read stream whose position last changed
// at progressAt has stood still for stale at now (unix ns).
func readerStalled(now, progressAt int64, stale time.Duration) bool {
	return now-progressAt >= int64(stale)
}

// listedEnd is the end of the records the committed list says streamlet
// ref holds: its end once closed, else the channel's next position.
func listedEnd(ref role.StreamletRef, next uint64) uint64 {
	if ref.Closed {
		return ref.End
	}
	return next
}

// copyStalled reports whether a copy that ends at copyEnd and last got a
// feed at lastFeed is stalled at now, its streamlet holding records up to
// next (exclusive) as its manager reports.
func copyStalled(now, lastFeed int64, copyEnd, next uint64, stale time.Duration) bool {
	return copyEnd < next && now-lastFeed >= int64(stale)
}

// sendAway reports whether the live subscribers of a stream that has
// waited since blockedSince (unix ns, 0: not blocked) for a copy this
// node cannot get from its host (the manager does not list it lost) are
// to be sent to another node at now: after two stale periods, so that a
// host merely restarting its link is waited for.
func sendAway(now, blockedSince int64, stale time.Duration) bool {
	return blockedSince != 0 && now-blockedSince >= 2*int64(stale)
}

// checkProgress runs the progress check of lc's live read stream at now
// (the loop's sweep; cluster only). A stream blocked on a copy that this
// node cannot get (a reader node cut off from a host its manager still
// reaches) sends its connections GOAWAY, so that their subscriptions
// resume on a node that reaches the host.
func (lc *loopChan) checkProgress(now int64, stale time.Duration) {
	if lc.checkCatchup(now, stale) && !lc.infoPending {
		lc.infoValid = false // resolve their positions from the list again
		lc.deliverCatchup()
	}
	if lc.nsubs == 0 || lc.live.pos != lc.progressPos {
		lc.progressPos, lc.progressAt, lc.blockedSince = lc.live.pos, now, 0
		return
	}
	if sendAway(now, lc.blockedSince, stale) {
		lc.blockedSince = 0
		// A holder the membership counts dead holds nothing another node
		// could read sooner: the leader declares its streamlets lost (or
		// recovered from their other replicas) and this stream goes on.
		if lc.l.srv.plane.live(lc.blockedOn) {
			for _, s := range lc.liveSubs {
				s.c.goAwayUnreachable(lc.name)
			}
		}
		for _, g := range lc.groups {
			for _, s := range g.members {
				s.c.goAwayUnreachable(lc.name)
			}
		}
	}
	if !readerStalled(now, lc.progressAt, stale) || lc.infoPending {
		return
	}
	lc.progressAt = now
	lc.infoValid = false // ask the manager again
	lc.live.s = nil      // and resolve the position from its answer
	lc.deliver()
}

// checkCatchup runs the progress check of the catch-up subscribers'
// cursors (a replay, or a lagging subscriber) at now: one that has not
// advanced for stale while its connection could take more lets go of its
// streamlet, so that its next read resolves its position from the list
// again (a copy of a closed streamlet whose feed died unnoticed is then
// found stalled and read again, and a streamlet this node has come to
// hold is read here). It reports whether any let go.
func (lc *loopChan) checkCatchup(now int64, stale time.Duration) bool {
	reset := false
	for _, s := range lc.catchup {
		cur := &s.cur
		if cur.progAt == 0 || cur.pos != cur.progPos || s.c.watchArmed || s.c.over() {
			// Moving, or waiting for its own socket to drain.
			cur.progPos, cur.progAt = cur.pos, now
			continue
		}
		if readerStalled(now, cur.progAt, stale) {
			cur.progAt = now
			cur.s = nil
			reset = true
		}
	}
	return reset
}

// blockedOnCopy records that the live stream waits for a broken copy
// fed by holder (read, on the loop).
func (lc *loopChan) blockedOnCopy(now int64, holder string) {
	if lc.blockedSince == 0 {
		lc.blockedSince, lc.blockedOn = now, holder
	}
}

// goAwayUnreachable sends c GOAWAY UNAVAILABLE once: this node cannot
// read channel's history from its host, so c's subscriptions are to
// resume on another node.
func (c *conn) goAwayUnreachable(channel string) {
	if c.closing || c.closed || c.sentAway {
		return
	}
	c.sentAway = true
	c.l.srv.log.Warn("sluice cluster: sending a client elsewhere: this node cannot reach the host of a channel it reads",
		"channel", channel)
	s, k := c.ownStart()
	c.scratch = wire.AppendGoAway(c.scratch, wire.GoAway{Code: wire.CodeUnavailable,
		Text: "this node cannot reach the node that holds " + channel + ": resume elsewhere"})
	c.ownEnd(s, k)
}
