// Package manager is the channel-manager role: for each channel it keeps
// the streamlet list (pure state in chanState, rebuilt from the hosts'
// reports by rebuildState when a manager takes a channel over), grants
// write and read permission, and runs the streamlet lifecycle (leases,
// expiry, dropping unused channels) when Tick is called. It never touches
// a connection: hosts are reached through the role.Host interface and the
// cluster through the Cluster interface, both supplied by the caller.
package manager

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sluice-rtm/sluice/internal/mapshrink"

	"github.com/sluice-rtm/sluice/role"
)

const managerShards = 64

// mchan is one managed channel; mu guards every field but name and due. mu is
// never held across a host or network call.
type mchan struct {
	mu   sync.Mutex
	name string
	st   *chanState
	dead bool // dropped from the map; a holder must look the name up again
	// unmanaged: another node manages the channel now (set by tick).
	unmanaged bool
	// opening is set while a WriteGrant seals the channel's open
	// streamlet and opens the next one: its host calls run with mu
	// released, and other WriteGrants of the channel wait for its
	// outcome instead of opening one too.
	opening *opening
	// due is when a single node's Tick next has something to do for the
	// channel (chanState.due, stored by Tick under mu), or 0: visit it at
	// the next tick. Every other holder of mu takes it through lock, which
	// stores 0, so a channel changed since Tick's visit is visited again;
	// Tick reads due without mu to pass over the others (10,000 idle
	// channels cost a walk of 10,000 locks and lists per tick before).
	due atomic.Int64
}

// lock takes the channel's lock for anything but Tick's visit, and marks
// the channel for Tick's next visit (due).
func (mc *mchan) lock() {
	mc.mu.Lock()
	mc.due.Store(0)
}

// opening is a write grant being made off the channel's lock by its
// first asker (WriteGrant); g and err are its outcome, set before done
// is closed; down lists the nodes reported dead meanwhile (NodeDown),
// applied to the streamlet it opens.
type opening struct {
	done chan struct{}
	g    role.Grant
	err  error
	down []string
	// copy: the opening is a copy's last step (copy.go), not a grant;
	// again: it is a recovery (recovery.go); a WriteGrant that waited for
	// either asks again.
	copy, again bool
}

// shard is one of the manager's channel maps.
type shard struct {
	mu sync.RWMutex
	m  map[string]*mchan
	// peak lets deletes give the map's memory back once it has shrunk
	// (package mapshrink); under mu.
	peak mapshrink.Peak
}

// Manager is the channel manager of one node. Channels live in sharded
// maps (shard chosen by xxhash of the name); each channel has its own
// mutex, so channels never contend with each other. Safe for concurrent
// use.
//
// Lock order: shard.mu before mchan.mu before tombs.mu or markMu (each
// taken alone under those). No lock is held
// across a call of a host (role.Host) or of the cluster that may wait for
// the network: a WriteGrant that must seal and open streamlets marks the
// channel opening and makes those calls with its lock released
// (openGrant); Tick decides under the locks and Do calls the hosts.
type Manager struct {
	cfg    Config
	shards [managerShards]shard

	grants atomic.Int64 // write grants issued (metrics)
	// degraded counts streamlets opened with fewer replicas than
	// configured; degradedLog is when that was last logged (unix ns).
	degraded, degradedLog atomic.Int64
	// recoveries counts recovered replicated streamlets (recovery.go).
	recoveries atomic.Int64
	// confirms and refused count the confirmations of this node's role
	// as a channel's manager and the refusals among them (confirm.go).
	confirms, refused atomic.Int64

	// copies: the streamlet copies in flight (copy.go), by id, guarded by
	// cmu (taken alone); the counters are for metrics and status.
	cmu                    sync.Mutex
	copying                map[uint64]bool
	copiesDone, copiesFail atomic.Int64
	wantCopy               atomic.Int64 // streamlets waiting for a copy at the last tick

	tombs tombs // dropped channels (tombs.go)

	// marks: what this node knew of the channels it stopped managing
	// without dropping them (ForgetAll, a channel the membership moved):
	// served in LIST answers (Marks) until they expire, so that the next
	// manager, this node or another, continues above every position
	// this one's grants may have reached (chanState.mark, markReach).
	// Bounded by maxTombs, oldest evicted first; guarded by markMu.
	markMu    sync.Mutex
	marks     map[string]heldMark
	markOrder []string

	// cut: pairs of nodes an orderer reported unable to reach each other
	// (unreachable.go); chooseReplicas keeps them from ordering and
	// following one streamlet while the report holds.
	cut cuts

	// cl connects the manager to the cluster; nil on a single node.
	cl Cluster
}

// Config is what a Manager is built from.
type Config struct {
	// Node is this node's name; Host is its streamlet host and NewID
	// numbers new streamlets (unique in the cluster).
	Node  string
	Host  role.Host
	NewID func() uint64
	// Limits returns the streamlet limits of a channel.
	Limits func(channel string) role.Limits
	// Clock is the time source of every decision.
	Clock func() time.Time
	// DedupWindow is the hosts' dedup window (0: every retained
	// streamlet counts): a new streamlet's host is told the channel's
	// earlier streamlets within it (role.Grant.Prior).
	DedupWindow time.Duration
	// Log, if set, logs the cluster decisions (rebuilds, a successor
	// taken by another manager).
	Log *slog.Logger
}

