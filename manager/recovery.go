package manager

import (
	"errors"
	"slices"
	"sync"

	"github.com/sluice-rtm/sluice/role"
)

// Recovery of a replicated streamlet (DESIGN.md "Replication"), BookKeeper
// style: when its orderer cannot seal it (a replica died, is cut off, or
// the orderer cannot be reached), the manager fences every replica that
// answers (from then on none takes an append, forwarded or ordered, so no
// more records can be acknowledged), reads their tails, decides
// (decideRecovery, pure), seals the survivors at the decided length
// (SealAt) and commits the outcome (the caller's CLOSE, with the survivors
// as the replica set). A replica that did not answer is not in that set and
// drops its copy when it learns the committed end.

// tailReport is one replica's answer to FENCE: its tail, or the error
// that says it cannot tell.
type tailReport struct {
	Node string
	Tail role.Tail
	Err  error
}

// recoveryPlan is decideRecovery's decision.
type recoveryPlan struct {
	// Lost: no replica answered.
	Lost bool
	// Len is the streamlet's length from now on: every survivor holds
	// [0, Len) and is sealed there.
	Len uint32
	// Keep is the new replica set: the survivors holding Len records, in
	// the old set's order.
	Keep []string
	// Drop answered but hold fewer records than an earlier recovery
	// sealed the streamlet at: replicas no more (freed).
	Drop []string
}

// decideRecovery decides what survives of a replicated streamlet from the
// tails of the replicas that answered; set is the streamlet's replica set
// (the order of Keep).
//
// The rule: a record any replica ever made visible, and so any publish
// ever acknowledged, is held by every replica (the orderer shows a record
// only once every follower reported holding it; a follower shows only what
// the orderer said all hold). So the smallest length among any replicas
// that answer keeps every acknowledged record, whichever replicas did not
// answer, and what lies beyond it was never acknowledged. An earlier
// recovery's length (a survivor that is Final: its manager died before its
// CLOSE committed) is kept as it is, since readers may have read up to it;
// a survivor holding less than that is dropped.
func decideRecovery(set []string, tails []tailReport) recoveryPlan {
	var alive []tailReport
	for _, t := range tails {
		if t.Err == nil {
			alive = append(alive, t)
		}
	}
	if len(alive) == 0 {
		return recoveryPlan{Lost: true}
	}
	var p recoveryPlan
	final := -1
	for i, t := range alive {
		if t.Tail.Final && (final < 0 || t.Tail.Held < alive[final].Tail.Held) {
			final = i
		}
	}
	if final >= 0 {
		p.Len = alive[final].Tail.Held
	} else {
		p.Len = alive[0].Tail.Held
		for _, t := range alive[1:] {
			p.Len = min(p.Len, t.Tail.Held)
		}
	}
	for _, n := range set {
		i := slices.IndexFunc(alive, func(t tailReport) bool { return t.Node == n })
		switch {
		case i < 0:
		case alive[i].Tail.Held < p.Len || (alive[i].Tail.Final && alive[i].Tail.Held != p.Len):
			p.Drop = append(p.Drop, n)
		default:
			p.Keep = append(p.Keep, n)
		}
	}
	return p
}

// errHostGone: the replica cannot be reached now.
var errHostGone = errors.New("manager: replica unreachable")

// recoverRef recovers replicated streamlet ref with no lock held (the
// caller holds the channel's change): FENCE on every replica, the
// decision, SEAL_AT on the survivors it keeps, FREE on those it drops.
// unknown names the replicas that answered that they do not hold it
// (never hosted, or restarted). A plan with Lost set means no replica
// could be sealed.
func (m *Manager) recoverRef(ref role.StreamletRef) (p recoveryPlan, unknown map[string]bool) {
	set := ref.Set()
	tails := make([]tailReport, len(set))
	var wg sync.WaitGroup
	for i, n := range set {
		tails[i].Node = n
		h := m.cfg.Cluster.HostOf(n)
		if h == nil {
			tails[i].Err = errHostGone
			continue
		}
		wg.Add(1)
		go func() { // awaited below
			defer wg.Done()
			tails[i].Tail, tails[i].Err = h.Fence(ref.ID)
		}()
	}
	wg.Wait()
	for _, t := range tails {
		if errors.Is(t.Err, role.ErrUnknownStreamlet) {
			if unknown == nil {
				unknown = make(map[string]bool)
			}
			unknown[t.Node] = true
		}
	}
	p = decideRecovery(set, tails)
	if p.Lost {
		return p, unknown
	}
	errs := make([]error, len(p.Keep))
	for i, n := range p.Keep {
		h := m.cfg.Cluster.HostOf(n)
		if h == nil {
			errs[i] = errHostGone
			continue
		}
		wg.Add(1)
		go func() { // awaited below
			defer wg.Done()
			errs[i] = h.SealAt(ref.ID, p.Len, p.Keep)
		}()
	}
	wg.Wait()
	var keep []string
	for i, n := range p.Keep {
		if errs[i] == nil {
			keep = append(keep, n)
		} else {
			p.Drop = append(p.Drop, n)
		}
	}
	p.Keep, p.Lost = keep, len(keep) == 0
	for _, n := range p.Drop {
		if h := m.cfg.Cluster.HostOf(n); h != nil {
			h.Free(ref.ID)
		}
	}
	m.logger().Info("sluice cluster: replicated streamlet recovered", "streamlet", ref.ID, "first", ref.First,
		"len", p.Len, "replicas", p.Keep, "lost", p.Lost, "dropped", p.Drop)
	return p, unknown
}
