package cluster

import (
	"encoding/json"
	"slices"
	"sort"
	"time"

	"github.com/sluice-rtm/sluice/cluster/metalog"
	"github.com/sluice-rtm/sluice/manager"
	"github.com/sluice-rtm/sluice/membership"
	"github.com/sluice-rtm/sluice/placement"
	"github.com/sluice-rtm/sluice/role"
)

// The view: the live members as the membership reports them, each with
// its gossiped metadata (client address, load, drain, its host's
// incarnation and its metadata log's address), the placement snapshots
// built from them, and the members whose link failed lately (down, kept
// out of placement for downFor). What a node is, for the manager:
//   - usable: live, reachable, not draining, and running the incarnation
//     the committed state records for it (a restarted node holds nothing
//     the lists name until NODE_GONE recorded its new incarnation);
//   - gone: what the lists name it holding is gone for good: it is dead or
//     left, or runs another incarnation than the one recorded.

// downFor is how long a node whose link failed is kept out of placement
// unless a link to it is made again.
const downFor = 5 * time.Second

// member is one node as this node sees it.
type member struct {
	Name   string
	Client string
	Cap    float64
	Load   nodeMeta
}

// nodeMeta is the metadata a node gossips: its client address, its load
// report (node-specific load data), its host's incarnation and its
// metadata log's advert. JSON, well under memberlist's 512-byte limit.
type nodeMeta struct {
	Client     string  `json:"a"`
	Cap        float64 `json:"c"`
	Streamlets int     `json:"s"`
	Channels   int     `json:"ch"`
	Conns      int     `json:"cn"`
	MsgsIn     float64 `json:"mi"`
	BytesIn    float64 `json:"bi"`
	// Drain: the node drains (drain.go): placement marks it Draining.
	Drain bool `json:"d,omitempty"`
	// Inst is the node's host incarnation (Config.Instance).
	Inst string `json:"i"`
	// Raft, SID and Boot are its metadata log's advert (metalog.Advert).
	Raft string `json:"r"`
	SID  string `json:"sid"`
	Boot bool   `json:"b,omitempty"`
	// Svc: the node answers the service ops (PROTOCOL.md 9.5, from 32 on:
	// presence); a node that does not say so is never sent them
	// (service.go), since an op it does not know would end the link.
	Svc bool `json:"sv,omitempty"`
}

func (c *Cluster) encodeMeta() []byte {
	c.metaMu.Lock()
	defer c.metaMu.Unlock()
	b, _ := json.Marshal(c.meta)
	return b
}

// run refreshes the view on membership changes and reports load.
func (c *Cluster) run() {
	every := c.opts.ReportInterval
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last := c.now()
	for {
		select {
		case <-c.stop:
			return
		case <-c.changed:
			c.refresh()
		case <-t.C:
			now := c.now()
			c.report(now.Sub(last))
			last = now
			c.refresh()
		}
	}
}

// report updates this node's load report and gossips it.
func (c *Cluster) report(dt time.Duration) {
	ld := c.host.Load()
	in, bytes := ld.Appended, ld.AppendedBytes
	sec := max(dt.Seconds(), 1e-3)
	c.metaMu.Lock()
	c.meta.Streamlets = int(ld.Hosted)
	c.meta.Channels = c.st.Len()
	c.meta.Conns = c.gw.Conns()
	c.meta.MsgsIn = float64(in-c.lastIn) / sec
	c.meta.BytesIn = float64(bytes-c.lastBytes) / sec
	c.metaMu.Unlock()
	c.lastIn, c.lastBytes = in, bytes
	c.gossipMeta()
}

func (c *Cluster) gossipMeta() {
	if ml := c.ml.Load(); ml != nil {
		if err := ml.UpdateMeta(time.Second); err != nil {
			c.log.Debug("sluice cluster: gossiping the node's metadata", "err", err)
		}
	}
}

// refresh rebuilds the view from the membership, gives the metadata log
// its member list, ends the copies fed by members that went, and lets the
// leader reconcile the recorded incarnations.
func (c *Cluster) refresh() {
	ml := c.ml.Load()
	now := c.now()
	seen := make(map[string]member)
	var rm []metalog.Member
	for _, m := range ml.All() {
		var meta nodeMeta
		if m.Local {
			c.metaMu.Lock()
			meta = c.meta
			c.metaMu.Unlock()
		} else if err := json.Unmarshal(m.Meta, &meta); err != nil || meta.Client == "" {
			continue
		}
		live := m.State == membership.Alive || m.State == membership.Suspect
		rm = append(rm, metalog.Member{Name: m.Name, Addr: meta.Raft, ServerID: meta.SID, Bootstrapped: meta.Boot,
			Alive: live, Left: m.State == membership.Left, Draining: meta.Drain})
		if live {
			seen[m.Name] = member{Name: m.Name, Client: meta.Client, Cap: meta.Cap, Load: meta}
		}
	}
	c.mu.Lock()
	var gone []string
	for name := range c.members {
		if _, ok := seen[name]; !ok && name != c.self {
			gone = append(gone, name)
		}
	}
	for name, until := range c.down {
		if until < now.UnixNano() {
			delete(c.down, name)
		}
	}
	c.members = seen
	c.rebuildSnap()
	c.mu.Unlock()
	c.tellService(seen)
	if rl := c.rlog.Load(); rl != nil {
		rl.SetMembers(rm)
	}
	for _, name := range gone {
		c.gw.HostDown(name)
		c.endCopies(name)
	}
	c.gw.SetNodes(c.clientAddrs())
	c.pokeLeader()
}

