package engine

import "time"

// Progress checks of a gateway's read streams (cluster). A live read
// stream that has not advanced for cluster.StaleAfter looks its channel up again
// at the manager, even if no NOTIFY said that the list changed: a NOTIFY
// can be lost (the manager rebuilt the channel and forgot who reads it,
// or the link carrying it failed). A copy of the open streamlet that got
// no NODE_FEED for that long while its manager reports more records than
// it holds is stalled (its feed died without the link noticing, or the
// host dropped it): it is treated as broken and read again from the host
// (mirror.go, copyReopen). So a reader waits at most about StaleAfter
// plus a round trip for a change it was not told of.

// readerStalled reports whether a read stream whose position last changed
// at progressAt has stood still for stale at now (unix ns).
func readerStalled(now, progressAt int64, stale time.Duration) bool {
	return now-progressAt >= int64(stale)
}

// copyStalled reports whether a copy that ends at copyEnd and last got a
// feed at lastFeed is stalled at now, its streamlet holding records up to
// next (exclusive) as its manager reports.
func copyStalled(now, lastFeed int64, copyEnd, next uint64, stale time.Duration) bool {
	return copyEnd < next && now-lastFeed >= int64(stale)
}

// checkProgress runs the progress check of lc's live read stream at now
// (the loop's sweep; cluster only).
func (lc *loopChan) checkProgress(now int64, stale time.Duration) {
	if lc.nsubs == 0 || lc.live.pos != lc.progressPos {
		lc.progressPos, lc.progressAt = lc.live.pos, now
		return
	}
	if !readerStalled(now, lc.progressAt, stale) || lc.infoPending {
		return
	}
	lc.progressAt = now
	lc.infoValid = false // ask the manager again
	lc.live.s = nil      // and resolve the position from its answer
	lc.deliver()
}