// Cluster is what a manager needs from the cluster (package cluster).
// Its methods may block on the network.
type Cluster interface {
	// HostOf returns node's Host role (this node's host or a remote
	// one); nil when node is unknown or down.
	HostOf(node string) role.Host
	// Choose picks the hosting node for the channel's next streamlet by
	// load, avoiding the nodes in exclude; false when none is left.
	Choose(channel string, seq uint64, load Load, exclude []string) (string, bool)
	// ListAll asks every live node for its streamlets of channel.
	ListAll(channel string) []role.Hosted
	// Notify tells reader nodes that channel changed (a new streamlet, or
	// one was lost), without waiting.
	Notify(channel string, nodes []string)
	// Managed reports whether this node manages channel in its current view.
	Managed(channel string) bool
	// Skew is the clock skew allowed between nodes.
	Skew() time.Duration
	// Quorate reports whether this node sees a majority of the cluster
	// (package cluster, quorum.go); without it the manager grants
	// nothing.
	Quorate() bool
	// Usable reports whether node is a live node that keeps what it
	// holds: false when it drains (what it holds is copied elsewhere,
	// copy.go, and its open streamlet is closed at once) or is down or
	// unknown (a replica lost: the others are copied up to the replica
	// count again).
	Usable(node string) bool
	// Copy makes node to take over a complete copy of the closed
	// streamlet ref of channel (epoch) from its holder ref.Host and
	// hold it; it returns once to holds it. It waits for the network.
	Copy(to, channel string, epoch uint64, ref role.StreamletRef) error
	// Go runs f on the cluster's worker pool; false (f not run) when the
	// pool is full.
	Go(f func()) bool
	// Claim asks every live node to hold the claim that streamlet id,
	// hosted by node host, is channel's first (host.Host.Claim), replacing
	// a claim of over (0: none), and reports whether a majority of the
	// cluster's known nodes holds it; if not, held and heldHost are a claim
	// a node holds instead (0 when none refused, only too few answered).
	// It waits for the network.
	Claim(channel string, id uint64, host string, over uint64) (won bool, held uint64, heldHost string)
	// Confirm asks every live node which node manages channel in its own
	// view and reports whether a strict majority of the cluster's known
	// nodes named this one; if not, other is the node most of them named
	// ("" if none). It waits for the network (confirm.go).
	Confirm(channel string) (ok bool, other string)
}

// ErrNoQuorum: this node sees no majority of its cluster, so it grants
// nothing (package cluster, quorum.go).
var ErrNoQuorum = errors.New("manager: this node is cut off from the majority of its cluster")

// Load is a channel's own load as its manager measures it.
type Load struct {
	MsgsPerSec, BytesPerSec float64
	Readers                 int
}

// hostOf returns the Host role of node.
func (m *Manager) hostOf(node string) role.Host {
	if m.cl == nil || node == m.cfg.Node {
		return m.cfg.Host
	}
	return m.cl.HostOf(node)
}

// New returns a manager with no channels.
func New(cfg Config) *Manager {
	m := &Manager{cfg: cfg, copying: make(map[uint64]bool), marks: make(map[string]heldMark)}
	for i := range m.shards {
		m.shards[i].m = make(map[string]*mchan)
	}
	return m
}

// SetCluster connects the manager to the cluster; call it before the
// manager is used.
func (m *Manager) SetCluster(c Cluster) { m.cl = c }

func (m *Manager) now() time.Time { return m.cfg.Clock() }

func (m *Manager) shard(name string) int { return int(xxhash.Sum64String(name) % managerShards) }

