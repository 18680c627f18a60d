package manager

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/sluice-rtm/sluice/role"
)

// Recovery of a replicated streamlet (DESIGN.md "Replication"), run by the
// channel's manager when one of its replicas died (NodeDown) or its
// orderer cannot be reached when it must be sealed: fence every replica
// still alive (from then on none takes an append, forwarded or ordered),
// read their tails, decide (decideRecovery, pure), seal the survivors at
// the decided length (SealAt) and record the outcome in the list. The
// recovery holds the channel's opening, as a grant that seals and opens
// streamlets does, and no lock across the host calls: the channel's
// writers wait for the outcome, nothing else does.

// tailReport is one replica's answer to FENCE: its tail, or the error
// that says it is gone (then it is no replica any more).
type tailReport struct {
	Node string
	Tail role.Tail
	Err  error
}

// recoveryPlan is decideRecovery's decision.
type recoveryPlan struct {
	// Lost: no replica answered; the streamlet died with them.
	Lost bool
	// Len is the streamlet's length from now on: every survivor holds
	// [0, Len) and is sealed there.
	Len uint32
	// Keep is the new replica set: the survivors holding Len records, in
	// the old set's order.
	Keep []string
	// Drop answered but hold fewer records than an earlier recovery
	// sealed the streamlet at: they are replicas no more (freed).
	Drop []string
	// Taken: a survivor names a successor this manager does not know: another
	// manager continued the channel (ErrSuccessorTaken).
	Taken bool
}

