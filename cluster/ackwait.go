package cluster

import (
	"sync/atomic"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/wire"
)

// The orderer answers a NODE_APPEND to a replicated streamlet only once
// every replica holds its records (DESIGN.md "Replication"): the answer
// waits in an appendWait, a waker of the streamlet, and goes out when the
// streamlet's durable count covers it. When recovery ended the streamlet
// short of it (the records beyond were dropped on every replica, so they
// are not stored anywhere), the answer covers the prefix that survived
// with status CLOSED, and the gateway resends the rest under a new grant,
// in order, as after any refusal.

// appendWait is the answers waiting on one streamlet for one peer
// connection, in order. Owned by the connection's loop, but scheduled.
type appendWait struct {
	a         *peerConn
	s         *host.Streamlet
	q         []pendingAnswer
	scheduled atomic.Bool
}

// pendingAnswer is one NODE_APPENDED waiting: its request id, the answer,
// and the position of each record it handled (appended or deduplicated).
type pendingAnswer struct {
	id  uint32
	res wire.NodeAppended
	pos []uint64
	// need is how many of the streamlet's records must be durable.
	need int
}

// waitDurable queues the answer to request id (the records handled have
// positions pos) until the streamlet's durable count covers them.
func (a *peerConn) waitDurable(s *host.Streamlet, id uint32, res wire.NodeAppended, pos []uint64) {
	need := 0
	for _, p := range pos {
		if p >= s.First() { // a duplicate's first copy may lie in an earlier streamlet
			need = max(need, int(p-s.First())+1)
		}
	}
	if a.waits == nil {
		a.waits = make(map[uint64]*appendWait)
	}
	w := a.waits[s.ID()]
	if w == nil {
		w = &appendWait{a: a, s: s}
		a.waits[s.ID()] = w
		s.AddWaker(w)
	}
	w.q = append(w.q, pendingAnswer{id: id, res: res, pos: append([]uint64(nil), pos...), need: need})
	w.release()
}

// Wake schedules a release on the connection's loop (host.Waker).
func (w *appendWait) Wake() {
	if w.scheduled.CompareAndSwap(false, true) {
		w.a.c.Execute(func() {
			w.scheduled.Store(false)
			w.release()
		})
	}
}

// release sends the answers the durable count covers, in order; once the
// count is final, every answer left goes out trimmed to what survived.
func (w *appendWait) release() {
	a := w.a
	if a.done() {
		return
	}
	n, final := w.s.Durable()
	k := 0
	for ; k < len(w.q); k++ {
		p := &w.q[k]
		if n < p.need {
			if !final {
				break
			}
			p.res = trimAnswer(p.res, p.pos, w.s.First()+uint64(n))
		}
		b := a.c.OwnStart()
		b = wire.AppendNodeAppended(b, p.id, p.res)
		a.c.OwnEnd(b)
	}
	clear(w.q[:k])
	w.q = w.q[k:]
	if len(w.q) == 0 {
		w.s.RemoveWaker(w)
		delete(a.waits, w.s.ID())
	}
}

// trimAnswer cuts an answer to the records whose positions (pos, one per
// record handled) lie below limit: the leading run of them, since a
// recovery keeps a prefix. The rest are reported not done (status CLOSED)
// and the gateway resends them.
func trimAnswer(res wire.NodeAppended, pos []uint64, limit uint64) wire.NodeAppended {
	done := 0
	for done < len(pos) && pos[done] < limit {
		done++
	}
	out := wire.NodeAppended{Status: wire.NodeClosed, Done: uint32(done)}
	for _, d := range res.Dups {
		if int(d.Index) < done {
			out.Dups = append(out.Dups, d)
		}
	}
	for k := 0; k < done; k++ {
		dup := false
		for _, d := range out.Dups {
			dup = dup || int(d.Index) == k
		}
		if !dup {
			out.First = pos[k]
			break
		}
	}
	return out
}
