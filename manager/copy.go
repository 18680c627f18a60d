package manager

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/role"
)

// Copies of closed streamlets (DESIGN.md, "Drain and copies"). A closed
// streamlet held by fewer usable nodes than its channel's replica count (a
// holder drains, or one died and NODE_GONE took it out of the set) is
// copied to a node chosen by load among those not holding it, which reads
// it from a holder and keeps it; a HOLDERS command then names the new
// holder first, so readers read it there and a draining holder may go. This
// is both the drain's hand-over and the re-replication after a death. The
// leader scans for them once a second (Tick) into a backlog, and at most
// maxCopies workers on the cluster's pool take its jobs one after another:
// a copy that ends starts the next at once, so the copy rate is bounded by
// the copies' own latency, not by the scans (64 a second when each slot
// waited for the next tick: after a node's death, hundreds of streamlets
// were still single before the next fault struck).

// maxCopies bounds the copies one manager runs at once: the rate limit of
// the copy traffic (each copy is one streamlet, at most LimitSize bytes).
// maxBacklog bounds the jobs one scan queues (the next scan finds the rest).
const (
	maxCopies  = 16
	maxBacklog = 4096
)

// copyJob is one streamlet to copy.
type copyJob struct {
	channel string
	epoch   uint64
	ref     role.StreamletRef
}

// scanCopies finds the closed streamlets short of usable holders, makes
// them the backlog, and starts workers while slots are free.
func (m *Manager) scanCopies() {
	var jobs []copyJob
	m.st.Range(func(c *meta.Channel) bool {
		want := max(m.cfg.Limits(c.Name).Replicas, 1)
		for _, r := range c.List {
			if r.Closed && !r.Lost && m.usableHolders(r) < want {
				jobs = append(jobs, copyJob{channel: c.Name, epoch: c.Epoch, ref: r})
			}
		}
		return len(jobs) < maxBacklog
	})
	m.cmu.Lock()
	m.backlog = jobs
	m.cmu.Unlock()
	for {
		j, ok := m.nextCopy()
		if !ok {
			return
		}
		if !m.cfg.Cluster.Go(func() { m.copyLoop(j) }) {
			m.releaseCopy(j.ref.ID) // the pool is full: the next scan tries again
			return
		}
	}
}

// nextCopy takes the backlog's next job that no worker copies and claims
// it, if a slot is free and this manager leads.
func (m *Manager) nextCopy() (copyJob, bool) {
	m.cmu.Lock()
	defer m.cmu.Unlock()
	if !m.leading.Load() {
		m.backlog = nil
		return copyJob{}, false
	}
	if len(m.copying) >= maxCopies {
		return copyJob{}, false
	}
	for len(m.backlog) > 0 {
		j := m.backlog[0]
		m.backlog = m.backlog[1:]
		if !m.copying[j.ref.ID] {
			m.copying[j.ref.ID] = true
			return j, true
		}
	}
	return copyJob{}, false
}

// copyLoop is a copy worker: it copies j, then the backlog's next jobs,
// until the backlog is empty.
func (m *Manager) copyLoop(j copyJob) {
	for {
		m.copy(j)
		var ok bool
		if j, ok = m.nextCopy(); !ok {
			return
		}
	}
}

// usableHolders counts the usable nodes among ref's holders.
func (m *Manager) usableHolders(ref role.StreamletRef) int {
	n := 0
	for _, h := range ref.Set() {
		if m.cfg.Cluster.Usable(h) {
			n++
		}
	}
	return n
}

// copyDue returns the current state of j's streamlet and whether it still
// needs a copy (a job may wait in the backlog while the lists change).
func (m *Manager) copyDue(j copyJob) (role.StreamletRef, bool) {
	c, ok := m.st.Channel(j.channel)
	if !ok || c.Epoch != j.epoch {
		return role.StreamletRef{}, false
	}
	want := max(m.cfg.Limits(c.Name).Replicas, 1)
	for _, r := range c.List {
		if r.ID == j.ref.ID {
			return r, r.Closed && !r.Lost && m.usableHolders(r) < want
		}
	}
	return role.StreamletRef{}, false
}