// decideRecovery decides what survives of a replicated streamlet from the
// survivors' tails. set is the streamlet's replica set (the order of
// Keep), succ the successor this manager recorded or claimed (0: none).
//
// The rule: a record any replica ever made visible, and so any publish
// ever acknowledged, is held by every replica (the orderer shows a record
// only once every follower reported holding it; a follower shows only what
// the orderer said all hold). So the smallest length among the survivors
// keeps every acknowledged record, and what lies beyond it was never
// acknowledged. An earlier recovery's length (a survivor that is Final:
// that recovery's manager died before it finished, or another manager ran
// it) is kept as it is, since readers may have read up to it; a survivor
// holding less than that is dropped. Fewer than all replicas gone never
// loses an acknowledged record; all gone is Lost.
func decideRecovery(set []string, tails []tailReport, succ uint64) recoveryPlan {
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
		if t.Tail.Succ != 0 && t.Tail.Succ != succ {
			p.Taken = true
		}
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

// recoverRef recovers replicated streamlet ref with no lock held (the
// caller holds the channel's opening, so nothing else seals or opens its
// streamlets meanwhile): FENCE on every replica, the decision, SEAL_AT on
// the survivors it keeps, FREE on the ones it drops. succ is the successor
// this manager recorded or claimed after ref (0: none). It fails with
// ErrSuccessorTaken when another manager continued the channel; a plan
// with Lost set means no replica could be sealed.
func (m *Manager) recoverRef(ref role.StreamletRef, succ uint64) (recoveryPlan, error) {
	set := ref.Set()
	tails := make([]tailReport, len(set))
	var wg sync.WaitGroup
	for i, n := range set {
		tails[i].Node = n
		h := m.hostOf(n)
		if h == nil {
			tails[i].Err = errHostGone
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tails[i].Tail, tails[i].Err = h.Fence(ref.ID)
		}()
	}
	wg.Wait()
	p := decideRecovery(set, tails, succ)
	if p.Taken {
		return p, fmt.Errorf("%w: recovering streamlet %d", role.ErrSuccessorTaken, ref.ID)
	}
	if !p.Lost {
		errs := make([]error, len(p.Keep))
		for i, n := range p.Keep {
			h := m.hostOf(n)
			if h == nil {
				errs[i] = errHostGone
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = h.SealAt(ref.ID, p.Len, p.Keep)
			}()
		}
		wg.Wait()
		var keep []string
		for i, n := range p.Keep {
			switch {
			case errs[i] == nil:
				keep = append(keep, n)
			case errors.Is(errs[i], role.ErrSuccessorTaken):
				return p, fmt.Errorf("%w: streamlet %d: %v", role.ErrSuccessorTaken, ref.ID, errs[i])
			default:
				p.Drop = append(p.Drop, n)
			}
		}
		p.Keep, p.Lost = keep, len(keep) == 0
	}
	for _, n := range p.Drop {
		if h := m.hostOf(n); h != nil {
			h.Free(ref.ID)
		}
	}
	m.recoveries.Add(1)
	if m.cfg.Log != nil {
		m.cfg.Log.Info("sluice cluster: replicated streamlet recovered", "streamlet", ref.ID, "first", ref.First,
			"len", p.Len, "replicas", p.Keep, "lost", p.Lost, "dropped", p.Drop)
	}
	return p, nil
}

// closeRef closes the channel's open or closed streamlet ref: a single
// copy is sealed at its host (lost when that fails); a replicated one is
// sealed by its orderer, or recovered from all its replicas when it is
// marked for recovery (a replica died) or its orderer cannot seal it. The
// caller holds the channel's opening and mc.mu, which closeRef releases
// across the host calls and holds again when it returns. It fails only
// with ErrSuccessorTaken (another manager continued the channel).
func (m *Manager) closeRef(mc *mchan, ref role.StreamletRef, now int64) error {
	// A rebuilt streamlet may have one survivor left (its list entry a
	// single copy) and still wait for recovery: its orderer counts a
	// replica that died (missingReplicas).
	if len(ref.Replicas) <= 1 && !mc.st.recover[ref.ID] {
		mc.mu.Unlock()
		end, err := m.sealAt(ref)
		mc.lock()
		m.recordSeal(mc.st, ref, end, err, now)
		return nil
	}
	recover, succ := mc.st.recover[ref.ID], mc.st.succOf(ref.ID)
	mc.mu.Unlock()
	if !recover && !ref.Closed {
		if end, err := m.sealAt(ref); err == nil {
			mc.lock()
			mc.st.close(ref.ID, end, now)
			return nil
		}
	}
	p, err := m.recoverRef(ref, succ)
	mc.lock()
	if err != nil {
		return err
	}
	mc.st.recovered(ref.ID, p, now)
	return nil
}

// succOf returns the successor this manager knows after streamlet id: the
// next one in the list, or the one claimed for it; 0 if none (pure).
func (cs *chanState) succOf(id uint64) uint64 {
	if i := slices.IndexFunc(cs.list, func(r role.StreamletRef) bool { return r.ID == id }); i >= 0 && i+1 < len(cs.list) {
		return cs.list[i+1].ID
	}
	if cs.claimedAfter == id {
		return cs.claimed
	}
	return 0
}

// recovered records a recovery's outcome in the list (pure).
func (cs *chanState) recovered(id uint64, p recoveryPlan, now int64) {
	delete(cs.recover, id)
	i := slices.IndexFunc(cs.list, func(r role.StreamletRef) bool { return r.ID == id })
	if i < 0 {
		return // expired meanwhile
	}
	s := &cs.list[i]
	if p.Lost {
		if !s.Closed {
			cs.lose(id, now)
		} else {
			s.Lost = true
		}
		return
	}
	if !s.Closed {
		cs.close(id, s.First+uint64(p.Len), now)
		s = &cs.list[i]
	} else if end := s.First + uint64(p.Len); end < s.End {
		// Closed at the orderer's end (its seal counts what it wrote,
		// visible or not), and the survivors hold less: the rest was
		// never held by every replica, so never acknowledged or shown,
		// and nobody holds it now. It is lost (readers get GAP lost)
		// and never handed out again: the next streamlet starts at the
		// old end.
		hole := role.StreamletRef{First: end, End: s.End, Closed: true, Lost: true, Expires: s.Expires}
		s.End = end
		cs.list = slices.Insert(cs.list, i+1, hole)
		s = &cs.list[i]
	}
	s.Host, s.Replicas = p.Keep[0], nil
	if len(p.Keep) > 1 {
		s.Replicas = p.Keep
	}
}

// holds reports whether node holds a replica of one of the channel's
// replicated streamlets that is not lost (pure).
func (cs *chanState) holds(node string) bool {
	for _, s := range cs.list {
		if len(s.Replicas) > 1 && !s.Lost && slices.Contains(s.Replicas, node) {
			return true
		}
	}
	return false
}

// replicaDown marks for recovery every replicated streamlet of the list
// that node held and that is not lost, and returns them (pure).
func (cs *chanState) replicaDown(node string) []role.StreamletRef {
	var out []role.StreamletRef
	for _, s := range cs.list {
		if len(s.Replicas) > 1 && !s.Lost && slices.Contains(s.Replicas, node) {
			if cs.recover == nil {
				cs.recover = make(map[uint64]bool)
			}
			cs.recover[s.ID] = true
			out = append(out, s)
		}
	}
	return out
}

// maxRecoveries bounds the channels NodeDown recovers at once.
const maxRecoveries = 16

// recoverAll recovers, in parallel (at most maxRecoveries channels at
// once), the replicated streamlets that the nodes in todo[channel] held;
// the caller waits.
func (m *Manager) recoverAll(todo map[string][]string) {
	sem := make(chan struct{}, maxRecoveries)
	var wg sync.WaitGroup
	for ch, nodes := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			m.recoverChannel(ch, nodes, nil, 0)
		}()
	}
	wg.Wait()
}

