package engine

import (
	"errors"
	"fmt"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// The gateway's write path to a streamlet hosted by a peer node. Each
// loop keeps, per channel, at most one NODE_APPEND in flight and batches
// everything published meanwhile into the next one (pend): the batch size
// adapts to the round trip, and a refusal (the streamlet closed) is
// handled by resending the unappended rest under a new grant without
// reordering anything. While a batch is in flight or pending, every
// publish to the channel on this loop queues behind it, whichever node
// hosts the next streamlet.

// rbatch is a batch of publishes for a remote streamlet.
type rbatch struct {
	conns []*conn
	ids   []uint32
	acked []bool
	run   []byte // records: u32 len + payload each
	tries int    // grants tried for the batch's first record
	// lost counts the grants whose streamlet other writers filled
	// before this batch's first record got in (appendLocal): contention,
	// not failure, bounded apart (maxLost).
	lost int
}

// maxTries bounds the failed grants of a batch's first record, maxLost the
// grants it lost to other writers of the channel; past either the batch
// is refused UNAVAILABLE.
const maxTries, maxLost = 8, 64

func (b *rbatch) len() int { return len(b.ids) }

// maxPend bounds the bytes a loop queues for one channel while a batch is
// in flight; publishes beyond it are refused with UNAVAILABLE.
const maxPend = 8 << 20

// maxLoopPend bounds the bytes one loop holds for peer hosts over all
// channels (queued, pending or in flight).
const maxLoopPend = 64 << 20

// maxRemoteBatch bounds the record bytes of one NODE_APPEND.
const maxRemoteBatch = 1 << 20

// remoteBusy reports whether publishes to lc must take the remote path.
func (lc *loopChan) remoteBusy() bool {
	return lc.rg != nil || lc.inflight != nil || lc.pend != nil
}

// queueRemote adds one publish to the pending batch; ext marks payload as
// an extended record body.
func (lc *loopChan) queueRemote(c *conn, id uint32, acked bool, payload []byte, ext bool) {
	if lc.pend != nil && len(lc.pend.run) > maxPend {
		c.sendError(id, wire.CodeUnavailable,
			fmt.Sprintf("more than %d bytes wait for the host of %q", maxPend, lc.name))
		return
	}
	if lc.l.remoteBytes > maxLoopPend {
		c.sendError(id, wire.CodeUnavailable,
			fmt.Sprintf("more than %d bytes wait for peer hosts on this event loop", maxLoopPend))
		return
	}
	lc.l.remoteBytes += wire.RecordHeaderLen + len(payload)
	if lc.pend == nil {
		if lc.spare != nil {
			lc.pend, lc.spare = lc.spare, nil // reuse its arrays
		} else {
			lc.pend = &rbatch{}
		}
	}
	b := lc.pend
	b.conns = append(b.conns, c)
	b.ids = append(b.ids, id)
	b.acked = append(b.acked, acked)
	b.run = wire.AppendRecordExt(b.run, payload, ext)
}

// install makes g the loop's write grant: a streamlet hosted here in lc.w,
// a peer's in lc.rg.
func (lc *loopChan) install(g role.Grant) error {
	srv := lc.l.srv
	if g.Host != "" && g.Host != srv.host.Node() {
		lc.w, lc.rg = nil, &g
		return nil
	}
	lc.rg = nil
	if lc.w = srv.host.Streamlet(g.Streamlet); lc.w == nil {
		lc.wAfter = g.Streamlet
		return fmt.Errorf("%w: streamlet %d vanished", role.ErrStreamletClosed, g.Streamlet)
	}
	return nil
}

// requestGrant asks the channel's manager for a write grant through the
// control plane; the answer is installed on the loop (inline on a single
// node) and the queue pumped.
func (lc *loopChan) requestGrant() {
	if lc.granting {
		return
	}
	lc.granting = true
	lc.l.srv.plane.writeGrant(lc.l, lc.name, lc.wAfter, lc.onGrant)
}

// onGrant installs a grant asked for by requestGrant.
func (lc *loopChan) onGrant(g role.Grant, err error) {
	lc.granting = false
	if err == nil {
		err = lc.install(g)
	}
	if err != nil && lc.pend != nil {
		b := lc.pend
		if b.tries++; b.tries > maxTries || !errors.Is(err, role.ErrStreamletClosed) {
			lc.pend = nil
			lc.failBatch(b, wire.CodeUnavailable, err.Error())
		}
	}
	lc.pump()
}

// pump sends the pending batch when nothing is in flight, asking for a
// grant first when there is none.
func (lc *loopChan) pump() {
	for lc.inflight == nil && lc.pend != nil {
		if lc.w == nil && lc.rg == nil {
			lc.requestGrant()
			return
		}
		b := lc.pend
		lc.pend = nil
		if lc.w != nil {
			// The channel's streamlet is on this node now: append in
			// order here, and leave the remote path once drained.
			lc.appendLocal(b)
			continue
		}
		g := lc.rg
		if len(b.run) > maxRemoteBatch {
			lc.pend = lc.split(b)
		}
		lc.inflight = b
		err := lc.l.srv.plane.appendRemote(lc.l, *g, b.len(), b.run, func(res wire.NodeAppended, err error) {
			lc.appended(b, g, res, err)
		})
		if errors.Is(err, errNoPeer) {
			// No link to the host: retire puts b back in front of
			// the rest (a split tail included) for a new grant.
			lc.inflight = nil
			lc.retire(b)
			continue
		}
		if err != nil {
			lc.inflight = nil
			lc.failBatch(b, wire.CodeUnavailable, err.Error())
		}
	}
}

// retire drops the current remote grant (its host cannot be reached) and
// puts b back at the head of the queue for a new grant.
func (lc *loopChan) retire(b *rbatch) {
	if lc.rg != nil {
		lc.wAfter = lc.rg.Streamlet
	}
	lc.rg = nil
	b.tries++
	if b.tries > maxTries {
		lc.failBatch(b, wire.CodeUnavailable, fmt.Sprintf("no host of %q takes writes", lc.name))
		return
	}
	lc.pend = lc.prepend(b, lc.pend)
}

// split cuts b after about maxRemoteBatch bytes and returns the rest
// merged in front of lc.pend.
func (lc *loopChan) split(b *rbatch) *rbatch {
	off, k := 0, 0
	for rec, _, rest, ok := wire.NextRecordExt(b.run); ok; rec, _, rest, ok = wire.NextRecordExt(rest) {
		if k > 0 && off+wire.RecordHeaderLen+len(rec) > maxRemoteBatch {
			break
		}
		off += wire.RecordHeaderLen + len(rec)
		k++
	}
	tail := &rbatch{conns: b.conns[k:], ids: b.ids[k:], acked: b.acked[k:], run: b.run[off:]}
	// Capacities capped: b may be recycled while tail still uses the rest.
	b.conns, b.ids, b.acked, b.run = b.conns[:k:k], b.ids[:k:k], b.acked[:k:k], b.run[:off:off]
	return lc.prepend(tail, lc.pend)
}

// prepend returns a followed by b (either may be nil).
func (lc *loopChan) prepend(a, b *rbatch) *rbatch {
	if b == nil {
		return a
	}
	a.conns = append(a.conns[:len(a.conns):len(a.conns)], b.conns...)
	a.ids = append(a.ids[:len(a.ids):len(a.ids)], b.ids...)
	a.acked = append(a.acked[:len(a.acked):len(a.acked)], b.acked...)
	a.run = append(a.run[:len(a.run):len(a.run)], b.run...)
	return a
}

// appended handles the host's answer to b (on the loop).
func (lc *loopChan) appended(b *rbatch, g *role.Grant, res wire.NodeAppended, err error) {
	lc.inflight = nil
	if err != nil {
		// The host failed with the batch in flight: whether it was
		// appended is unknown, so it is not resent (no duplicates); the
		// publishers get OUTCOME_UNKNOWN (the SDK's ErrUnknownOutcome),
		// never a refusal, which would say it was not stored.
		if lc.rg == g {
			lc.rg, lc.wAfter = nil, g.Streamlet
		}
		lc.failBatch(b, wire.CodeOutcomeUnknown, "the streamlet's host failed with the publish in flight: "+err.Error())
		lc.pump()
		return
	}
	done := min(int(res.Done), b.len())
	if len(res.Dups) == 0 {
		lc.ack(b, 0, done, res.First)
	} else {
		lc.ackDups(b, done, res)
	}
	off := 0
	for i := 0; i < done; i++ {
		_, _, r, _ := wire.NextRecordExt(b.run[off:])
		off = len(b.run) - len(r)
	}
	lc.l.remoteBytes -= off
	if done == b.len() {
		lc.recycle(b)
	}
	if done < b.len() {
		if lc.rg == g {
			lc.rg, lc.wAfter = nil, g.Streamlet
		}
		rest := &rbatch{conns: b.conns[done:], ids: b.ids[done:], acked: b.acked[done:]}
		if done == 0 { // no progress: count the failed grant
			rest.tries = b.tries + 1
		}
		rest.run = b.run[off:]
		if rest.tries > maxTries {
			lc.failBatch(rest, wire.CodeUnavailable, fmt.Sprintf("no host of %q takes writes", lc.name))
		} else {
			lc.pend = lc.prepend(rest, lc.pend)
		}
	}
	lc.pump()
}

// ack acknowledges records [from, to) of b at positions first, first+1...
func (lc *loopChan) ack(b *rbatch, from, to int, first uint64) {
	l := lc.l
	for i := from; i < to; i++ {
		l.stats.msgsIn++
		c := b.conns[i]
		if !b.acked[i] || c.closed || c.closing {
			continue
		}
		if len(c.acks) == 0 {
			l.ackers = append(l.ackers, c)
		}
		c.acks = append(c.acks, wire.Ack{ID: b.ids[i], Position: first + uint64(i-from)})
	}
	lc.lastUse = l.now
}

// ackDups acknowledges records [0, done) of b when the host deduplicated
// some (PROTOCOL.md 9.3.6): those get the position of their first copy, the
// others first, first+1, ... in order.
func (lc *loopChan) ackDups(b *rbatch, done int, res wire.NodeAppended) {
	next, d := res.First, 0
	for i := 0; i < done; i++ {
		if d < len(res.Dups) && int(res.Dups[d].Index) == i {
			lc.ack(b, i, i+1, res.Dups[d].Position)
			d++
			continue
		}
		lc.ack(b, i, i+1, next)
		next++
	}
}

// recycle keeps b's arrays for the next pending batch. Only a batch that
// nothing references any more may be recycled (a rest cut from a batch
// shares its arrays).
func (lc *loopChan) recycle(b *rbatch) {
	if cap(b.run) > maxRemoteBatch*2 {
		return // do not keep a burst's memory
	}
	clear(b.conns)
	*b = rbatch{conns: b.conns[:0], ids: b.ids[:0], acked: b.acked[:0], run: b.run[:0]}
	lc.spare = b
}

// failBatch answers every record of b with an ERROR.
func (lc *loopChan) failBatch(b *rbatch, code wire.Code, text string) {
	lc.l.remoteBytes -= len(b.run)
	for i := 0; i < b.len(); i++ {
		b.conns[i].sendError(b.ids[i], code, text)
	}
}

// appendLocal appends b to the local streamlet of the current grant, in
// order; when the streamlet refuses, the rest goes back to the head of the
// queue for a new grant.
func (lc *loopChan) appendLocal(b *rbatch) {
	l := lc.l
	i, run := 0, b.run
	var refused *host.Streamlet
	for i < b.len() && lc.w != nil {
		rec, ext, rest, _ := wire.NextRecordExt(run)
		pos, err := lc.w.AppendExt(rec, ext, l.now)
		if err != nil {
			refused = lc.w
			lc.wAfter = lc.w.ID()
			lc.w = nil
			break
		}
		l.remoteBytes -= wire.RecordHeaderLen + len(rec)
		if w := lc.w; w.Replicated() {
			// Acknowledged once every replica holds it (durable.go).
			l.stats.msgsIn++
			if c := b.conns[i]; b.acked[i] && !c.closed && !c.closing {
				l.ackDurable(w, c, b.ids[i], pos)
			}
			lc.lastUse = l.now
		} else {
			lc.ack(b, i, i+1, pos)
		}
		i++
		run = rest
	}
	if i < b.len() {
		tail := &rbatch{conns: b.conns[i:], ids: b.ids[i:], acked: b.acked[i:], run: run}
		if i == 0 {
			// No progress. A streamlet that took records meanwhile
			// was filled by the channel's other writers (other loops,
			// other nodes): the channel moves on, this batch lost the
			// race. One that took none failed.
			tail.tries, tail.lost = b.tries, b.lost
			if refused != nil && refused.Buf().Len() > 0 {
				tail.lost++
			} else {
				tail.tries++
			}
		}
		if tail.tries > maxTries || tail.lost > maxLost {
			lc.failBatch(tail, wire.CodeUnavailable, fmt.Sprintf("no streamlet of %q takes writes", lc.name))
		} else {
			lc.pend = lc.prepend(tail, lc.pend)
		}
	}
	if i > 0 && !lc.touched {
		lc.touched = true
		l.touched = append(l.touched, lc)
	}
}