func (m *Manager) releaseCopy(id uint64) {
	m.cmu.Lock()
	delete(m.copying, id)
	m.cmu.Unlock()
}

// errNoCopyTarget: no usable node other than the holders can take a copy
// (fewer usable nodes than the replica count): the streamlet waits,
// counted in CopyStats.
var errNoCopyTarget = errors.New("manager: no node can take a copy")

// copy runs one copy (on a pool worker, no lock held) and commits the new
// holder.
func (m *Manager) copy(j copyJob) {
	defer m.releaseCopy(j.ref.ID)
	ref, due := m.copyDue(j)
	if !due {
		return
	}
	j.ref = ref
	err := m.copyTo(j)
	switch {
	case errors.Is(err, errNoCopyTarget):
	case err != nil:
		m.copiesFail.Add(1)
		m.logger().Warn("sluice cluster: copying a streamlet failed; the next scan tries again", "channel", j.channel,
			"streamlet", j.ref.ID, "holders", j.ref.Set(), "err", err)
	default:
		m.copiesDone.Add(1)
		m.lastCopyScan.Store(0) // the next tick scans again: a drain's streamlets are copied back to back
	}
}

func (m *Manager) copyTo(j copyJob) error {
	was := j.ref.Set()
	to, ok := m.cfg.Cluster.Choose(j.channel, j.ref.First, Load{}, was)
	if !ok || slices.Contains(was, to) {
		return errNoCopyTarget
	}
	src := j.ref
	src.Host = copySource(j.ref, m.cfg.Cluster.Usable)
	if err := m.cfg.Cluster.Copy(to, j.channel, j.epoch, src); err != nil {
		return fmt.Errorf("copy from %s to %s: %w", src.Host, to, err)
	}
	r, err := m.propose(&meta.Cmd{Kind: meta.KindHolders, Time: m.now().UnixNano(), Channel: j.channel, Epoch: j.epoch,
		Tail: j.ref.ID, Add: []string{to}})
	if err != nil {
		return err
	}
	if r != meta.ResultOK {
		// Expired or lost meanwhile: the copy is not needed.
		if h := m.cfg.Cluster.HostOf(to); h != nil {
			h.Free(j.ref.ID)
		}
	}
	return nil
}

// copySource returns the holder a copy of ref is read from: the first
// usable one, else the first (a draining holder still serves reads).
func copySource(ref role.StreamletRef, usable func(node string) bool) string {
	set := ref.Set()
	for _, h := range set {
		if usable(h) {
			return h
		}
	}
	if len(set) == 0 {
		return ""
	}
	return set[0]
}

// CopyStats reports the copies of closed streamlets this manager made,
// those that failed (and are retried), those running now, and, while it
// leads, the streamlets held by fewer usable nodes than they should be now
// (underReplicated; 0 on a node that does not lead).
func (m *Manager) CopyStats() (done, failed int64, running int, waiting int64) {
	m.cmu.Lock()
	running = len(m.copying)
	m.cmu.Unlock()
	if m.Leading() {
		waiting = m.underReplicated()
	}
	return m.copiesDone.Load(), m.copiesFail.Load(), running, waiting
}

// underReplicated counts, in the committed lists, the closed streamlets
// held by fewer usable nodes than their channel's replica count (a copy is
// due) and the open ones with a replica that is not usable (a recovery and
// rollover are due), lost ones aside. It walks every channel: for status
// and metrics, not for a hot path.
func (m *Manager) underReplicated() int64 {
	var n int64
	m.st.Range(func(c *meta.Channel) bool {
		want := max(m.cfg.Limits(c.Name).Replicas, 1)
		for _, r := range c.List {
			switch {
			case r.Lost:
			case r.Closed && m.usableHolders(r) < want:
				n++
			case !r.Closed && m.usableHolders(r) < len(r.Set()):
				n++
			}
		}
		return true
	})
	return n
}