// recoverChannel recovers the channel's replicated streamlets that nodes
// held, those named in ids (Unreachable: an orderer cannot reach one of
// their followers) and any marked before, and, when closeID names its open
// streamlet whose lease ended (Tick), closes that one (sealed by its
// orderer, or recovered). It holds the channel's opening as a grant does
// (it waits for an opening in progress, which may have put a streamlet on
// one of the nodes), so no grant seals or opens meanwhile; no lock is held
// across a host call. A grant that waited asks again. It returns
// ErrNotManager when this node's role was not confirmed (nothing fenced).
func (m *Manager) recoverChannel(channel string, nodes []string, ids []uint64, closeID uint64) error {
	var mc *mchan
	var op *opening
	for {
		if mc = m.lockExisting(channel); mc == nil {
			return nil
		}
		if o := mc.opening; o != nil {
			mc.mu.Unlock()
			<-o.done
			continue
		}
		op = &opening{done: make(chan struct{}), again: true}
		mc.opening = op
		break
	}
	for _, n := range nodes {
		mc.st.replicaDown(n)
	}
	for _, id := range ids {
		mc.st.markRecover(id)
	}
	var refused error
	if m.cl != nil {
		// A recovery fences and seals replicas: only a manager a majority
		// of the nodes names may (confirm.go). Refused, nothing is fenced
		// and the state is forgotten (a later call rebuilds it, and the
		// manager the majority names recovers the streamlets).
		mc.mu.Unlock()
		refused = m.confirm(channel)
		mc.lock()
		if refused != nil {
			mc.unmanaged = true
		}
	}
	now := m.now().UnixNano()
	if ref, ok := mc.st.open(); ok && !mc.unmanaged && closeID != 0 && ref.ID == closeID && now >= ref.LeaseEnd && !mc.st.recover[ref.ID] {
		if err := m.closeRef(mc, ref, now); errors.Is(err, role.ErrSuccessorTaken) {
			mc.unmanaged = true
		}
	}
	for !mc.unmanaged {
		var ref role.StreamletRef
		found := false
		for _, r := range mc.st.list {
			if mc.st.recover[r.ID] {
				ref, found = r, true
				break
			}
		}
		if !found {
			break
		}
		if err := m.closeRef(mc, ref, now); errors.Is(err, role.ErrSuccessorTaken) {
			mc.unmanaged = true // stale: the next call rebuilds
			break
		}
		delete(mc.st.recover, ref.ID) // recovered, or expired meanwhile
	}
	if !mc.unmanaged {
		mc.st.recover = nil // all done (marks are set only here, under the opening, and by a rebuild)
	}
	var readers []string
	if m.cl != nil && len(mc.st.rnodes) > 0 {
		readers = readerNodes(mc.st)
	}
	for _, node := range op.down {
		mc.st.hostDown(node, now) // single copies; a replicated streamlet's NodeDown waits for this opening
	}
	mc.opening = nil
	mc.mu.Unlock()
	close(op.done)
	if readers != nil {
		m.cl.Notify(channel, readers)
	}
	return refused
}

// Recoveries reports how many replicated streamlets were recovered.
func (m *Manager) Recoveries() int64 { return m.recoveries.Load() }
