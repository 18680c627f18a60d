// Package view is a cluster node's view of the nodes: the live members as
// the membership reports them, each with its gossiped metadata (Meta), the
// members whose link failed lately (marked down), when each member that
// left the live set was first seen out of it, and the placement snapshots
// built from them. It answers the questions the leader's manager, the
// node links and the gateway ask of a node:
//   - Live: a member, alive or suspected by the membership, reachable from
//     here or not;
//   - Reachable: live and not marked down (this node's links reach it);
//   - Usable: reachable, not draining, and running the incarnation the
//     committed state records for it (a restarted node holds nothing the
//     lists name until NODE_GONE recorded its new incarnation): it may get
//     new streamlets and counts as a holder of what the lists name it
//     holding;
//   - Gone: what the lists name it holding is gone for good: it has been
//     out of the live set for GoneAfter, was never seen, or runs another
//     incarnation than the one recorded;
//   - Choose: the host of a channel's next streamlet, by bounded-load
//     consistent hashing (package placement) over the usable nodes.
//
// The view does no I/O and starts no goroutine: the cluster feeds it (Set
// at every membership change, MarkDown when a link fails, Reached when one
// is made) and time comes from Config.Clock, so every decision is tested
// without sockets. A View is safe for concurrent use; its locks are never
// held across a call out of the package but Config.Recorded.
package view

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/placement"
)

// DownFor is how long a node whose link failed is kept out of placement
// (and counts as unreachable) unless a link to it is made again.
const DownFor = 5 * time.Second

// Member is one live member as this node sees it: its name and its
// gossiped metadata.
type Member struct {
	Name string
	Meta Meta
}

// Config is what a View is built from.
type Config struct {
	// Self is this node's name, Instance its host's incarnation.
	Self, Instance string
	// Recorded returns the incarnation the committed state records for
	// node (meta.State.Instance). It is called under the view's lock and
	// must not call the View.
	Recorded func(node string) (instance string, ok bool)
	// Clock is the time of every decision (down marks, dead times).
	Clock func() time.Time
	// GoneAfter is how long a member must have been out of the live set
	// before what it holds counts as gone.
	GoneAfter time.Duration
}

// View is the node's view of the cluster. Safe for concurrent use.
type View struct {
	cfg Config

	// draining is set once this node drains (SetDraining).
	draining atomic.Bool
	// local is this node's own gossiped metadata, under localMu.
	localMu sync.Mutex
	local   Meta

	mu      sync.RWMutex
	members map[string]Member // the live members, self included
	down    map[string]int64  // node -> unix ns until which it is kept out
	// unreach marks the members whose link last failed, until a link to
	// them is made again: the node links dial them again (Unreached).
	unreach map[string]bool
	// snap holds every member not marked down, others the same without
	// this node (for host choices); rebuilt under mu.
	snap, others *placement.Snapshot

	// deadSince is when each member out of the live set was first seen
	// so (unix ns), under deadMu (taken alone).
	deadMu    sync.Mutex
	deadSince map[string]int64
}

// New returns an empty view: no member yet, not even this node.
func New(cfg Config) *View {
	return &View{cfg: cfg, members: make(map[string]Member), down: make(map[string]int64),
		unreach: make(map[string]bool), deadSince: make(map[string]int64)}
}

func (v *View) now() int64 { return v.cfg.Clock().UnixNano() }

// Set replaces the live members (the membership changed, or a load report
// came), forgets the down marks that expired, and returns the names of
// the members that left the live set (this node never).
func (v *View) Set(live []Member) (left []string) {
	now := v.now()
	seen := make(map[string]Member, len(live))
	for _, m := range live {
		seen[m.Name] = m
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for name := range v.members {
		if _, ok := seen[name]; !ok && name != v.cfg.Self {
			left = append(left, name)
		}
	}
	for name, until := range v.down {
		if until < now {
			delete(v.down, name)
		}
	}
	v.members = seen
	v.rebuild()
	sort.Strings(left)
	return left
}

// MarkDown keeps node out of placement for DownFor, or until a link to it
// is made again, and marks it for the links to dial again; false for this
// node, which is never marked. It says nothing of what node holds.
func (v *View) MarkDown(node string) bool {
	if node == v.cfg.Self {
		return false
	}
	until := v.cfg.Clock().Add(DownFor).UnixNano()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.down[node] = until
	v.unreach[node] = true
	v.rebuild()
	return true
}

// Dialable returns the client address of node when a link to it may be
// dialed: a live member not marked down (with force, marked down or not:
// the mark keeps a node out of placement, not out of reach).
func (v *View) Dialable(node string, force bool) (addr string, ok bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	m, live := v.members[node]
	_, down := v.down[node]
	if !live || (down && !force) {
		return "", false
	}
	return m.Meta.Client, true
}

// Reached records that a link to node was made: it no longer needs to be
// dialed again, and with force (a dial made while it was marked down) its
// down mark ends.
func (v *View) Reached(node string, force bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.unreach, node)
	if _, down := v.down[node]; down && force {
		delete(v.down, node)
		v.rebuild()
	}
}

