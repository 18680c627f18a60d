package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

const managerShards = 64

// mchan is one managed channel; mu guards st.
type mchan struct {
	mu   sync.Mutex
	name string
	st   *chanState
	dead bool // dropped from the map; a holder must look the name up again
}

// localManager is the in-process channel manager. Channels live in
// sharded maps (shard chosen by xxhash of the name); each channel has its
// own mutex, so channels never contend with each other.
//
// Lock order: shard.mu before mchan.mu; the host's locks are taken under
// mchan.mu, never the other way round.
type localManager struct {
	opts   *Options
	host   Host
	newID  func() uint64
	node   string
	now    func() time.Time
	shards [managerShards]struct {
		mu sync.RWMutex
		m  map[string]*mchan
	}

	grants atomic.Int64 // write grants issued (metrics)

	tombMu    sync.Mutex
	tombs     map[string]tombstone
	tombOrder []string // FIFO for eviction; bounded by maxTombs
}

// maxTombs bounds the memory kept for dropped channels.
const maxTombs = 1 << 16

func newLocalManager(opts *Options, host *localHost, now func() time.Time) *localManager {
	m := &localManager{opts: opts, host: host, newID: host.newID, node: host.node, now: now,
		tombs: make(map[string]tombstone)}
	for i := range m.shards {
		m.shards[i].m = make(map[string]*mchan)
	}
	return m
}

func (m *localManager) shard(name string) int { return int(xxhash.Sum64String(name) % managerShards) }

// get returns the channel, creating it when create is set.
func (m *localManager) get(name string, create bool) *mchan {
	sh := &m.shards[m.shard(name)]
	sh.mu.RLock()
	mc := sh.m[name]
	sh.mu.RUnlock()
	if mc != nil || !create {
		return mc
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if mc = sh.m[name]; mc != nil {
		return mc
	}
	st := newChanState(m.now(), m.opts.limitsFor(name))
	m.tombMu.Lock()
	if t, ok := m.tombs[name]; ok {
		st.epoch, st.next = t.epoch, t.next
		delete(m.tombs, name)
	}
	m.tombMu.Unlock()
	mc = &mchan{name: name, st: st}
	sh.m[name] = mc
	return mc
}

// lockLive returns the channel locked, retrying if it was dropped between
// the lookup and the lock.
func (m *localManager) lockLive(name string, create bool) *mchan {
	for {
		mc := m.get(name, create)
		if mc == nil {
			return nil
		}
		mc.mu.Lock()
		if !mc.dead {
			return mc
		}
		mc.mu.Unlock()
	}
}

func (m *localManager) WriteGrant(channel string, after uint64) (Grant, error) {
	mc := m.lockLive(channel, true)
	defer mc.mu.Unlock()
	now := m.now().UnixNano()
	cs := mc.st
	cs.lastUse = now
	m.grants.Add(1)
	if ref, ok := cs.open(); ok {
		if ref.ID != after && now < ref.LeaseEnd {
			return cs.grantFor(channel, ref), nil
		}
		end, err := m.host.Seal(ref.ID)
		if err != nil {
			end = ref.First
		}
		cs.close(ref.ID, end, now)
	}
	ref := cs.addOpen(m.newID(), m.node, now)
	g := cs.grantFor(channel, ref)
	if err := m.host.HostStreamlet(g); err != nil {
		cs.list = cs.list[:len(cs.list)-1]
		return Grant{}, err
	}
	return g, nil
}

func (m *localManager) Info(channel string, create bool) (ChannelInfo, bool) {
	mc := m.lockLive(channel, create)
	if mc == nil {
		return ChannelInfo{}, false
	}
	defer mc.mu.Unlock()
	n := 0
	if ref, ok := mc.st.open(); ok {
		n, _ = m.host.Len(ref.ID)
	}
	return mc.st.info(n), true
}

func (m *localManager) Interest(channel string, delta int) {
	mc := m.lockLive(channel, true)
	mc.st.readers += delta
	mc.st.lastUse = m.now().UnixNano()
	mc.mu.Unlock()
}

// tick runs the streamlet lifecycle at now: it seals open streamlets whose
// lease ended, frees expired ones and drops channels that are empty,
// unread and unused for a TTL (keeping a tombstone so that positions and
// epoch continue if the channel comes back).
func (m *localManager) tick(now time.Time) {
	ns := now.UnixNano()
	var expired []uint64
	var drop []*mchan
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.RLock()
		drop = drop[:0]
		for _, mc := range sh.m {
			mc.mu.Lock()
			cs := mc.st
			if ref, ok := cs.leaseOver(ns); ok {
				end, err := m.host.Seal(ref.ID)
				if err != nil {
					end = ref.First
				}
				cs.close(ref.ID, end, ns)
			}
			expired = cs.expire(ns, expired[:0])
			for _, id := range expired {
				m.host.Free(id)
			}
			if cs.droppable(ns) {
				drop = append(drop, mc)
			}
			mc.mu.Unlock()
		}
		sh.mu.RUnlock()
		if len(drop) > 0 {
			m.drop(sh, drop, ns)
		}
	}
}

func (m *localManager) drop(sh *struct {
	mu sync.RWMutex
	m  map[string]*mchan
}, cands []*mchan, ns int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, mc := range cands {
		mc.mu.Lock()
		if !mc.dead && mc.st.droppable(ns) {
			mc.dead = true
			delete(sh.m, mc.name)
			m.bury(mc.name, tombstone{mc.st.epoch, mc.st.next})
		}
		mc.mu.Unlock()
	}
}

func (m *localManager) bury(name string, t tombstone) {
	m.tombMu.Lock()
	defer m.tombMu.Unlock()
	if _, ok := m.tombs[name]; !ok {
		if len(m.tombOrder) >= maxTombs {
			delete(m.tombs, m.tombOrder[0])
			m.tombOrder = m.tombOrder[1:]
		}
		m.tombOrder = append(m.tombOrder, name)
	}
	m.tombs[name] = t
}

// channels reports how many channels are managed (for tests and load).
func (m *localManager) channels() int {
	n := 0
	for i := range m.shards {
		m.shards[i].mu.RLock()
		n += len(m.shards[i].m)
		m.shards[i].mu.RUnlock()
	}
	return n
}

var _ Manager = (*localManager)(nil)
