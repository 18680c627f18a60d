package host

import (
	"slices"

	"github.com/sluice-rtm/sluice/meta"
)

// Apply brings this host in line with a committed change of the channels'
// lists (package meta). Every node applies every change, on the state
// machine's applying goroutine, so Apply never blocks: it frees what the
// lists no longer hold here (expired, lost, or listing other holders) and
// ends a replica at the committed end of its streamlet when it holds more
// (an orderer or follower that missed the recovery, e.g. cut off from the
// manager: its publishes past the end are refused from then on, never
// acknowledged). It returns the ids it freed.
func (h *Host) Apply(c meta.Change) (freed []uint64) {
	for _, r := range c.Freed {
		if h.Streamlet(r.ID) != nil {
			h.Free(r.ID)
			freed = append(freed, r.ID)
		}
	}
	for _, r := range c.Closed {
		s := h.Streamlet(r.ID)
		if s == nil {
			continue
		}
		if !slices.Contains(r.Set(), h.node) && !r.Lost && !leftOut(c, h.node) {
			// A copy made here whose HOLDERS has not committed yet
			// (the orphan sweep frees one that never commits).
			continue
		}
		if r.Lost || !slices.Contains(r.Set(), h.node) || !s.settle(int(r.End-r.First), r.Set()) {
			h.Free(r.ID)
			freed = append(freed, r.ID)
		}
	}
	return freed
}

// leftOut reports whether change c takes node's replicas of its closed
// streamlets that do not list node away from it: the close itself (OPEN's
// tail, CLOSE: a recovery kept the other replicas), or a HOLDERS or
// NODE_GONE that removed node. Another HOLDERS or NODE_GONE does not: the
// node may hold a copy made for a HOLDERS that commits next (nemesis seed
// 5 of ci-5n-r3-combined: the NODE_GONE of a restarted node freed a's
// fresh copy, then its HOLDERS listed a).
func leftOut(c meta.Change, node string) bool {
	return c.Kind == meta.KindOpen || c.Kind == meta.KindClose || slices.Contains(c.Removed, node)
}

// settle ends a replicated streamlet's replica at n records, the committed
// end, when it is not sealed yet: every replica the committed set names
// holds at least n (a close's end is what every replica acknowledged, a
// recovery keeps only replicas holding its length), so the committed
// close alone ends it, whether or not its orderer's SEALED notice ever
// comes (nemesis seed 5: a follower cut off one-way from its orderer held
// all 30 records of a closed streamlet, unsealed, as its only listed
// holder; copies from it never completed and replays announced its range
// lost). A single copy was sealed by its host before its end was
// committed.
func (s *Streamlet) settle(n int, set []string) (kept bool) {
	s.mu.Lock()
	r := s.repl
	act := r != nil && !s.buf.Sealed() && s.buf.Written() >= n
	s.mu.Unlock()
	if !act {
		return true
	}
	return s.SealAt(n, slices.Clone(set)) == nil // else not a replica of the committed content
}