// Unreached returns the live members, other than this node, whose link
// last failed and that no link reached since.
func (v *View) Unreached() []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []string
	for name := range v.members {
		if name != v.cfg.Self && v.unreach[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// SetDraining marks this node draining: it is no longer usable, nor
// listed first in ClientAddrs, and the next snapshot (Set) marks it
// Draining; its gossip follows. It reports whether it was draining
// already.
func (v *View) SetDraining() (already bool) { return v.draining.Swap(true) }

// Draining reports whether this node drains.
func (v *View) Draining() bool { return v.draining.Load() }

// rebuild builds the placement snapshots; v.mu is held.
func (v *View) rebuild() {
	var all, others []placement.Node
	for _, m := range v.members {
		if _, down := v.down[m.Name]; down && m.Name != v.cfg.Self {
			continue
		}
		n := v.placementNode(m)
		all = append(all, n)
		if m.Name != v.cfg.Self {
			others = append(others, n)
		}
	}
	if s, err := placement.NewSnapshot(all, placement.Options{}); err == nil {
		v.snap = s
	}
	if s, err := placement.NewSnapshot(others, placement.Options{}); err == nil {
		v.others = s
	}
}

// placementNode is member m as placement sees it: capacity, load, and
// whether it drains. v.mu is held (read or write).
func (v *View) placementNode(m Member) placement.Node {
	capacity := m.Meta.Cap
	if !(capacity > 0) {
		capacity = 1
	}
	ld := m.Meta
	n := placement.Node{ID: placement.NodeID(m.Name), Capacity: capacity, Load: placement.NodeLoad{
		Streamlets: max(ld.Streamlets, 0), Conns: max(ld.Conns, 0),
		MsgsInPerSec: max(ld.MsgsIn, 0), BytesInPerSec: max(ld.BytesIn, 0)}}
	if ld.Drain || (m.Name == v.cfg.Self && v.draining.Load()) {
		n.State = placement.Draining // hosts nothing new
	}
	return n
}

// ClientAddrs lists the client addresses of the live members that do not
// drain, this node's (self) first unless it drains, the others sorted
// (for WELCOME).
func (v *View) ClientAddrs(self string) []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out, rest []string
	if !v.draining.Load() {
		out = []string{self}
	}
	for _, m := range v.members {
		if m.Name != v.cfg.Self && !m.Meta.Drain {
			rest = append(rest, m.Meta.Client)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// Choose picks a host for streamlet seq of channel by bounded-load
// consistent hashing over the usable nodes not in exclude: the others
// first (so that the leader's death and a host's are independent
// failures), this node when it is the only one left. false: none is
// usable. A choice counts in the snapshot's loads until the next rebuild.
func (v *View) Choose(channel string, seq uint64, load placement.ChannelLoad, exclude []string) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	ok := func(n string) bool { return !slices.Contains(exclude, n) && v.usableLocked(n) }
	for _, snap := range []*placement.Snapshot{v.others, v.snap} {
		if snap == nil {
			continue
		}
		for k := uint64(0); k < 8; k++ {
			d, found := snap.Host(channel, seq+k<<32, load)
			if !found {
				break
			}
			if ok(string(d.Node)) {
				snap.Commit(d)
				return string(d.Node), true
			}
		}
		for i := 0; i < snap.Len(); i++ {
			n, _ := snap.Node(i)
			if n.State == placement.Alive && ok(string(n.ID)) {
				return string(n.ID), true
			}
		}
	}
	return "", false
}

// Usable reports whether node may get new streamlets and counts as a
// holder of what the lists name it holding (see the package comment).
func (v *View) Usable(node string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.usableLocked(node)
}

func (v *View) usableLocked(node string) bool {
	inst := v.cfg.Instance
	if node == v.cfg.Self {
		if v.draining.Load() {
			return false
		}
	} else {
		m, ok := v.members[node]
		_, down := v.down[node]
		if !ok || down || m.Meta.Drain {
			return false
		}
		inst = m.Meta.Inst
	}
	rec, ok := v.cfg.Recorded(node)
	return ok && rec == inst
}

// Gone reports whether what the lists name node holding is gone for good:
// it has been out of the live set (dead or departed, not merely
// suspected) for GoneAfter, was never seen, or runs another incarnation
// than the one recorded.
func (v *View) Gone(node string) bool {
	rec, recorded := v.cfg.Recorded(node)
	if node == v.cfg.Self {
		return recorded && rec != v.cfg.Instance
	}
	v.mu.RLock()
	m, live := v.members[node]
	v.mu.RUnlock()
	if !live {
		v.NoteDead(nil, []string{node})
		return v.DeadFor(node) >= v.cfg.GoneAfter
	}
	return recorded && rec != m.Meta.Inst
}

// Reachable reports whether node is a live member this node's links reach
// (not marked down); this node counts.
func (v *View) Reachable(node string) bool {
	if node == v.cfg.Self {
		return true
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	_, ok := v.members[node]
	_, down := v.down[node]
	return ok && !down
}

// Live reports whether node is a live member (alive or suspected by the
// membership, reachable from here or not); this node counts.
func (v *View) Live(node string) bool {
	if node == v.cfg.Self {
		return true
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	_, ok := v.members[node]
	return ok
}

// Alive counts the live members not marked down.
func (v *View) Alive() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	n := 0
	for name := range v.members {
		if _, down := v.down[name]; !down {
			n++
		}
	}
	return n
}

// UsableOthers counts the live members other than this node that are not
// marked down and do not drain: the nodes a draining node's streamlets
// can go to.
func (v *View) UsableOthers() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	n := 0
	for name, m := range v.members {
		if _, down := v.down[name]; name != v.cfg.Self && !down && !m.Meta.Drain {
			n++
		}
	}
	return n
}

// Incarnations returns the incarnation each live member gossips ("" =
// none yet), this node's included.
func (v *View) Incarnations() map[string]string {
	v.mu.RLock()
	live := make(map[string]string, len(v.members)+1)
	for name, m := range v.members {
		live[name] = m.Meta.Inst
	}
	v.mu.RUnlock()
	live[v.cfg.Self] = v.cfg.Instance
	return live
}

// NoteDead records when the members of known that are not in live were
// first seen out of the live set, and forgets the dead times of those back
// in it.
func (v *View) NoteDead(live map[string]bool, known []string) {
	now := v.now()
	v.deadMu.Lock()
	defer v.deadMu.Unlock()
	for name := range v.deadSince {
		if live[name] {
			delete(v.deadSince, name)
		}
	}
	for _, name := range known {
		if _, seen := v.deadSince[name]; !live[name] && !seen {
			v.deadSince[name] = now
		}
	}
}

// DeadFor reports how long node has been out of the live set as noted
// (NoteDead, Gone); 0 while live or never noted dead.
func (v *View) DeadFor(node string) time.Duration {
	v.deadMu.Lock()
	defer v.deadMu.Unlock()
	since, ok := v.deadSince[node]
	if !ok {
		return 0
	}
	return time.Duration(v.now() - since)
}

// Marks returns the members marked down and the load placement counts for
// each member not marked down (for a status report).
func (v *View) Marks() (down map[string]bool, loads map[string]float64) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	down = make(map[string]bool, len(v.down))
	for n := range v.down {
		down[n] = true
	}
	loads = make(map[string]float64)
	if v.snap != nil { // Choose changes loads under v.mu
		for i := 0; i < v.snap.Len(); i++ {
			n, l := v.snap.Node(i)
			loads[string(n.ID)] = l
		}
	}
	return down, loads
}
