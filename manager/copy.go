package manager

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-rtm/sluice/role"
)

// Copies of closed streamlets (DESIGN.md, "Drain and copies"). A closed
// streamlet held by fewer usable nodes than its channel's replica count
// (a holder drains: the cluster reports it not Usable; or one died and
// left the set) is copied to a node chosen by the load-weighted placement
// among those not holding it, which reads it from a holder and holds it;
// the list then names the new holder first, so readers read it there and
// a draining holder may go. This is both the drain's hand-over and the
// re-replication after a node death. Tick decides (chanState.toCopy), at
// most maxCopies at a time per manager; Do runs each copy on the
// cluster's pool; copy records the outcome under the channel's lock.

// maxCopies bounds the copies one manager runs at once: the rate limit of
// the copy traffic (each copy is one streamlet, at most LimitSize bytes,
// read over the node link).
const maxCopies = 4

// copySlots returns how many more copies may start now.
func (m *Manager) copySlots() int {
	m.cmu.Lock()
	defer m.cmu.Unlock()
	return max(maxCopies-len(m.copying), 0)
}

// copyBusy reports whether streamlet id is being copied.
func (m *Manager) copyBusy(id uint64) bool {
	m.cmu.Lock()
	defer m.cmu.Unlock()
	return m.copying[id]
}

// claimCopy marks streamlet id as being copied; false if it is already.
func (m *Manager) claimCopy(id uint64) bool {
	m.cmu.Lock()
	defer m.cmu.Unlock()
	if m.copying[id] || len(m.copying) >= maxCopies {
		return false
	}
	m.copying[id] = true
	return true
}

func (m *Manager) releaseCopy(id uint64) {
	m.cmu.Lock()
	delete(m.copying, id)
	m.cmu.Unlock()
}

// errNoCopyTarget: no usable node other than the holders can take a
// copy (fewer live nodes than the replica count): the streamlet waits,
// counted in CopyStats, without a failure or a log line per tick.
var errNoCopyTarget = errors.New("manager: no node can take a copy")

// copy carries out ActCopy a (on a pool worker, no lock held): choose the
// target by load among the usable nodes other than the holder, have it
// copy the streamlet, then record it as the holder. The successor known
// to this manager is recorded on the new holder first (the copy carries
// the successor its old holder had recorded; this covers one recorded
// since), before it is recorded as a holder, so that a manager rebuilding the
// channel from the hosts' reports knows, from the new holder alone,
// whether anything follows the streamlet (DESIGN.md, "Positions are never
// reused"). That Seal runs with the lock released and the channel marked
// opening, as a grant's host calls do.
//
// A copy that succeeded goes on with the channel's next streamlet waiting
// for one, in the same slot, rather than waiting for the next tick: a
// drained node's channel of many streamlets is copied back to back.
func (m *Manager) copy(a Action) {
	for {
		err := m.copyTo(a)
		if errors.Is(err, errNoCopyTarget) {
			m.releaseCopy(a.Ref.ID)
			return
		}
		if err != nil {
			m.copiesFail.Add(1)
			m.releaseCopy(a.Ref.ID)
			if m.cfg.Log != nil {
				m.cfg.Log.Warn("sluice cluster: copying a streamlet failed; the next tick tries again", "channel", a.Channel,
					"streamlet", a.Ref.ID, "holder", a.Ref.Host, "err", err)
			}
			return
		}
		m.copiesDone.Add(1)
		next, ok := m.nextCopy(a)
		if !ok {
			return
		}
		a = next
	}
}

// nextCopy hands the slot of the finished copy a over to the channel's
// next streamlet waiting for one (claimed in the same critical section);
// false (the slot released) when there is none.
func (m *Manager) nextCopy(a Action) (Action, bool) {
	var cands []role.StreamletRef
	epoch := a.Epoch
	if mc := m.lockExisting(a.Channel); mc != nil {
		cands = mc.st.toCopy(m.cl.Usable, m.copyBusy, nil)
		epoch = mc.st.epoch
		mc.mu.Unlock()
	}
	m.cmu.Lock()
	defer m.cmu.Unlock()
	delete(m.copying, a.Ref.ID)
	for _, r := range cands {
		if !m.copying[r.ID] {
			m.copying[r.ID] = true
			return Action{Kind: ActCopy, Channel: a.Channel, Ref: r, Epoch: epoch}, true
		}
	}
	return Action{}, false
}