// rebuildSnap builds the placement snapshots; c.mu is held.
func (c *Cluster) rebuildSnap() {
	var all, others []placement.Node
	for _, m := range c.members {
		if _, down := c.down[m.Name]; down && m.Name != c.self {
			continue
		}
		n := c.placementNode(m)
		all = append(all, n)
		if m.Name != c.self {
			others = append(others, n)
		}
	}
	if s, err := placement.NewSnapshot(all, placement.Options{}); err == nil {
		c.snap = s
	}
	if s, err := placement.NewSnapshot(others, placement.Options{}); err == nil {
		c.others = s
	}
}

// placementNode is member m as placement sees it: capacity, load, and
// whether it drains. c.mu is held (read or write).
func (c *Cluster) placementNode(m member) placement.Node {
	capacity := m.Cap
	if !(capacity > 0) {
		capacity = 1
	}
	n := placement.Node{ID: placement.NodeID(m.Name), Capacity: capacity, Load: placement.NodeLoad{
		Streamlets: max(m.Load.Streamlets, 0), Conns: max(m.Load.Conns, 0),
		MsgsInPerSec: max(m.Load.MsgsIn, 0), BytesInPerSec: max(m.Load.BytesIn, 0)}}
	if m.Load.Drain || (m.Name == c.self && c.draining.Load()) {
		n.State = placement.Draining // hosts nothing new (drain.go)
	}
	return n
}

// clientAddrs lists the client addresses of the live members, this node
// first (for WELCOME).
func (c *Cluster) clientAddrs() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out, rest []string
	if !c.draining.Load() {
		out = []string{c.clientAddr}
	}
	for _, m := range c.members {
		if m.Name != c.self && !m.Load.Drain {
			rest = append(rest, m.Client)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// choose picks a host for the next streamlet of channel by bounded-load
// consistent hashing over the usable nodes, the others first (so that the
// leader's death and a host's are independent failures), all when alone.
func (c *Cluster) choose(channel string, seq uint64, load manager.Load, exclude []string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := placement.ChannelLoad{MsgsPerSec: load.MsgsPerSec, BytesPerSec: load.BytesPerSec, Subscribers: load.Readers}
	ok := func(n string) bool { return !slices.Contains(exclude, n) && c.usableLocked(n) }
	for _, snap := range []*placement.Snapshot{c.others, c.snap} {
		if snap == nil {
			continue
		}
		for k := uint64(0); k < 8; k++ {
			d, found := snap.Host(channel, seq+k<<32, cl)
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

// usable reports whether node may get new streamlets and counts as a
// holder of what the lists name it holding (see the top of this file).
func (c *Cluster) usable(node string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.usableLocked(node)
}

func (c *Cluster) usableLocked(node string) bool {
	inst := c.instance
	if node == c.self {
		if c.draining.Load() {
			return false
		}
	} else {
		m, ok := c.members[node]
		_, down := c.down[node]
		if !ok || down || m.Load.Drain {
			return false
		}
		inst = m.Load.Inst
	}
	rec, ok := c.st.Instance(node)
	return ok && rec == inst
}

// gone reports whether what the lists name node holding is gone for good:
// the membership has counted it dead or departed (not merely suspected)
// for goneAfter, it was never seen, or it runs another incarnation than
// the one recorded.
func (c *Cluster) gone(node string) bool {
	rec, recorded := c.st.Instance(node)
	if node == c.self {
		return recorded && rec != c.instance
	}
	c.mu.RLock()
	m, live := c.members[node]
	c.mu.RUnlock()
	if !live {
		c.noteDead(map[string]bool{}, []string{node})
		return c.deadFor(node) >= c.goneAfter()
	}
	return recorded && rec != m.Load.Inst
}

// hostOf returns node's Host role: this node's host, or a remote one when
// node is a live member not marked down; nil otherwise.
func (c *Cluster) hostOf(node string) role.Host {
	if node == c.self {
		return c.host
	}
	if !c.Reachable(node) {
		return nil
	}
	return remoteHost{c, node}
}

// Reachable reports whether node is a live member this node's links
// reach (not marked down); this node counts.
func (c *Cluster) Reachable(node string) bool {
	if node == c.self {
		return true
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.members[node]
	_, down := c.down[node]
	return ok && !down
}

// Live reports whether node is a live member (alive or suspected by the
// membership, reachable from here or not); this node counts.
func (c *Cluster) Live(node string) bool {
	if node == c.self {
		return true
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.members[node]
	return ok
}

// Alive counts the members in the node's view that are not marked down.
func (c *Cluster) Alive() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for name := range c.members {
		if _, down := c.down[name]; !down {
			n++
		}
	}
	return n
}

// GossipAddr returns the membership's address ("" before Start).
func (c *Cluster) GossipAddr() string {
	if ml := c.ml.Load(); ml != nil {
		return ml.Addr()
	}
	return ""
}

// managerHooks is the cluster as the manager sees it (manager.Cluster).
type managerHooks struct{ c *Cluster }

// Hooks returns the cluster as the manager's Cluster.
func (c *Cluster) Hooks() manager.Cluster { return managerHooks{c} }

func (h managerHooks) HostOf(node string) role.Host { return h.c.hostOf(node) }
func (h managerHooks) Usable(node string) bool      { return h.c.usable(node) }
func (h managerHooks) Gone(node string) bool        { return h.c.gone(node) }
func (h managerHooks) Go(f func()) bool             { return h.c.Go(f) }
func (h managerHooks) Copy(to, ch string, epoch uint64, ref role.StreamletRef) error {
	return h.c.copyTo(to, ch, epoch, ref)
}
func (h managerHooks) Choose(ch string, seq uint64, load manager.Load, exclude []string) (string, bool) {
	return h.c.choose(ch, seq, load, exclude)
}