// get returns the channel, creating it when create is set.
func (m *Manager) get(name string, create bool) *mchan {
	sh := &m.shards[m.shard(name)]
	sh.mu.RLock()
	mc := sh.m[name]
	sh.mu.RUnlock()
	if mc != nil || (!create && m.cl == nil) {
		return mc
	}
	var st *chanState
	if m.cl != nil {
		// A manager that does not know a channel may have taken it over:
		// its state is rebuilt from the hosts (soft state), outside the
		// shard lock because it takes network round trips.
		st = m.rebuild(name, create)
		if !create && len(st.list) == 0 {
			return nil
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if mc = sh.m[name]; mc != nil {
		return mc
	}
	if st == nil || len(st.list) == 0 {
		if st == nil {
			st = newChanState(m.now(), m.cfg.Limits(name))
		}
		if epoch, next, ok := m.tombs.take(name); ok {
			st.epoch, st.next = epoch, next
		}
	}
	mc = &mchan{name: name, st: st}
	sh.m[name] = mc
	return mc
}

// rebuild gathers the channel's streamlets from every live node and builds
// the state from them. The newest streamlet stays open if it is: its
// writers continue under their grants, and it is sealed like any other
// when its lease ends or a writer asks for a new grant. Older open ones
// (only a split brain leaves two) are sealed. Nothing is sealed for a
// lookup that does not create (an INFO from a peer with a stale view must
// not cut the real manager's writers off).
//
// A successor recorded after the newest streamlet and hosted nowhere
// (chanState.unfound) may be one its manager is hosting right now (its
// followers first, the node chosen for it last): a node that comes back
// and manages its channels again races the node that managed them
// meanwhile for as long as that node's view lags. Taking it for lost at
// once made the returning manager bar that one id and continue above a
// lost range (readers got GAP lost) while the other went on with
// successors of its own, which nobody barred, and had them acknowledged
// (the N = 2 rolling restart). So a rebuild that finds one waits up to
// successorGrace for it to be hosted at its node and lists again; only a
// successor still missing then is treated as lost (and barred at the
// first grant, openNext).
func (m *Manager) rebuild(name string, create bool) *chanState {
	for try := 0; ; try++ {
		cs := m.rebuildOnce(name, create)
		if !create || cs.unfound == 0 || try == maxSuccessorWaits || !m.awaitHosted(cs.unfoundHost, cs.unfound) {
			return cs
		}
	}
}

// successorGrace is how long a rebuild waits for a recorded successor
// that no node reported to be hosted (rebuild), polling its node every
// successorGrace/10; maxSuccessorWaits bounds the waits of one rebuild
// (each finds the next successor of a manager still opening them).
const (
	successorGrace    = 250 * time.Millisecond
	maxSuccessorWaits = 8
)

// awaitHosted reports whether node hosts streamlet id within
// successorGrace (polling; no lock held).
func (m *Manager) awaitHosted(node string, id uint64) bool {
	h := m.hostOf(node)
	if h == nil {
		return false
	}
	deadline := time.Now().Add(successorGrace) // a grace period, not a decision: wall time
	for {
		if _, ok := h.Len(id); ok {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(successorGrace / 10)
	}
}

// rebuildOnce is one listing and rebuild of rebuild.
func (m *Manager) rebuildOnce(name string, create bool) *chanState {
	quorate := m.cl.Quorate()
	hs := m.cl.ListAll(name)
	quorate = quorate && m.cl.Quorate()
	newest := -1
	for i := range hs {
		if !hs[i].Mark && (newest < 0 || hs[i].First > hs[newest].First) {
			newest = i
		}
	}
	for i := range hs {
		h := &hs[i]
		if h.Mark || h.Sealed || i == newest || !create {
			continue
		}
		host := m.hostOf(h.Host)
		if host == nil {
			h.Lost = true
			continue
		}
		end, err := host.Seal(h.ID, 0, "")
		if err != nil {
			h.Lost = true
			continue
		}
		h.Sealed, h.Len = true, uint32(end-h.First)
	}
	cs := rebuildState(m.now(), m.cfg.Limits(name), hs, m.cl.Skew())
	cs.partial = !quorate
	if create && m.cfg.Log != nil {
		nmarks := 0
		for _, h := range hs {
			if h.Mark {
				nmarks++
			}
		}
		m.cfg.Log.Info("sluice cluster: channel rebuilt from its hosts", "channel", name, "found", len(hs)-nmarks,
			"marks", nmarks, "epoch", cs.epoch, "next", cs.next, "streamlets", len(cs.list), "quorate", quorate)
	}
	return cs
}

// lockLive returns the channel locked, retrying if it was dropped between
// the lookup and the lock.
func (m *Manager) lockLive(name string, create bool) *mchan {
	for {
		mc := m.get(name, create)
		if mc == nil {
			return nil
		}
		mc.lock()
		if !mc.dead && !mc.unmanaged {
			return mc
		}
		stale := !mc.dead
		mc.mu.Unlock()
		if stale {
			m.forget(mc)
		}
	}
}

// snapshot appends the channels of sh to dst, under the shard's read lock
// only (no channel lock is taken under it here).
func (m *Manager) snapshot(sh *shard, dst []*mchan) []*mchan {
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	for _, mc := range sh.m {
		dst = append(dst, mc)
	}
	return dst
}

// lockExisting returns the channel locked if this manager holds it (never
// rebuilding it), nil otherwise.
func (m *Manager) lockExisting(name string) *mchan {
	sh := &m.shards[m.shard(name)]
	sh.mu.RLock()
	mc := sh.m[name]
	sh.mu.RUnlock()
	if mc == nil {
		return nil
	}
	mc.lock()
	if mc.dead || mc.unmanaged {
		mc.mu.Unlock()
		return nil
	}
	return mc
}

// forget drops a channel whose state another manager took over (no
// tombstone, nothing freed, its mark kept); the next lookup rebuilds it.
func (m *Manager) forget(mc *mchan) {
	sh := &m.shards[m.shard(mc.name)]
	sh.mu.Lock()
	mc.lock()
	if !mc.dead {
		mc.dead = true
		sh.m = mapshrink.Delete(sh.m, mc.name, &sh.peak)
		m.keepMark(mc)
	}
	mc.mu.Unlock()
	sh.mu.Unlock()
}

// heldMark is a mark and when it expires (unix ns).
type heldMark struct {
	h     role.Hosted
	until int64
}

// keepMark keeps the mark of mc's state (mc.mu held), if it has one, for
// as long as a streamlet it covers may still be reported by a host: its
// lease, TTL, the clock skew and the orphan reaper's minute
// (engine/retention.go). Of two marks of a channel the newer epoch wins,
// then the larger Reached. Single node: nothing to keep (no rebuilds).
func (m *Manager) keepMark(mc *mchan) {
	if m.cl == nil {
		return
	}
	mk, ok := mc.st.mark()
	if !ok {
		return
	}
	l := mc.st.limits
	until := m.now().Add(l.Life + l.TTL + m.cl.Skew() + time.Minute).UnixNano()
	m.markMu.Lock()
	defer m.markMu.Unlock()
	m.pruneMarks(m.now().UnixNano())
	old, had := m.marks[mc.name]
	if had && old.until > m.now().UnixNano() && (old.h.Epoch > mk.Epoch || (old.h.Epoch == mk.Epoch && old.h.Reached > mk.Reached)) {
		old.until = max(old.until, until)
		m.marks[mc.name] = old
		return
	}
	if !had {
		if len(m.markOrder) >= maxTombs {
			delete(m.marks, m.markOrder[0])
			m.markOrder = m.markOrder[1:]
		}
		m.markOrder = append(m.markOrder, mc.name)
	}
	m.marks[mc.name] = heldMark{h: mk, until: until}
}

// pruneMarks forgets the marks that expired by now, oldest kept first
// (markMu held); an emptied map is replaced, so that it gives its memory
// back.
func (m *Manager) pruneMarks(now int64) {
	pruned := false
	for len(m.markOrder) > 0 {
		name := m.markOrder[0]
		if hm, ok := m.marks[name]; ok {
			if hm.until > now {
				break
			}
			delete(m.marks, name)
		}
		m.markOrder = m.markOrder[1:]
		pruned = true
	}
	if pruned && len(m.marks) == 0 {
		m.marks, m.markOrder = make(map[string]heldMark), nil
	}
}

// Marks returns the mark this node keeps for channel (none, or one), for
// this node's LIST answer. Safe for concurrent use.
func (m *Manager) Marks(channel string) []role.Hosted {
	m.markMu.Lock()
	defer m.markMu.Unlock()
	hm, ok := m.marks[channel]
	if !ok {
		return nil
	}
	if m.now().UnixNano() >= hm.until {
		return nil // expired; its entry goes when replaced or evicted
	}
	hm.h.Host = m.cfg.Node
	return []role.Hosted{hm.h}
}

// WriteGrant returns a write grant for channel's open streamlet, or, when
// there is none, its lease ended or it is after (the streamlet of the
// caller's previous grant, which refused a write), seals it and opens the
// next (openGrant). Only one caller opens a channel's next streamlet at a
// time; the others wait for its outcome. It may wait for hosts on other
// nodes, but holds no lock meanwhile: Info, Interest, Expire and NodeDown
// of the channel, and every call for other channels, go on. Safe for
// concurrent use.
func (m *Manager) WriteGrant(channel string, after uint64) (role.Grant, error) {
	m.grants.Add(1)
	for {
		mc := m.lockLive(channel, true)
		if op := mc.opening; op != nil {
			// Another caller is opening the channel's next streamlet:
			// take its outcome, unless its streamlet is the one that
			// refused this caller (then ask again).
			mc.mu.Unlock()
			<-op.done
			if !op.copy && !op.again && (op.err != nil || op.g.Streamlet != after) {
				return op.g, op.err
			}
			continue
		}
		if m.cl != nil && !m.cl.Quorate() {
			mc.mu.Unlock()
			return role.Grant{}, fmt.Errorf("%w: no write grant for %q", ErrNoQuorum, channel)
		}
		now := m.now().UnixNano()
		cs := mc.st
		cs.lastUse = now
		if ref, ok := cs.open(); ok && ref.ID != after && now < ref.LeaseEnd && !cs.recover[ref.ID] && !cs.partial {
			g := cs.grantFor(channel, ref)
			mc.mu.Unlock()
			return g, nil
		}
		op := &opening{done: make(chan struct{})}
		mc.opening = op
		mc.mu.Unlock()
		return m.openGrant(mc, channel, after, op)
	}
}

// openGrant makes the write grant of a channel whose open streamlet cannot
// take the caller's writes (none, its lease ended, or it refused the
// caller's: after), holding mc.opening = op and not mc.mu: it seals the
// open streamlet and opens the next, each host call with the lock
// released and its outcome recorded under it. Callers that ask meanwhile
// wait for op (WriteGrant).
func (m *Manager) openGrant(mc *mchan, channel string, after uint64, op *opening) (role.Grant, error) {
	g, err := m.openNext(mc, channel, after)
	if errors.Is(err, role.ErrSuccessorTaken) {
		// Another manager continued the channel: this one's list is
		// stale. It is rebuilt from the hosts now, keeping who reads the
		// channel (the gateways registered their interest with this
		// node, and would not hear of the new list otherwise), and the
		// grant is tried once more on the new list.
		m.rebuildInPlace(mc, channel, "another manager continued the channel; rebuilt it")
		g, err = m.openNext(mc, channel, after)
	}
	mc.lock()
	if errors.Is(err, role.ErrSuccessorTaken) {
		mc.unmanaged = true // stale again: the next call rebuilds
		g, err = role.Grant{}, fmt.Errorf("%w: %q: %v", role.ErrChannelMoved, channel, err)
	}
	if errors.Is(err, ErrNotManager) {
		// The majority names another manager: this state is nobody's
		// list. Forgotten; a later call rebuilds it from the hosts.
		mc.unmanaged = true
	}
	for _, node := range op.down {
		mc.st.hostDown(node, m.now().UnixNano())
	}
	mc.opening = nil
	op.g, op.err = g, err
	mc.mu.Unlock()
	close(op.done)
	return g, err
}

// rebuildInPlace replaces mc's state by one rebuilt from the hosts,
// keeping its readers, and tells the reader nodes (mc is opening; mc.mu
// is not held: the hosts are asked without it). why is logged.
func (m *Manager) rebuildInPlace(mc *mchan, channel, why string) {
	st := m.rebuild(channel, true)
	mc.lock()
	old := mc.st
	st.rnodes, st.readers = old.rnodes, old.readers
	if len(st.list) == 0 {
		st.epoch, st.next = max(st.epoch, old.epoch), max(st.next, old.next)
		st.claimOver = old.claimOver
	}
	mc.st = st
	var readers []string
	if len(st.rnodes) > 0 {
		readers = readerNodes(st)
	}
	mc.mu.Unlock()
	if m.cfg.Log != nil {
		m.cfg.Log.Warn("sluice cluster: "+why, "channel", channel, "next", st.next)
	}
	if readers != nil {
		m.cl.Notify(channel, readers)
	}
}

// openNext is one attempt of openGrant (mc is opening; mc.mu is not held).
// The channel's state changes meanwhile only by what does not need the
// opening: Info reads it, Interest counts readers, Expire removes closed
// streamlets at its head, NodeDown marks streamlets lost (and is recorded
// in the opening for the new one); Tick passes it over. So the position
// the next streamlet starts at stays what it was when it was chosen. It
// fails with an error matching role.ErrSuccessorTaken when the channel's
// last streamlet names a successor this manager did not claim.
func (m *Manager) openNext(mc *mchan, channel string, after uint64) (role.Grant, error) {
	if m.cl != nil {
		// What follows may seal, bar or open streamlets: only a manager a
		// majority of the nodes names may (confirm.go). One round to
		// every node per streamlet opened.
		if err := m.confirm(channel); err != nil {
			return role.Grant{}, err
		}
	}
	mc.lock()
	if mc.st.partial {
		// Built while this node saw no majority (lookups may do that): the
		// hosts it could not reach may hold newer streamlets, and other
		// nodes the marks of managers that continued the channel. Rebuilt
		// now, from the majority, before anything is granted on it.
		mc.mu.Unlock()
		m.rebuildInPlace(mc, channel, "a channel state built without quorum; rebuilt it before granting")
		mc.lock()
	}
	now := m.now().UnixNano()
	if ref, ok := mc.st.open(); ok {
		if ref.ID != after && now < ref.LeaseEnd && !mc.st.recover[ref.ID] {
			// After a rebuild: the other manager's open streamlet.
			g := mc.st.grantFor(channel, ref)
			mc.mu.Unlock()
			return g, nil
		}
		// Sealed at its host, or recovered from its replicas
		// (recovery.go); the lock is released across the host calls.
		if err := m.closeRef(mc, ref, now); err != nil {
			mc.mu.Unlock()
			return role.Grant{}, err
		}
	}
	if unfound, unfoundHost := mc.st.unfound, mc.st.unfoundHost; unfound != 0 {
		// The rebuild found a successor recorded and hosted nowhere: its
		// manager died while opening it, or is opening it now (it won the
		// record; a view that disagreed for a moment sent the channel's
		// writers here too). Sealing the id at the node chosen for it
		// bars it there (a host refuses to host an id it was asked to
		// seal before, host.Host.Seal), so that manager cannot continue
		// the channel beside this one; if it is hosted already, the
		// channel is rebuilt with it (ErrSuccessorTaken) and continues
		// after it.
		mc.mu.Unlock()
		if h := m.hostOf(unfoundHost); h != nil {
			if _, err := h.Seal(unfound, 0, ""); err == nil {
				return role.Grant{}, fmt.Errorf("%w: successor %d of %q was hosted meanwhile", role.ErrSuccessorTaken, unfound, channel)
			}
		}
		mc.lock()
		if mc.st.unfound == unfound {
			mc.st.unfound, mc.st.unfoundHost = 0, ""
		}
	}
	var exclude []string
	for tries := 0; tries < 4; tries++ {
		cs := mc.st
		in := replicaInputs(cs)
		prev, hasPrev := cs.last()
		mc.mu.Unlock()
		set, hosts := m.chooseReplicas(channel, in, exclude)
		if len(set) == 0 {
			mc.lock()
			break
		}
		mc.lock()
		id := cs.successorID(prev.ID, m.cfg.NewID)
		mc.mu.Unlock()
		if hasPrev && m.cl != nil && prev.ID != 0 && !prev.Lost {
			// Record the successor before opening it, as a compare-and-
			// set on the predecessor's replicas (DESIGN.md, "Positions are
			// never reused"); some may be gone. The id is claimed until it
			// is opened: a retry (other hosts, or a later grant after this
			// one failed) records the same id, which the hosts accept again.
			for _, node := range prev.Set() {
				if ph := m.hostOf(node); ph != nil {
					if _, err := ph.Seal(prev.ID, id, set[0]); errors.Is(err, role.ErrSuccessorTaken) {
						return role.Grant{}, err
					}
				}
			}
			mc.lock()
			cs.claim(prev.ID, id)
			mc.mu.Unlock()
		} else if m.cl != nil && !hasPrev {
			// A first streamlet: nothing before it records a successor, so
			// a majority of the nodes must hold its claim first (claimFirst).
			if err := m.claimFirst(mc, channel, id, set[0]); err != nil {
				return role.Grant{}, err
			}
		}
		mc.lock()
		// The write lease starts now, after the round trips that sealed
		// the predecessor and recorded this successor on its replicas:
		// counted from before them, a lease shorter than those round
		// trips (a loaded node, a slow peer) ended before its grant
		// reached the writer, whose next grant then fared the same.
		leaseFrom := m.now().UnixNano()
		ref := cs.nextRef(id, set, leaseFrom)
		g := cs.grantFor(channel, ref)
		hg := g
		if m.cl != nil {
			// Each replica completes the channel's dedup window from the
			// earlier streamlets (on a single node the host has them all
			// and rebuilds at the first id).
			hg.Prior = cs.prior(leaseFrom, m.cfg.DedupWindow)
		}
		mc.mu.Unlock()
		// The followers first, the orderer last: once the orderer hosts
		// it, every replica it forwards to exists.
		failed := ""
		for i := len(hosts) - 1; i >= 0; i-- {
			if err := hosts[i].HostStreamlet(hg); errors.Is(err, role.ErrSuccessorTaken) {
				// Barred: another manager rebuilt the channel and
				// continued it without this streamlet (above).
				return role.Grant{}, err
			} else if err != nil {
				failed = set[i]
				break
			}
		}
		mc.lock()
		if failed != "" {
			exclude = append(exclude, failed)
			continue
		}
		cs.addRef(ref)
		cs.claim(0, 0)
		if m.cfg.Log != nil {
			m.cfg.Log.Debug("sluice: streamlet opened", "channel", channel, "streamlet", id, "hosts", set,
				"first", ref.First, "epoch", cs.epoch, "after_lost", hasPrev && prev.Lost)
		}
		var readers []string
		if m.cl != nil && len(cs.rnodes) > 0 {
			readers = readerNodes(cs)
		}
		mc.mu.Unlock()
		if want := cs.limits.Replicas; m.cl != nil && len(set) < want {
			m.noteDegraded(channel, len(set), want)
		}
		if readers != nil {
			m.cl.Notify(channel, readers)
		}
		return g, nil
	}
	mc.mu.Unlock()
	return role.Grant{}, fmt.Errorf("%w: no node could host a streamlet of %q", role.ErrNoHost, channel)
}

// replicaIn is what chooseReplicas needs of a channel's state, copied
// under its lock.
type replicaIn struct {
	seq      uint64
	load     Load
	replicas int
}

func replicaInputs(cs *chanState) replicaIn {
	return replicaIn{seq: cs.seq, load: Load{cs.msgsPerSec, cs.bytesPerSec, cs.readers}, replicas: cs.limits.Replicas}
}

// chooseReplicas picks the replica set of the channel's next streamlet:
// Limits.Replicas distinct live nodes (fewer when fewer are alive and not
// excluded), each chosen by the load-weighted placement with the ones
// already chosen excluded, so no node holds two replicas of a streamlet;
// the first orders the appends, and no node reported cut from it follows
// (unreachable.go; fewer replicas then, counted as degraded, when no
// other node is left). It returns the nodes and their Host roles.
func (m *Manager) chooseReplicas(channel string, in replicaIn, exclude []string) ([]string, []role.Host) {
	if m.cl == nil {
		return []string{m.cfg.Node}, []role.Host{m.cfg.Host}
	}
	want := max(in.replicas, 1)
	load := in.load
	ex := append([]string(nil), exclude...)
	var set []string
	var hosts []role.Host
	for len(set) < want {
		node, ok := m.cl.Choose(channel, in.seq, load, ex)
		if !ok {
			break
		}
		ex = append(ex, node)
		if h := m.hostOf(node); h != nil {
			if len(set) == 0 {
				// The orderer: no follower it was reported unable to
				// reach (unreachable.go), which would stall the
				// streamlet's acknowledgements again.
				ex = append(ex, m.cut.from(node, m.now().UnixNano())...)
			}
			set, hosts = append(set, node), append(hosts, h)
		}
	}
	return set, hosts
}

// noteDegraded counts a streamlet opened with fewer replicas than its
// channel asks for (fewer live nodes than Limits.Replicas) and logs it, at
// most once per degradedLogEvery.
func (m *Manager) noteDegraded(channel string, have, want int) {
	m.degraded.Add(1)
	now := m.now().UnixNano()
	last := m.degradedLog.Load()
	if now-last >= int64(degradedLogEvery) && m.degradedLog.CompareAndSwap(last, now) && m.cfg.Log != nil {
		m.cfg.Log.Warn("sluice cluster: streamlet opened with fewer replicas than configured (too few live nodes)",
			"channel", channel, "replicas", have, "configured", want, "degraded_total", m.degraded.Load())
	}
}

// degradedLogEvery rate-limits noteDegraded's log line.
const degradedLogEvery = 10 * time.Second

// Degraded reports how many streamlets were opened with fewer replicas
// than configured (metrics).
func (m *Manager) Degraded() int64 { return m.degraded.Load() }

// sealRef closes the open streamlet ref at its host; when the host cannot
// be reached the streamlet is treated as lost with it.
func (m *Manager) sealRef(cs *chanState, ref role.StreamletRef, now int64) {
	end, err := m.sealAt(ref)
	m.recordSeal(cs, ref, end, err, now)
}

// errHostGone: the streamlet's host is not (or no longer) a live node.
var errHostGone = errors.New("manager: host unknown or down")

// sealAt seals ref at its host and returns its end position.
func (m *Manager) sealAt(ref role.StreamletRef) (uint64, error) {
	host := m.hostOf(ref.Host)
	if host == nil {
		return 0, errHostGone
	}
	return host.Seal(ref.ID, 0, "")
}

// recordSeal records the outcome of sealing ref in cs (pure: under the
// channel's lock). A local streamlet that is gone was freed meanwhile and
// kept nothing; a remote one that could not be sealed is lost with its host.
// Closing a streamlet that is not the open one is a no-op.
func (m *Manager) recordSeal(cs *chanState, ref role.StreamletRef, end uint64, err error, now int64) {
	switch {
	case err == nil:
		cs.close(ref.ID, end, now)
	case ref.Host == m.cfg.Node && !errors.Is(err, errHostGone):
		cs.close(ref.ID, ref.First, now)
	default:
		cs.lose(ref.ID, now)
	}
}

func readerNodes(cs *chanState) []string {
	out := make([]string, 0, len(cs.rnodes))
	for n := range cs.rnodes {
		out = append(out, n)
	}
	return out
}

// Info returns the channel's retained streamlets. The open streamlet's
// length is asked of its host after the channel's lock is released (in a
// cluster that is a request to another node).
func (m *Manager) Info(channel string, create bool) (role.ChannelInfo, bool) {
	mc := m.lockLive(channel, create)
	if mc == nil {
		return role.ChannelInfo{}, false
	}
	info := mc.st.info(0)
	ref, open := mc.st.open()
	mc.mu.Unlock()
	if open {
		if host := m.hostOf(ref.Host); host != nil {
			if n, ok := host.Len(ref.ID); ok {
				info.Next = ref.First + uint64(n)
			}
		}
	}
	return info, true
}

func (m *Manager) Interest(channel, node string, delta int) {
	mc := m.lockLive(channel, true)
	mc.st.interest(node, delta)
	mc.st.lastUse = m.now().UnixNano()
	mc.mu.Unlock()
}

func (m *Manager) Expire(channel string, through uint64) (int, error) {
	if m.cl != nil && !m.cl.Managed(channel) {
		// Not this node's channel in its view (the views differ for a
		// moment): expire nothing rather than build a second list; the
		// host asks again at its next sweep.
		return 0, nil
	}
	mc := m.lockLive(channel, false)
	if mc == nil {
		return 0, nil
	}
	refs := mc.st.expireThrough(through, nil)
	var readers []string
	if len(refs) > 0 && m.cl != nil && len(mc.st.rnodes) > 0 {
		readers = readerNodes(mc.st)
	}
	mc.mu.Unlock()
	m.free(refs)
	if readers != nil {
		m.cl.Notify(channel, readers)
	}
	return len(refs), nil
}

// free releases expired streamlets at their hosts (lost ones and holes
// have nothing to free).
func (m *Manager) free(refs []role.StreamletRef) {
	for _, ref := range refs {
		if ref.ID == 0 || ref.Lost {
			continue
		}
		for _, n := range ref.Set() {
			if host := m.hostOf(n); host != nil {
				host.Free(ref.ID)
			}
		}
	}
}

// NodeDown records that node died: streamlets it hosted are lost (their
// open ones closed at the largest end they could have reached), its
// readers are forgotten, and the channels' other reader nodes are told.
func (m *Manager) NodeDown(node string) {
	ns := m.now().UnixNano()
	type note struct {
		channel string
		nodes   []string
	}
	var notes []note
	var mcs []*mchan
	todo := make(map[string][]string)
	for i := range m.shards {
		mcs = m.snapshot(&m.shards[i], mcs[:0])
		for _, mc := range mcs {
			mc.lock()
			if op := mc.opening; op != nil {
				// The streamlet being opened may be on node too.
				op.down = append(op.down, node)
				if mc.st.limits.Replicas > 1 {
					todo[mc.name] = []string{node}
				}
			}
			if !mc.dead && mc.st.hostDown(node, ns) {
				if m.cfg.Log != nil {
					m.cfg.Log.Debug("sluice: streamlets lost with their host", "channel", mc.name, "node", node, "next", mc.st.next)
				}
				if m.cl != nil && len(mc.st.rnodes) > 0 {
					notes = append(notes, note{mc.name, readerNodes(mc.st)})
				}
			}
			if !mc.dead && mc.st.holds(node) {
				todo[mc.name] = []string{node}
			}
			mc.mu.Unlock()
		}
	}
	for _, n := range notes {
		m.cl.Notify(n.channel, n.nodes)
	}
	// The replicated streamlets it held are recovered from their other
	// replicas (recovery.go), with no shard lock held.
	m.recoverAll(todo)
}

// ActionKind says what an Action does.
type ActionKind uint8

const (
	// ActSeal seals the open streamlet Ref, whose lease ended, at its
	// host and records its end (or, when the host cannot be reached, that
	// it is lost with it).
	ActSeal ActionKind = iota + 1
	// ActFree frees the expired streamlet Ref at its host.
	ActFree
	// ActCopy copies the closed streamlet Ref, whose holder drains, to a
	// node chosen by load and makes that node its holder (copy.go).
	ActCopy
	// ActRecover recovers the channel's replicated streamlets that a
	// rebuild found short of a replica (missingReplicas, recovery.go).
	ActRecover
)

// Action is a decision of Tick for Do to carry out: a call to a host, which
// in a cluster is a request to another node.
type Action struct {
	Kind    ActionKind
	Channel string
	Ref     role.StreamletRef
	Epoch   uint64 // the channel's epoch (ActCopy)
}

// Tick runs the streamlet lifecycle at now under the manager's locks,
// without calling another node's host: it drops channels that are empty, unread and
// unused for a TTL (keeping a tombstone so that positions and epoch
// continue if the channel comes back) and the channels another manager took
// over, removes expired streamlets from the lists, seals and frees what
// this node's host holds, and returns what other nodes' hosts must be told:
// seal the open streamlets whose lease ended, free the expired ones. The
// caller passes them to Do, with no lock held.
//
// On a single node Tick passes over, without taking its lock, a channel
// that nothing touched since its last visit and whose next lease end,
// expiry or drop time (chanState.due) is still ahead. In a cluster every
// channel is visited: membership, drains and copies change what is due
// outside the channel's lock.
func (m *Manager) Tick(now time.Time) []Action {
	ns := now.UnixNano()
	m.markMu.Lock()
	m.pruneMarks(ns)
	m.markMu.Unlock()
	var acts []Action
	var expired, copies []role.StreamletRef
	var drop, mcs []*mchan
	slots, waiting := m.copySlots(), 0
	skip := m.cl == nil
	for i := range m.shards {
		sh := &m.shards[i]
		mcs = m.snapshot(sh, mcs[:0])
		drop = drop[:0]
		for _, mc := range mcs {
			if skip {
				if d := mc.due.Load(); d != 0 && ns < d {
					continue // nothing due and untouched since the last visit
				}
			}
			mc.mu.Lock() // not lock(): this visit stores due below
			if mc.dead || mc.opening != nil {
				// Opening: a WriteGrant seals and opens its streamlets
				// now. The next tick looks again.
				mc.mu.Unlock()
				continue
			}
			cs := mc.st
			if mc.unmanaged || (m.cl != nil && !m.cl.Managed(mc.name)) {
				// The membership moved the channel to another manager,
				// which rebuilt it from the hosts: forget it here, free
				// nothing (the streamlets are the new manager's now).
				mc.unmanaged = true
				drop = append(drop, mc)
				mc.mu.Unlock()
				continue
			}
			// This node's host is called at once (memory only, so the
			// list and the host never disagree); another node's is an
			// action for Do.
			ref, ok := cs.leaseOver(ns)
			if o, open := cs.open(); !ok && open && m.cl != nil && drainingReplica(m, o) {
				ref, ok = o, true // a replica is alive but drains: close it now
			}
			switch {
			case len(cs.recover) > 0:
				// A rebuild found streamlets short of a replica: they are
				// recovered first (the open one too, whose lease may have
				// ended: it is sealed at the next tick otherwise), before
				// they are sealed, copied or read to their end; not while
				// the state is partial (a grant rebuilds it first) or the
				// node has no majority (it fences nothing then).
				if !cs.partial && m.cl != nil && m.cl.Quorate() {
					acts = append(acts, Action{Kind: ActRecover, Channel: mc.name})
				}
			case ok && ref.Host == m.cfg.Node && len(ref.Replicas) <= 1:
				m.sealRef(cs, ref, ns)
			case ok:
				acts = append(acts, Action{Kind: ActSeal, Channel: mc.name, Ref: ref})
			}
			expired = cs.expireRefs(ns, expired[:0])
			for _, ref := range expired {
				switch {
				case ref.ID == 0 || ref.Lost:
				case ref.Host == m.cfg.Node && len(ref.Replicas) <= 1:
					m.cfg.Host.Free(ref.ID)
				default:
					acts = append(acts, Action{Kind: ActFree, Channel: mc.name, Ref: ref})
				}
			}
			if m.cl != nil {
				copies = cs.toCopy(m.cl.Usable, m.copyBusy, copies[:0])
				waiting += len(copies)
				for _, ref := range copies {
					if slots == 0 || !m.claimCopy(ref.ID) {
						break
					}
					slots--
					acts = append(acts, Action{Kind: ActCopy, Channel: mc.name, Ref: ref, Epoch: cs.epoch})
				}
			}
			if cs.droppable(ns) {
				drop = append(drop, mc)
			} else if skip {
				mc.due.Store(cs.due())
			}
			mc.mu.Unlock()
		}
		if len(drop) > 0 {
			m.drop(sh, drop, ns)
		}
	}
	m.wantCopy.Store(int64(waiting))
	return acts
}

// Do carries out Tick's actions, in order, holding no lock while a host
// is called; a seal's result is recorded under the channel's lock
// afterwards (unless the channel changed meanwhile: a writer that found
// the lease over sealed it first).
func (m *Manager) Do(acts []Action) {
	for _, a := range acts {
		switch a.Kind {
		case ActCopy:
			if !m.cl.Go(func() { m.copy(a) }) {
				m.releaseCopy(a.Ref.ID) // the pool is full: the next tick tries again
			}
		case ActFree:
			m.free([]role.StreamletRef{a.Ref})
		case ActRecover:
			m.recoverChannel(a.Channel, nil, nil, 0)
		case ActSeal:
			if len(a.Ref.Replicas) > 1 {
				// Sealed by its orderer or recovered, holding the
				// channel's opening (recovery.go).
				m.recoverChannel(a.Channel, nil, nil, a.Ref.ID)
				continue
			}
			end, err := m.sealAt(a.Ref)
			mc := m.lockExisting(a.Channel)
			if mc == nil {
				continue
			}
			m.recordSeal(mc.st, a.Ref, end, err, m.now().UnixNano())
			mc.mu.Unlock()
		}
	}
}

func (m *Manager) drop(sh *shard, cands []*mchan, ns int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, mc := range cands {
		mc.lock()
		if mc.opening != nil {
			mc.mu.Unlock()
			continue // a grant is being opened: not idle
		}
		if !mc.dead && mc.unmanaged {
			mc.dead = true
			sh.peak.Seen(len(sh.m))
			delete(sh.m, mc.name)
			m.keepMark(mc)
		} else if !mc.dead && mc.st.droppable(ns) {
			mc.dead = true
			sh.peak.Seen(len(sh.m))
			delete(sh.m, mc.name)
			m.tombs.bury(mc.name, mc.st.epoch, mc.st.next)
		}
		mc.mu.Unlock()
	}
	sh.m = mapshrink.Shrink(sh.m, &sh.peak)
}

// ForgetAll drops every managed channel without freeing anything (the
// node lost or regained its quorum, package cluster): the next use
// rebuilds each from its hosts.
func (m *Manager) ForgetAll() {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for _, mc := range sh.m {
			mc.lock()
			mc.dead = true
			m.keepMark(mc)
			mc.mu.Unlock()
		}
		sh.m, sh.peak = make(map[string]*mchan), mapshrink.Peak{}
		sh.mu.Unlock()
	}
}

// Channels reports how many channels are managed (for metrics and load).
func (m *Manager) Channels() int {
	n := 0
	for i := range m.shards {
		m.shards[i].mu.RLock()
		n += len(m.shards[i].m)
		m.shards[i].mu.RUnlock()
	}
	return n
}

// Grants reports how many write grants were issued.
func (m *Manager) Grants() int64 { return m.grants.Load() }

var _ role.Manager = (*Manager)(nil)
