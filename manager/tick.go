package manager

import (
	"container/heap"
	"math"
	"sync"
	"time"

	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/role"
)

// The lifecycle (Tick, on the leader): an open streamlet whose lease ended
// or whose replica is no longer usable is closed; closed streamlets whose
// TTL passed are expired; channels that retain nothing, have no readers and
// were unused for a TTL are dropped; closed streamlets held by fewer usable
// nodes than their replica count are copied (copy.go). What is due is kept
// in a queue of channels by due time (dueQueue), filled from the committed
// changes (Changed) and, when the manager starts leading, from the whole
// state, so a tick visits only the channels with something due.

// retryAfter is when a channel whose due work was started is looked at
// again if nothing committed meanwhile (a close that failed, a copy that
// waits).
const retryAfter = time.Second

// Tick runs the lifecycle at now; changes that wait for hosts run through
// Cluster.Go (inline on a single node). A manager that does not lead does
// nothing.
func (m *Manager) Tick(now time.Time) {
	if !m.leading.Load() {
		return
	}
	ns := now.UnixNano()
	var expire, drop []meta.Ref
	for _, name := range m.due.popDue(ns) {
		c, ok := m.st.Channel(name)
		if !ok {
			continue
		}
		lim := m.cfg.Limits(name)
		next := m.dueOf(c)
		if o, open := c.Open(); open && (ns >= o.LeaseEnd || !m.usableSet(o)) {
			m.closeLater(name, o.ID)
			next = ns + int64(retryAfter)
		}
		var through uint64
		for _, r := range c.List {
			if !r.Closed || r.Expires > ns {
				break
			}
			through = r.ID
		}
		if through != 0 {
			expire = append(expire, meta.Ref{Channel: name, Epoch: c.Epoch, ID: through})
			next = min(next, ns+int64(retryAfter))
		}
		if len(c.List) == 0 && ns-c.Used >= int64(lim.TTL) && ns-m.leadSince.Load() >= int64(m.cfg.DropGrace) && m.readers(name) == 0 {
			drop = append(drop, meta.Ref{Channel: name, Epoch: c.Epoch})
			next = ns + int64(retryAfter)
		}
		if next != math.MaxInt64 {
			m.due.push(name, next)
		}
	}
	m.commitBatches(meta.KindExpire, expire, ns)
	m.commitBatches(meta.KindDrop, drop, ns)
	if last := m.lastCopyScan.Load(); ns-last >= int64(time.Second) && m.lastCopyScan.CompareAndSwap(last, ns) {
		m.scanCopies()
	}
}

// dueOf returns when the channel next has something to do: its open
// streamlet's lease end, its oldest closed streamlet's expiry (expiry
// removes a prefix, and Expires is non-decreasing), or, when it retains
// nothing, the time it becomes droppable; math.MaxInt64 for none.
func (m *Manager) dueOf(c *meta.Channel) int64 {
	d := int64(math.MaxInt64)
	if o, ok := c.Open(); ok {
		d = o.LeaseEnd
	}
	if len(c.List) > 0 && c.List[0].Closed {
		d = min(d, c.List[0].Expires)
	}
	if len(c.List) == 0 {
		d = min(d, c.Used+int64(m.cfg.Limits(c.Name).TTL), m.leadSince.Load()+int64(m.cfg.DropGrace))
	}
	return d
}

// closeLater closes the channel's open streamlet id (lease over, or a
// replica unusable) off the caller's goroutine, unless a change of the
// channel runs by then (which closes or replaces it). The channel's change
// is taken when the job starts, not when it is queued: a grant that finds
// a change in progress waits for it, on a goroutine of the same pool, so
// grants waiting for closes still in the pool's queue could take every
// worker and wait forever (the leader of BenchmarkClusterLeases stopped
// so, its 64 workers waiting). A close that finds the pool full is tried
// again at the next visit.
func (m *Manager) closeLater(name string, id uint64) {
	m.cfg.Cluster.Go(func() {
		sh, sc := m.lockSoft(name)
		if sc.busy != nil {
			sh.mu.Unlock()
			return
		}
		op := &change{done: make(chan struct{})}
		sc.busy = op
		sh.mu.Unlock()
		defer m.end(name, op, role.Grant{}, nil)
		m.closeOpen(name, id, false)
	})
}

// closeOpen closes the channel's open streamlet id as closeSpec decides
// and commits it; the caller holds the channel's change. It reports the
// error that kept it open, nil when it is closed (or no longer the open
// one).
func (m *Manager) closeOpen(name string, id uint64, force bool) error {
	c, ok := m.st.Channel(name)
	if !ok {
		return nil
	}
	o, open := c.Open()
	if !open || o.ID != id {
		return nil
	}
	lim := m.cfg.Limits(name)
	seal, err := m.closeSpec(o, lim, force)
	if err != nil {
		m.logger().Debug("sluice: an open streamlet cannot be closed now", "channel", name, "streamlet", id, "err", err)
		return err
	}
	now := m.now().UnixNano()
	m.noteClosed(name, o, seal.End, now, lim)
	_, err = m.propose(&meta.Cmd{Kind: meta.KindClose, Time: now, Channel: name, Epoch: c.Epoch, Tail: id, Seal: seal})
	return err
}

// commitBatches commits refs as EXPIRE or DROP commands of at most
// meta.MaxBatch entries, off the caller's goroutine when they wait for a
// commit.
func (m *Manager) commitBatches(kind meta.Kind, refs []meta.Ref, ns int64) {
	for len(refs) > 0 {
		n := min(len(refs), meta.MaxBatch)
		batch := refs[:n:n]
		refs = refs[n:]
		m.cfg.Cluster.Go(func() {
			if _, err := m.propose(&meta.Cmd{Kind: kind, Time: ns, Batch: batch}); err != nil {
				m.logger().Debug("sluice: committing the lifecycle failed; the next tick tries again", "kind", kind, "err", err)
			}
		})
	}
}

// dueQueue is a queue of channels by the time they next have something
// due (unix ns); a channel may be queued several times, each visit
// recomputes. Safe for concurrent use (its own mutex, taken alone).
type dueQueue struct {
	mu sync.Mutex
	h  dueHeap
}

type dueItem struct {
	at   int64
	name string
}

type dueHeap []dueItem

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].name < h[j].name
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(dueItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

func (q *dueQueue) push(name string, at int64) {
	q.mu.Lock()
	heap.Push(&q.h, dueItem{at: at, name: name})
	q.mu.Unlock()
}

// popDue removes and returns the distinct channels due by now.
func (q *dueQueue) popDue(now int64) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	seen := map[string]bool{}
	for q.h.Len() > 0 && q.h[0].at <= now {
		it := heap.Pop(&q.h).(dueItem)
		if !seen[it.name] {
			seen[it.name] = true
			out = append(out, it.name)
		}
	}
	if q.h.Len() == 0 && cap(q.h) > 1024 {
		q.h = nil // give back a queue that once held many
	}
	return out
}

func (q *dueQueue) reset() {
	q.mu.Lock()
	q.h = nil
	q.mu.Unlock()
}