func (m *Manager) copyTo(a Action) error {
	was := a.Ref.Set()
	to, ok := m.cl.Choose(a.Channel, a.Ref.First, Load{}, was)
	if !ok || slices.Contains(was, to) {
		return errNoCopyTarget
	}
	src := a.Ref
	src.Host = copySource(a.Ref, m.cl.Usable)
	if err := m.cl.Copy(to, a.Channel, a.Epoch, src); err != nil {
		return fmt.Errorf("copy from %s to %s: %w", src.Host, to, err)
	}
	for {
		mc := m.lockExisting(a.Channel)
		if mc == nil {
			return nil // the channel moved to another manager: it lists the holders it finds
		}
		if op := mc.opening; op != nil {
			// A grant (or another copy) is sealing and opening: its
			// successor is recorded on the holders it knows; wait, then
			// look again.
			mc.mu.Unlock()
			<-op.done
			continue
		}
		succ, succHost, ok := mc.st.successorOf(a.Ref.ID)
		if !ok {
			return m.recordHolder(mc, a, was, to)
		}
		// Record the successor on the new holder with the channel's lock
		// released; the channel is opening meanwhile, so no grant records
		// another successor on the holders it knows before the new holder
		// is one of them.
		op := &opening{done: make(chan struct{}), copy: true}
		mc.opening = op
		mc.mu.Unlock()
		var err error
		if host := m.hostOf(to); host == nil {
			err = fmt.Errorf("%w: %s", errHostGone, to)
		} else if _, serr := host.Seal(a.Ref.ID, succ, succHost); serr != nil {
			err = fmt.Errorf("recording the successor on %s: %w", to, serr)
		}
		if errors.Is(err, role.ErrSuccessorTaken) {
			// The copy carries a successor its holder recorded that is
			// not the one this list has: another manager continued the
			// channel (this list is stale: it is rebuilt from the hosts,
			// as a grant's would be), or the holder's record is of a
			// successor never opened. Either way the new holder records
			// that something follows the streamlet, which is what keeps a
			// rebuild from reusing positions after it; so it becomes a
			// holder all the same (if the rebuilt list still names the
			// same set), instead of failing at every tick.
			m.rebuildInPlace(mc, a.Channel, "a copy found another successor recorded than this list has; rebuilt it")
			err = nil
		}
		mc.lock()
		mc.opening = nil
		for _, node := range op.down {
			mc.st.hostDown(node, m.now().UnixNano())
		}
		if err != nil {
			mc.mu.Unlock()
			close(op.done)
			return err
		}
		err = m.recordHolder(mc, a, was, to)
		close(op.done)
		return err
	}
}

// recordHolder records to as a holder of the copied streamlet on the
// locked channel mc, releases the lock and tells the reader nodes.
func (m *Manager) recordHolder(mc *mchan, a Action, was []string, to string) error {
	if !mc.st.addHolder(a.Ref.ID, was, to) {
		mc.mu.Unlock()
		return nil // expired or lost meanwhile
	}
	var readers []string
	if len(mc.st.rnodes) > 0 {
		readers = readerNodes(mc.st)
	}
	mc.mu.Unlock()
	if readers != nil {
		m.cl.Notify(a.Channel, readers)
	}
	return nil
}

// CopyStats reports the copies of closed streamlets this manager made,
// those that failed (and are retried), those running now and the
// streamlets that waited for one at the last tick.
func (m *Manager) CopyStats() (done, failed int64, running int, waiting int64) {
	m.cmu.Lock()
	running = len(m.copying)
	m.cmu.Unlock()
	return m.copiesDone.Load(), m.copiesFail.Load(), running, m.wantCopy.Load()
}

// drainingReplica reports whether one of ref's holders is alive (its Host
// role reachable) but not Usable: it drains, so the open streamlet ref is
// closed now and writing continues on usable nodes.
func drainingReplica(m *Manager, ref role.StreamletRef) bool {
	for _, n := range ref.Set() {
		if !m.cl.Usable(n) && m.hostOf(n) != nil {
			return true
		}
	}
	return false
}
