package engine

import (
	"fmt"
	"sync/atomic"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/wire"
)

// Acknowledging publishes appended on this node to a replicated streamlet
// (its first replica, the orderer, is this node): a PUBACK goes out only
// once every replica holds the message (DESIGN.md "Replication"). The
// loop keeps the acks in a durWait per streamlet, a waker of it, and
// releases them as the streamlet's durable count grows; once the count is
// final (recovery sealed the streamlet), the publishes beyond it were
// dropped from every replica and are refused (UNAVAILABLE: not stored).
// A peer gateway's NODE_APPEND waits the same way in package cluster.

// durWait is the acks one loop holds for one replicated streamlet, in
// position order. Owned by the loop, but scheduled.
type durWait struct {
	l         *loop
	s         *host.Streamlet
	q         []durAck
	scheduled atomic.Bool
}

// durAck is one publish waiting for its replicas.
type durAck struct {
	c   *conn
	id  uint32
	pos uint64
}

// ackDurable acknowledges the publish id of c stored at pos in the
// streamlet s once every replica of s holds it; at once for a single copy.
func (l *loop) ackDurable(s *host.Streamlet, c *conn, id uint32, pos uint64) {
	if !s.Replicated() {
		if len(c.acks) == 0 {
			l.ackers = append(l.ackers, c)
		}
		c.acks = append(c.acks, wire.Ack{ID: id, Position: pos})
		return
	}
	w := l.durs[s]
	if w == nil {
		if l.durs == nil {
			l.durs = make(map[*host.Streamlet]*durWait)
		}
		w = &durWait{l: l, s: s}
		l.durs[s] = w
		s.AddWaker(w)
		l.releasing = append(l.releasing, w)
	} else if len(w.q) == 0 {
		l.releasing = append(l.releasing, w)
	}
	w.q = append(w.q, durAck{c, id, pos})
}

// releaseDurable runs the releases of the waits that got acks in this
// iteration (loop.end, before the acks are encoded): a record may have
// become durable already.
func (l *loop) releaseDurable() {
	for i := 0; i < len(l.releasing); i++ {
		l.releasing[i].release()
	}
	clear(l.releasing)
	l.releasing = l.releasing[:0]
}

// Wake schedules a release on the loop (host.Waker).
func (w *durWait) Wake() {
	if w.scheduled.CompareAndSwap(false, true) {
		w.l.execute(func() {
			w.scheduled.Store(false)
			w.release()
		})
	}
}

// release acknowledges what the durable count covers and, once it is
// final, refuses what lies beyond.
func (w *durWait) release() {
	l := w.l
	n, final := w.s.Durable()
	limit := w.s.First() + uint64(n)
	k := 0
	for ; k < len(w.q); k++ {
		a := w.q[k]
		if a.c.closed || a.c.closing {
			continue
		}
		if a.pos >= limit {
			if !final {
				break
			}
			a.c.sendError(a.id, wire.CodeUnavailable,
				fmt.Sprintf("not stored: a replica of %q died or could not be reached, and recovery kept the streamlet only up to position %d", w.s.Channel(), limit))
			continue
		}
		if len(a.c.acks) == 0 {
			l.ackers = append(l.ackers, a.c)
		}
		a.c.acks = append(a.c.acks, wire.Ack{ID: a.id, Position: a.pos})
	}
	clear(w.q[:k])
	w.q = w.q[k:]
	if len(w.q) == 0 && final {
		w.s.RemoveWaker(w)
		delete(l.durs, w.s)
	}
}
