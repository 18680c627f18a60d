// Package cluster makes a node one member of a Sluice cluster: the
// membership view and load gossip (over package membership), the
// placement adapter (package placement: who manages a channel, who hosts
// its next streamlet), the links to other nodes and the node-to-node
// operations over them (PROTOCOL.md 9; nodeops.go encodes and decodes each
// op's body in one place), the router that sends a manager call to the
// channel's manager node, the remote Host, and the node's Status.
//
// It is the only package that knows node links exist: it owns both sides
// of every node connection, the handshake, the record layer and the
// meaning of every node frame (link.go outbound, accept.go inbound,
// nodeconn.go what they share). It never touches gnet: the engine's event
// loops carry the connections' bytes through the Transport, Conn and
// NodeConn interfaces, and the engine's gateway is reached through the
// Gateway interface.
package cluster

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/internal/owned"
	"github.com/sluice-rtm/sluice/manager"
	"github.com/sluice-rtm/sluice/membership"
	"github.com/sluice-rtm/sluice/placement"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// Options makes a server one node of a cluster. The node's name must be
// unique in the cluster; every node must run with the same streamlet
// limits and the same cluster secret.
type Options struct {
	// Listen is the gossip address (TCP and UDP) for membership.
	Listen string
	// Advertise is the gossip address other nodes use ("" = Listen's).
	Advertise string
	// ClientAdvertise is the client address other nodes and clients use
	// for this node ("" = Server.Addr()).
	ClientAdvertise string
	// Join lists seed gossip addresses of existing members.
	Join []string
	// Secret authenticates nodes to each other and encrypts gossip. Empty
	// means the network is trusted; it is required when Options.Auth is
	// set, since node connections bypass client permissions.
	Secret string
	// Capacity is the node's relative size for placement (0 = its CPUs).
	Capacity float64
	// RPCTimeout bounds one node-to-node request (0 = 2 s); a peer that
	// does not answer in time is treated as failed.
	RPCTimeout time.Duration
	// ClockSkew is the largest clock difference assumed between nodes
	// (0 = 1 s); a manager that rebuilds a channel with an uncertain end
	// starts above the clock base of now+ClockSkew.
	ClockSkew time.Duration
	// ReportInterval is how often the node gossips its load (0 = 1 s).
	ReportInterval time.Duration
	// S2 turns on the S2 compression of the node links this node sends
	// on: a NODE_APPEND or NODE_FEED batch of at least 512 record bytes is
	// then sent as one S2 block when that saves at least an eighth
	// (PROTOCOL.md 2.15). Every node accepts compressed batches either way.
	// Off by default: on a LAN the CPU it costs outweighs the bytes it
	// saves (BENCHMARKS.md); turn it on for links between regions or
	// metered ones.
	S2 bool
}

// downFor is how long a node whose link failed is kept out of placement
// and routing unless membership reports it again.
const downFor = 5 * time.Second

// member is one node as this node sees it.
type member struct {
	Name   string  `json:"name"`
	Client string  `json:"client"`
	Cap    float64 `json:"cap"`
	Load   nodeMeta
}

// nodeMeta is the metadata a node gossips: its client address and its
// load report (node-specific load data). JSON, well under memberlist's
// 512-byte limit.
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
}

// Gateway is what the cluster needs from this node's gateway (package
// engine). Its methods must not block.
type Gateway interface {
	// Changed: the channel's streamlet list changed (a new or lost
	// streamlet); the gateway's readers look it up again.
	Changed(channel string)
	// HostDown: node failed; the gateway's copies it fed end where they are.
	HostDown(node string)
	// Copy returns this node's copy of the remote streamlet id (nil if
	// there is none), which a NODE_FEED on a link fills (on the link's
	// loop).
	Copy(id uint64) *host.Streamlet
	// Wake wakes the local readers of channel: a copy of one of its
	// streamlets was filled.
	Wake(channel string)
	// SetNodes replaces the client addresses advertised in WELCOME.
	SetNodes(addrs []string)
	// Conns reports the node's open connections (load report).
	Conns() int
	// CutOff: the node lost the majority of its cluster (quorum.go); the
	// gateway sends its clients elsewhere.
	CutOff()
}

// Config is what a Cluster is built from.
type Config struct {
	Options Options
	// Self is this node's name (the server's name).
	Self    string
	Manager *manager.Manager
	Host    *host.Host
	Gateway Gateway
	// Transport enrolls dialed links in the engine's event loops.
	Transport Transport
	// Conns are the limits of node connections.
	Conns ConnOptions
	Log   *slog.Logger
	Clock func() time.Time
	// Limits returns a channel's streamlet limits (sizing the copies this
	// node adopts, drain.go).
	Limits func(channel string) role.Limits
	// Service answers the node operations of services (presence) and
	// learns the live members (service.go); nil: none.
	Service Service
	// Cut is fault injection for tests (nil in production): while it
	// reports true for a peer, nothing this node sends to it arrives,
	// as when a firewall drops this node's packets to it: dials fail and
	// what the node connections to it carry out is dropped (its links
	// then fall silent and end by the heartbeat; what the peer sends
	// still arrives). Any goroutine; must not block.
	Cut func(peer string) bool
}

// Cluster is the node's cluster layer: membership and load gossip, the
// placement view, links to peers, and the routing of manager and host
// calls to the node that plays the role. Safe for concurrent use; mu
// guards the view and the links and is never held across network I/O.
type Cluster struct {
	cfg  Config
	self string
	opts Options
	// appendSent and appendRaw count NODE_APPEND bytes as sent and as they
	// would be uncompressed (Append).
	appendSent, appendRaw atomic.Uint64
	// feedRaw and feedSent count NODE_FEED bytes as they would be
	// uncompressed and as sent (acceptConn's feeds).
	feedRaw, feedSent atomic.Uint64
	mgr               *manager.Manager
	host              *host.Host
	gw                Gateway
	log               *slog.Logger
	clientAddr        string
	// ml is set once membership started; the loops serve peers (status)
	// before that.
	ml atomic.Pointer[membership.Node]

	mu      sync.RWMutex
	members map[string]member // alive members, self included
	down    map[string]int64  // node -> unix ns until which it is kept out
	snap    *placement.Snapshot
	others  *placement.Snapshot // without this node, for host choices
	links   map[string]*Link
	dialing map[string]*dial // dials in progress, by node

	meta    nodeMeta // guarded by metaMu
	metaMu  sync.Mutex
	changed chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup // run, the interest worker, markDown's handlers
	jobs    chan func()    // the pool's queue (pool.go)
	poolWG  sync.WaitGroup
	stopped bool // Shutdown or Halt ran; guarded by mu

	lastIn, lastBytes uint64

	linkFailures atomic.Int64 // links that ended other than by shutdown

	// owned counts the cluster's goroutines that have not ended
	// (internal/owned): 0 once Shutdown or Halt returned.
	owned owned.Count

	// snd holds the senders of the streamlets this node orders
	// (replicate.go); replSent and replHeld count forwarded records.
	snd                senders
	replSent, replHeld atomic.Uint64

	// imu guards iq, iBusy and interest (Interest): this node's reading
	// loops per channel as registered with the channel's manager.
	imu      sync.Mutex
	iq       []interestReq
	iwake    chan struct{} // the interest worker has work
	interest map[string]*interestReg
	// known is every member seen alive lately (quorum.go), guarded by
	// mu; noQuorum is set while the node sees no majority of them.
	known    map[string]int64
	noQuorum atomic.Bool
	// noQuorumSince is when the quorum was lost (unix ns, the clock; 0
	// with quorum); away is set once the clients were sent away.
	noQuorumSince atomic.Int64
	away          atomic.Bool
	// unreach marks the members whose link last failed, until a link to
	// them is made again (guarded by mu): they do not count towards the
	// quorum even while the membership sees them alive (a one-way
	// partition: their gossip arrives, nothing else gets through).
	unreach map[string]bool
	// lastBeat is when the heartbeat last ran (its goroutine only);
	// redialing is set while redial's dialer runs.
	lastBeat  int64
	redialing atomic.Bool
	// draining is set by StartDrain; drainReq is signalled by OP_DRAIN
	// (drain.go); copyTable holds the copies being made here.
	draining atomic.Bool
	drainReq chan struct{}
	// drainSafe: channels DrainLeft found safe (its caller's only).
	drainSafe map[string]bool
	copyTable
}

// interestReg is the interest of this node's loops in one channel: how
// many read it and the manager they were registered with.
type interestReg struct {
	loops int
	mgr   string
}

func (c *Cluster) now() time.Time { return c.cfg.Clock() }

// cut reports whether Config.Cut cuts this node off from peer.
func (c *Cluster) cut(peer string) bool { return c.cfg.Cut != nil && c.cfg.Cut(peer) }

func (c *Cluster) rpcTimeout() time.Duration {
	if c.opts.RPCTimeout > 0 {
		return c.opts.RPCTimeout
	}
	return 2 * time.Second
}

func (c *Cluster) skew() time.Duration {
	if c.opts.ClockSkew > 0 {
		return c.opts.ClockSkew
	}
	return time.Second
}

// New sets up the cluster layer before the event loops start; Start then
// joins the membership. It connects the manager to the cluster.
func New(cfg Config) *Cluster {
	o := cfg.Options
	if o.Capacity <= 0 {
		o.Capacity = float64(runtime.NumCPU())
	}
	c := &Cluster{cfg: cfg, self: cfg.Self, opts: o, mgr: cfg.Manager, host: cfg.Host, gw: cfg.Gateway, log: cfg.Log,
		members: make(map[string]member), down: make(map[string]int64), links: make(map[string]*Link),
		dialing: make(map[string]*dial), changed: make(chan struct{}, 1), stop: make(chan struct{}),
		interest: make(map[string]*interestReg), iwake: make(chan struct{}, 1),
		known: make(map[string]int64), unreach: make(map[string]bool), drainReq: make(chan struct{}, 1),
		copyTable: copyTable{copies: make(map[uint64]*pendingCopy)}}
	cfg.Manager.SetCluster(managerHooks{c})
	if c.host != nil {
		c.host.SetIDSource(idSource{c}, c.rpcTimeout())
		c.host.SetReplicationHooks(c.startSenders, func(s *host.Streamlet) { c.gw.Wake(s.Channel()) })
	}
	c.startPool()
	c.wg.Add(1)
	c.owned.Go(c.interestWorker, c.wg.Done)
	return c
}

// Start joins the cluster; clientAddr is the node's client address (the
// server's listener is up), unless Options.ClientAdvertise names another.
func (c *Cluster) Start(clientAddr string) error {
	o := c.opts
	c.clientAddr = o.ClientAdvertise
	if c.clientAddr == "" {
		c.clientAddr = clientAddr
	}
	c.meta = nodeMeta{Client: c.clientAddr, Cap: o.Capacity}
	ml, err := membership.Start(membership.Config{
		Name: c.self, BindAddr: o.Listen, AdvertiseAddr: o.Advertise, Join: o.Join,
		Secret: []byte(o.Secret), Meta: c.encodeMeta,
		OnChange: func(membership.Event) { c.poke() },
		Logger:   c.log,
	})
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	c.ml.Store(ml)
	c.refresh()
	c.wg.Add(2)
	c.owned.Go(c.run, c.wg.Done)
	c.owned.Go(c.heartbeats, c.wg.Done)
	c.log.Info("sluice cluster node", "node", c.self, "gossip", ml.Addr(), "client", c.clientAddr)
	return nil
}

func (c *Cluster) poke() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
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
	c.meta.Channels = c.mgr.Channels()
	c.meta.Conns = c.gw.Conns()
	c.meta.MsgsIn = float64(in-c.lastIn) / sec
	c.meta.BytesIn = float64(bytes-c.lastBytes) / sec
	c.metaMu.Unlock()
	c.lastIn, c.lastBytes = in, bytes
	if err := c.ml.Load().UpdateMeta(time.Second); err != nil {
		c.log.Debug("sluice cluster: gossiping the load report", "err", err)
	}
}

// refresh rebuilds the view from membership: members that left are
// handled as failed, and the placement snapshots are rebuilt with the
// gossiped loads.
func (c *Cluster) refresh() {
	now := c.now().UnixNano()
	seen := make(map[string]member)
	var alive, left []string
	for _, m := range c.ml.Load().All() {
		switch m.State {
		case membership.Alive:
			alive = append(alive, m.Name)
		case membership.Left:
			left = append(left, m.Name)
		}
	}
	for _, m := range c.ml.Load().Members() {
		if m.State != membership.Alive {
			continue
		}
		var meta nodeMeta
		if m.Local {
			c.metaMu.Lock()
			meta = c.meta
			c.metaMu.Unlock()
		} else if err := json.Unmarshal(m.Meta, &meta); err != nil || meta.Client == "" {
			continue
		}
		seen[m.Name] = member{Name: m.Name, Client: meta.Client, Cap: meta.Cap, Load: meta}
	}
	c.mu.Lock()
	var gone []string
	for name := range c.members {
		if _, ok := seen[name]; !ok && name != c.self {
			gone = append(gone, name)
		}
	}
	for name, until := range c.down {
		if until < now {
			delete(c.down, name)
		}
	}
	c.members = seen
	c.rebuildSnap()
	forget := time.Duration(1<<63 - 1) // a node without quorum cannot tell who is gone
	if c.quorumLocked() {
		forget = forgetMember
	}
	updateKnown(c.known, alive, left, now, forget)
	quorum := c.quorumLocked()
	c.mu.Unlock()
	c.setQuorum(quorum)
	for _, name := range gone {
		c.nodeGone(name)
	}
	c.gw.SetNodes(c.clientAddrs())
	c.tellService(seen)
	c.reinterest()
}

// Interest registers delta reading loops of this node for channel with the
// channel's manager, off the caller's goroutine and in call order (one
// worker, so a +1 never overtakes the -1 before it).
func (c *Cluster) Interest(channel string, delta int) {
	c.imu.Lock()
	c.iq = append(c.iq, interestReq{channel, delta})
	c.imu.Unlock()
	select {
	case c.iwake <- struct{}{}:
	default:
	}
}

type interestReq struct {
	channel string
	delta   int
}

// interestWorker sends the queued interest in order (one goroutine, owned
// by the Cluster, until Shutdown).
func (c *Cluster) interestWorker() {
	for {
		c.imu.Lock()
		if len(c.iq) == 0 {
			c.imu.Unlock()
			select {
			case <-c.stop:
				return
			case <-c.iwake:
			}
			continue
		}
		r := c.iq[0]
		c.iq = c.iq[1:]
		mgr, _ := c.managerOf(r.channel)
		reg := c.interest[r.channel]
		if reg == nil {
			reg = &interestReg{}
			c.interest[r.channel] = reg
		}
		reg.loops += r.delta
		reg.mgr = mgr
		if reg.loops <= 0 {
			delete(c.interest, r.channel)
		}
		c.imu.Unlock()
		c.route().Interest(r.channel, c.self, r.delta)
		if r.delta > 0 {
			// A streamlet opened before the manager knew this node reads
			// the channel was not announced to it: look again once.
			c.gw.Changed(r.channel)
		}
	}
}

// reinterest registers this node's readers with the new manager of every
// channel whose manager changed in the view (the new manager rebuilt the
// channel without them), and wakes the readers to look again.
func (c *Cluster) reinterest() {
	type item struct {
		name string
		k    int
	}
	var todo []item
	c.imu.Lock()
	for name, reg := range c.interest {
		if m, _ := c.managerOf(name); m != reg.mgr {
			reg.mgr = m
			todo = append(todo, item{name, reg.loops})
		}
	}
	c.imu.Unlock()
	for _, it := range todo {
		c.route().Interest(it.name, c.self, it.k)
		c.gw.Changed(it.name)
	}
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
		n.State = placement.Draining // neither host nor manager (drain.go)
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

// managerOf returns the node managing channel in this node's view.
func (c *Cluster) managerOf(channel string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.snap == nil {
		return c.self, true
	}
	id, ok := c.snap.Manager(channel)
	return string(id), ok
}

func (c *Cluster) managed(channel string) bool {
	m, ok := c.managerOf(channel)
	return !ok || m == c.self
}

// choose picks a host for the next streamlet of channel: by bounded-load
// consistent hashing over the other nodes (so that a manager's death and a
// host's are independent failures), or over all when alone.
func (c *Cluster) choose(channel string, seq uint64, load manager.Load, exclude []string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := placement.ChannelLoad{MsgsPerSec: load.MsgsPerSec, BytesPerSec: load.BytesPerSec, Subscribers: load.Readers}
	for _, snap := range []*placement.Snapshot{c.others, c.snap} {
		if snap == nil {
			continue
		}
		for k := uint64(0); k < 8; k++ {
			d, ok := snap.Host(channel, seq+k<<32, cl)
			if !ok {
				break
			}
			if !contains(exclude, string(d.Node)) {
				snap.Commit(d)
				return string(d.Node), true
			}
		}
		for i := 0; i < snap.Len(); i++ {
			n, _ := snap.Node(i)
			if n.State == placement.Alive && !contains(exclude, string(n.ID)) {
				return string(n.ID), true
			}
		}
	}
	return "", false
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }

// link returns an open link to node, dialing it when needed; nil when the
// node is unknown, down or cannot be reached.
func (c *Cluster) link(node string) *Link { return c.linkTo(node, false) }

// linkTo is link; with force it dials even while node is marked down
// (redial: the mark keeps a node out of routing and placement, not out of
// reach), a link made clears the mark, and a failure changes nothing.
// A link made to a node that was unreachable makes it count for the
// quorum again at once.
func (c *Cluster) linkTo(node string, force bool) *Link {
	c.mu.Lock()
	if l := c.links[node]; l != nil && !l.closed() {
		c.mu.Unlock()
		return l
	}
	m, ok := c.members[node]
	_, down := c.down[node]
	if !ok || (down && !force) {
		c.mu.Unlock()
		return nil
	}
	if d := c.dialing[node]; d != nil {
		// Another goroutine dials the node: wait for its outcome, with no
		// lock held.
		c.mu.Unlock()
		<-d.done
		return d.l
	}
	d := &dial{done: make(chan struct{})}
	c.dialing[node] = d
	c.mu.Unlock()
	l, err := c.dialLink(node, m.Client, c.rpcTimeout())
	c.mu.Lock()
	delete(c.dialing, node)
	wasUnreach := false
	if err == nil {
		c.links[node] = l
		wasUnreach = c.unreach[node]
		delete(c.unreach, node)
		if _, down := c.down[node]; down && force {
			delete(c.down, node)
			c.rebuildSnap()
		}
	}
	c.mu.Unlock()
	d.l = l // nil on failure; read by the waiters after done is closed
	close(d.done)
	if err != nil {
		if !force {
			c.log.Warn("sluice cluster: peer unreachable", "node", node, "err", err)
			c.markDown(node)
		}
		return nil
	}
	if wasUnreach {
		c.log.Info("sluice cluster: peer reachable again", "node", node)
		c.poke() // the quorum may be back
	}
	return l
}

// dial is a dial in progress (Cluster.dialing): the goroutines that need
// the same node's link wait on done instead of dialing again.
type dial struct {
	done chan struct{}
	l    *Link
}

// existingLink returns the open link to node without dialing (for the
// loops, which never wait for the network); nil if there is none.
func (c *Cluster) existingLink(node string) *Link {
	c.mu.RLock()
	l := c.links[node]
	c.mu.RUnlock()
	if l == nil || l.closed() {
		return nil
	}
	return l
}

// call sends op to node and waits for the answer. A link failure marks
// the node down.
func (c *Cluster) call(node string, op wire.NodeOp, body []byte) ([]byte, error) {
	l := c.link(node)
	if l == nil {
		return nil, fmt.Errorf("%w: %s unreachable", ErrLinkDown, node)
	}
	return l.call(op, body)
}

// linkClosed is called once per link when it ends.
func (c *Cluster) linkClosed(l *Link, err error) {
	c.mu.Lock()
	if c.links[l.node] == l {
		delete(c.links, l.node)
	}
	c.mu.Unlock()
	select {
	case <-c.stop:
		return // shutting down
	default:
	}
	c.linkFailures.Add(1)
	c.log.Warn("sluice cluster: link closed", "node", l.node, "err", err)
	c.markDown(l.node)
}

// markDown keeps node out of routing and placement for downFor and
// handles it as failed: its streamlets are lost to the channels this node
// manages, and the copies this node reads from it end where they are.
func (c *Cluster) markDown(node string) {
	if node == c.self {
		return
	}
	c.mu.Lock()
	until, already := c.down[node]
	already = already && until > c.now().UnixNano()
	c.down[node] = c.now().Add(downFor).UnixNano()
	c.unreach[node] = true
	c.rebuildSnap()
	c.mu.Unlock()
	c.poke() // the quorum may be gone
	if !already {
		// Asynchronously: markDown runs inside failed calls, some made
		// under a channel's lock that nodeGone takes. A goroutine of its
		// own, not a pooled one: a node's failure must never be dropped.
		c.mu.Lock()
		stopped := c.stopped
		if !stopped {
			c.wg.Add(1)
		}
		c.mu.Unlock()
		if !stopped {
			c.owned.Go(func() {
				c.nodeGone(node)
				c.reinterest()
			}, c.wg.Done)
		}
	}
}

// nodeGone applies a node's failure to this node's roles.
func (c *Cluster) nodeGone(node string) {
	c.mgr.NodeDown(node)
	c.gw.HostDown(node)
	c.endCopies(node)
}

// hostOf returns node's Host role.
func (c *Cluster) hostOf(node string) role.Host {
	if node == c.self {
		return c.host
	}
	c.mu.RLock()
	_, ok := c.members[node]
	_, down := c.down[node]
	c.mu.RUnlock()
	if !ok || down {
		return nil
	}
	return remoteHost{c, node}
}

// listAll gathers every live node's streamlets of channel, in parallel.
func (c *Cluster) listAll(channel string) []role.Hosted {
	c.mu.RLock()
	var nodes []string
	for name := range c.members {
		if _, down := c.down[name]; !down {
			nodes = append(nodes, name)
		}
	}
	c.mu.RUnlock()
	var mu sync.Mutex
	var out []role.Hosted
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		c.owned.Go(func() {
			var hs []role.Hosted
			var err error
			if n == c.self {
				hs, err = c.listHere(channel)
			} else {
				hs, err = remoteHost{c, n}.List(channel)
			}
			if err != nil {
				// The node is marked down (a link failure) or answered
				// an error: the rebuild treats its streamlets as lost.
				c.log.Warn("sluice cluster: listing a channel's streamlets failed", "channel", channel, "node", n, "err", err)
			}
			mu.Lock()
			out = append(out, hs...)
			mu.Unlock()
		}, wg.Done)
	}
	wg.Wait()
	return out
}

// listHere is this node's answer to LIST: the streamlets of channel it
// hosts, and the mark its manager kept when it stopped managing the
// channel (manager.Manager.Marks), so that whoever rebuilds the channel
// next learns how far this node's grants may have reached.
func (c *Cluster) listHere(channel string) ([]role.Hosted, error) {
	hs, err := c.host.List(channel)
	return append(hs, c.mgr.Marks(channel)...), err
}

// notify tells reader nodes of channel that it changed.
func (c *Cluster) notify(channel string, nodes []string) {
	var e wire.NodeEnc
	e.Str8(channel)
	for _, n := range nodes {
		if n == c.self {
			c.gw.Changed(channel)
			continue
		}
		if !c.Go(func() {
			if l := c.link(n); l != nil {
				l.post(wire.OpNotify, e.B)
			}
		}) {
			c.log.Warn("sluice cluster: a change notice was dropped (pool full)", "channel", channel, "node", n)
		}
	}
}

// Shutdown leaves the cluster and closes the links.
// Every goroutine the cluster started has ended when it returns.
func (c *Cluster) Shutdown() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	close(c.stop)
	if ml := c.ml.Load(); ml != nil {
		if err := ml.Leave(time.Second); err != nil {
			c.log.Warn("sluice cluster: leaving the membership", "err", err)
		}
		if err := ml.Shutdown(); err != nil {
			c.log.Warn("sluice cluster: stopping the membership", "err", err)
		}
	}
	c.mu.Lock()
	links := c.links
	c.links = map[string]*Link{}
	c.mu.Unlock()
	for _, l := range links {
		l.close(ErrLinkDown, false) // calls in flight fail now
	}
	c.wg.Wait()
	c.poolWG.Wait()
}

// remoteHost is the Host role of a peer node, reached over a link.
type remoteHost struct {
	c    *Cluster
	node string
}

func (h remoteHost) HostStreamlet(g role.Grant) error {
	var e wire.NodeEnc
	encHost(&e, g)
	_, err := h.c.call(h.node, wire.OpHost, e.B)
	return err
}

func (h remoteHost) Seal(id, succ uint64, succHost string) (uint64, error) {
	var e wire.NodeEnc
	e.U64(id)
	e.U64(succ)
	e.Str8(succHost)
	b, err := h.c.call(h.node, wire.OpSeal, e.B)
	if err != nil {
		return 0, err
	}
	d := wire.NewNodeDec(wire.TypeNodeResponse, b)
	end := d.U64()
	return end, d.Done()
}

func (h remoteHost) Free(id uint64) {
	var e wire.NodeEnc
	e.U64(id)
	if l := h.c.link(h.node); l != nil {
		l.post(wire.OpFree, e.B)
	}
}

func (h remoteHost) Len(id uint64) (int, bool) {
	var e wire.NodeEnc
	e.U64(id)
	b, err := h.c.call(h.node, wire.OpLen, e.B)
	if err != nil {
		return 0, false
	}
	d := wire.NewNodeDec(wire.TypeNodeResponse, b)
	found, n := d.U8(), d.U32()
	if d.Done() != nil || found == 0 {
		return 0, false
	}
	return int(n), true
}

func (h remoteHost) List(channel string) ([]role.Hosted, error) {
	var e wire.NodeEnc
	e.Str8(channel)
	b, err := h.c.call(h.node, wire.OpList, e.B)
	if err != nil {
		return nil, err
	}
	return decHosted(b, h.node)
}

var _ role.Host = remoteHost{}

// idSource reads other nodes' message ids for the host's dedup window
// (host.IDSource, op DEDUP_IDS).
type idSource struct{ c *Cluster }

func (s idSource) MessageIDs(node string, streamlets []uint64, from int, since int64, deadline time.Time) (host.IDPage, error) {
	var e wire.NodeEnc
	encIDsRequest(&e, streamlets, from, since)
	l := s.c.link(node)
	if l == nil {
		return host.IDPage{}, fmt.Errorf("%w: %s unreachable", ErrLinkDown, node)
	}
	b, err := l.callFor(wire.OpDedupIDs, e.B, time.Until(deadline))
	if err != nil {
		return host.IDPage{}, err
	}
	return decIDPage(b, len(streamlets))
}

// clusterRouter is the Manager the gateway uses in a cluster: each call
// goes to the channel's manager in this node's view, local or remote; when
// the manager's node fails, the call is retried at the next one.
type clusterRouter struct{ c *Cluster }

// routed runs local on this node or remote(node) on the manager's node.
func (r *clusterRouter) routed(channel string, local func() error, remote func(node string) error) error {
	var err error
	for tries := 0; tries < 3; tries++ {
		node, ok := r.c.managerOf(channel)
		if !ok {
			return fmt.Errorf("%w: no live node manages %q", role.ErrNoHost, channel)
		}
		if node == r.c.self {
			return local()
		}
		if err = remote(node); err == nil || !errors.Is(err, ErrLinkDown) {
			return err
		}
		// The manager's node failed (and is now marked down): the view
		// names another manager, which rebuilds the channel.
	}
	return err
}

func (r *clusterRouter) WriteGrant(channel string, after uint64) (role.Grant, error) {
	var g role.Grant
	err := r.routed(channel, func() (err error) {
		g, err = r.c.mgr.WriteGrant(channel, after)
		return err
	}, func(node string) error {
		var e wire.NodeEnc
		e.Str8(channel)
		e.U64(after)
		b, err := r.c.call(node, wire.OpWriteGrant, e.B)
		if err != nil {
			return err
		}
		d := wire.NewNodeDec(wire.TypeNodeResponse, b)
		g = decGrant(d)
		return d.Done()
	})
	return g, err
}

func (r *clusterRouter) Info(channel string, create bool) (role.ChannelInfo, bool) {
	info, found, _ := r.c.info(channel, create)
	return info, found
}

// info asks the channel's manager for its list (clusterRouter.Info), and
// reports a failed request as an error rather than as "not found".
func (c *Cluster) info(channel string, create bool) (info role.ChannelInfo, found bool, err error) {
	err = (&clusterRouter{c}).routed(channel, func() error {
		info, found = c.mgr.Info(channel, create)
		return nil
	}, func(node string) error {
		var e wire.NodeEnc
		e.Str8(channel)
		if create {
			e.U8(1)
		} else {
			e.U8(0)
		}
		b, err := c.call(node, wire.OpInfo, e.B)
		if err != nil {
			return err
		}
		info, found, err = decInfo(b)
		return err
	})
	return info, found, err
}

// Interest registers delta readers of node with the channel's manager. A
// failure is logged: the registration is redone when the view next moves
// the channel (reinterest), and readers still learn of new data through the
// feeds and of list changes when they look again.
func (r *clusterRouter) Interest(channel, node string, delta int) {
	err := r.routed(channel, func() error {
		r.c.mgr.Interest(channel, node, delta)
		return nil
	}, func(m string) error {
		var e wire.NodeEnc
		e.Str8(channel)
		e.U32(uint32(int32(delta)))
		_, err := r.c.call(m, wire.OpInterest, e.B)
		return err
	})
	if err != nil {
		r.c.log.Warn("sluice cluster: registering readers with a channel's manager failed", "channel", channel, "delta", delta, "err", err)
	}
}

func (r *clusterRouter) Expire(channel string, through uint64) (int, error) {
	var n int
	err := r.routed(channel, func() (err error) {
		n, err = r.c.mgr.Expire(channel, through)
		return err
	}, func(node string) error {
		var e wire.NodeEnc
		e.Str8(channel)
		e.U64(through)
		b, err := r.c.call(node, wire.OpExpire, e.B)
		if err != nil {
			return err
		}
		d := wire.NewNodeDec(wire.TypeNodeResponse, b)
		n = int(d.U32())
		return d.Done()
	})
	return n, err
}

var _ role.Manager = (*clusterRouter)(nil)

// Serve executes one NODE_REQUEST from peer node and returns the status
// and result body. It may wait for other nodes: call it off the loops.
func (c *Cluster) Serve(peer string, op wire.NodeOp, body []byte) (uint8, []byte, string) {
	if op >= wire.OpServiceFirst {
		return c.serveService(peer, op, body)
	}
	d := wire.NewNodeDec(wire.TypeNodeRequest, body)
	var e wire.NodeEnc
	fail := func(err error) (uint8, []byte, string) {
		switch {
		case errors.Is(err, role.ErrUnknownStreamlet):
			return wire.NodeUnknown, nil, err.Error()
		case errors.Is(err, role.ErrSuccessorTaken):
			return wire.NodeStale, nil, err.Error()
		}
		return wire.NodeFailed, nil, err.Error()
	}
	switch op {
	case wire.OpWriteGrant, wire.OpInfo, wire.OpInterest, wire.OpExpire:
		// A draining node passes requests for channels it no longer
		// manages on to their manager (drain.go).
		if ch := wire.NewNodeDec(wire.TypeNodeRequest, body).Str8(); ch != "" {
			if status, res, text, ok := c.forward(op, ch, body); ok {
				return status, res, text
			}
		}
	}
	switch op {
	case wire.OpCopy:
		ch, epoch, ref := decCopy(d)
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		if err := c.copyHere(ch, epoch, ref); err != nil {
			return fail(err)
		}
	case wire.OpDrain:
		node := d.Str8()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		if err := c.serveDrain(node); err != nil {
			return fail(err)
		}
	case wire.OpWriteGrant:
		ch, after := d.Str8(), d.U64()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		g, err := c.mgr.WriteGrant(ch, after)
		if err != nil {
			return fail(err)
		}
		encGrant(&e, g)
	case wire.OpInfo:
		ch, create := d.Str8(), d.U8() != 0
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		info, found := c.mgr.Info(ch, create)
		encInfo(&e, info, found)
	case wire.OpExpire:
		ch, through := d.Str8(), d.U64()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		n, err := c.mgr.Expire(ch, through)
		if err != nil {
			return fail(err)
		}
		e.U32(uint32(n))
	case wire.OpInterest:
		ch, delta := d.Str8(), int(int32(d.U32()))
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		c.mgr.Interest(ch, peer, delta)
	case wire.OpHost:
		g := decHost(d, len(body))
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		if err := c.host.HostStreamlet(g); err != nil {
			return fail(err)
		}
	case wire.OpSeal:
		id, succ, succHost := d.U64(), d.U64(), d.Str8()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		end, err := c.host.Seal(id, succ, succHost)
		if err != nil {
			return fail(err)
		}
		e.U64(end)
	case wire.OpDedupIDs:
		ids, from, since := decIDsRequest(d, len(body))
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		encIDPage(&e, c.host.MessageIDs(ids, from, since, 0))
	case wire.OpFree:
		id := d.U64()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		c.host.Free(id)
	case wire.OpFence:
		id := d.U64()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		t, err := c.host.Fence(id)
		if err != nil {
			return fail(err)
		}
		encTail(&e, t)
	case wire.OpSealAt:
		id, n := d.U64(), d.U32()
		keep := decKeep(d)
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		if err := c.host.SealAt(id, n, keep); err != nil {
			return fail(err)
		}
	case wire.OpUnreachable:
		req := decUnreachable(d)
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		b, err := c.serveUnreachable(req)
		if err != nil {
			if oe, isOp := errors.AsType[*opError](err); isOp {
				return oe.status, nil, oe.text
			}
			return fail(err)
		}
		e.B = b
	case wire.OpLen:
		id := d.U64()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		n, ok := c.host.Len(id)
		if ok {
			e.U8(1)
		} else {
			e.U8(0)
		}
		e.U32(uint32(n))
	case wire.OpList:
		ch := d.Str8()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		hs, _ := c.listHere(ch)
		encHosted(&e, hs)
	case wire.OpClaim:
		ch, id, host, over := d.Str8(), d.U64(), d.Str8(), d.U64()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		if id == 0 || host == "" {
			return wire.NodeBadOp, nil, fmt.Sprintf("CLAIM of streamlet %d on %q", id, host)
		}
		held, heldHost := c.claimHere(ch, id, host, over)
		e.U64(held)
		e.Str8(heldHost)
	case wire.OpManager:
		ch := d.Str8()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		e.Str8(c.managerHere(ch))
	case wire.OpNotify:
		ch := d.Str8()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		c.gw.Changed(ch)
	case wire.OpStatus:
		b, _ := json.Marshal(c.Status())
		e.B = b
	default:
		return wire.NodeBadOp, nil, fmt.Sprintf("unknown op %d", op)
	}
	return wire.NodeOK, e.B, ""
}

// Status is a node's view of the cluster (`sluice cluster status`).
type Status struct {
	Node    string         `json:"node"`
	Members []MemberStatus `json:"members"`
	// Copies are the streamlet copies of the node's manager (re-replication
	// and drains, manager/copy.go).
	Copies CopyStatus `json:"copies"`
}

// CopyStatus counts a manager's copies of closed streamlets: made, failed
// (tried again), running now, and streamlets held by fewer usable nodes
// than their replica count at the last tick (waiting for one).
type CopyStatus struct {
	Done    int64 `json:"done"`
	Failed  int64 `json:"failed"`
	Running int   `json:"running"`
	Waiting int64 `json:"waiting"`
}

// MemberStatus is one member in a Status.
type MemberStatus struct {
	Name       string  `json:"name"`
	State      string  `json:"state"`
	Gossip     string  `json:"gossip"`
	Client     string  `json:"client,omitempty"`
	Capacity   float64 `json:"capacity,omitempty"`
	Streamlets int     `json:"streamlets"`
	Channels   int     `json:"channels"`
	Conns      int     `json:"conns"`
	MsgsIn     float64 `json:"msgs_in_per_sec"`
	BytesIn    float64 `json:"bytes_in_per_sec"`
	Load       float64 `json:"load"`
	// Draining: the member drains (`sluice cluster drain`, SIGTERM).
	Draining bool `json:"draining,omitempty"`
}

// Status returns the node's view of the cluster.
func (c *Cluster) Status() Status {
	st := Status{Node: c.self}
	st.Copies.Done, st.Copies.Failed, st.Copies.Running, st.Copies.Waiting = c.mgr.CopyStats()
	c.mu.RLock()
	down := make(map[string]bool, len(c.down))
	for n := range c.down {
		down[n] = true
	}
	loads := make(map[string]float64)
	if c.snap != nil { // Commit changes loads under c.mu
		for i := 0; i < c.snap.Len(); i++ {
			n, l := c.snap.Node(i)
			loads[string(n.ID)] = l
		}
	}
	c.mu.RUnlock()
	ml := c.ml.Load()
	if ml == nil {
		return st // still joining
	}
	for _, m := range ml.All() {
		ms := MemberStatus{Name: m.Name, State: m.State.String(), Gossip: m.Addr}
		var meta nodeMeta
		if m.Local {
			c.metaMu.Lock()
			meta = c.meta
			c.metaMu.Unlock()
		} else {
			_ = json.Unmarshal(m.Meta, &meta)
		}
		if down[m.Name] && m.State == membership.Alive {
			ms.State = "unreachable"
		}
		ms.Client, ms.Capacity, ms.Streamlets, ms.Channels = meta.Client, meta.Cap, meta.Streamlets, meta.Channels
		ms.Conns, ms.MsgsIn, ms.BytesIn = meta.Conns, meta.MsgsIn, meta.BytesIn
		ms.Load = loads[m.Name]
		ms.Draining = meta.Drain
		if meta.Drain && ms.State == "alive" {
			ms.State = "draining"
		}
		st.Members = append(st.Members, ms)
	}
	return st
}

// route returns the Manager that reaches each channel's manager node.
func (c *Cluster) route() role.Manager { return &clusterRouter{c} }

// Router returns the Manager the gateway uses in a cluster: each call goes
// to the channel's manager node in this node's view. Its calls may wait for
// the network.
func (c *Cluster) Router() role.Manager { return c.route() }

// Info asks the channel's manager for its streamlet list and reports a
// failed request as an error (not as "not found"). It may wait for the
// network.
func (c *Cluster) Info(channel string, create bool) (role.ChannelInfo, bool, error) {
	return c.info(channel, create)
}

// Skew is the clock skew allowed between nodes (Options.ClockSkew).
func (c *Cluster) Skew() time.Duration { return c.skew() }

// Connect makes sure a link to node is open, dialing it when needed; it
// reports whether one is. It may wait for the network.
func (c *Cluster) Connect(node string) bool { return c.link(node) != nil }

// AppendBytes returns the NODE_APPEND bytes this node sent (frames
// included) and what they would have been uncompressed.
func (c *Cluster) AppendBytes() (sent, raw uint64) { return c.appendSent.Load(), c.appendRaw.Load() }

// ErrNoLink: no link to the node is open (Append never dials).
var ErrNoLink = errors.New("cluster: no open link to the node")

// Append sends a NODE_APPEND of count records (run, wire.AppendRecord
// each) for streamlet g.Streamlet to its host over the open link, without
// dialing (ErrNoLink when there is none). done runs on the link's loop
// with the host's answer, or with an error when the link failed.
func (c *Cluster) Append(g role.Grant, count int, run []byte, done func(wire.NodeAppended, error)) error {
	l := c.existingLink(g.Host)
	if l == nil {
		return ErrNoLink
	}
	return l.queue(func(dst []byte, id uint32) []byte {
		a := wire.NodeAppend{Streamlet: g.Streamlet, Epoch: g.Epoch, Count: uint32(count)}
		raw := wire.HeaderLen + wire.NodeAppendPrefixLen + len(run)
		c.appendRaw.Add(uint64(raw))
		if c.opts.S2 && len(run) >= wire.DefaultS2Threshold {
			// Compressed in place: the header is written once the block's
			// length is known.
			start := len(dst)
			dst = wire.AppendNodeAppendS2Header(dst, id, a, 0)
			var ok bool
			one := [1][]byte{run}
			if dst, ok, _ = wire.AppendCompressedRun(dst, one[:], len(run), wire.DefaultS2Threshold, nil); ok {
				binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-wire.HeaderLen))
				c.appendSent.Add(uint64(len(dst) - start))
				return dst
			}
			dst = dst[:start]
		}
		c.appendSent.Add(uint64(raw))
		dst = wire.AppendNodeAppendHeader(dst, id, a, len(run))
		return append(dst, run...)
	}, func(h wire.Header, body []byte, err error) {
		var res wire.NodeAppended
		if err == nil {
			if h.Type != wire.TypeNodeAppended {
				err = fmt.Errorf("%w: answered %v to NODE_APPEND", ErrLinkDown, h.Type)
			} else {
				res, err = wire.DecodeNodeAppended(body)
			}
		}
		done(res, err)
	})
}

// Read asks node to feed streamlet id to this node's copy from record
// from on (NODE_READ), dialing when needed; the feed arrives through
// Gateway.Feed. It may wait for the network.
func (c *Cluster) Read(node string, id uint64, from uint32) error {
	l := c.link(node)
	if l == nil {
		return fmt.Errorf("%w: %s unreachable", ErrLinkDown, node)
	}
	return l.send(wire.AppendNodeRead(nil, id, from))
}

// Unread tells node that this node's copy of streamlet id is gone
// (NODE_UNREAD), if a link is open; it never dials.
func (c *Cluster) Unread(node string, id uint64) {
	if l := c.existingLink(node); l != nil {
		_ = l.send(wire.AppendNodeUnread(nil, id))
	}
}

// managerHooks is the cluster as the manager sees it (manager.Cluster).
type managerHooks struct{ c *Cluster }

func (h managerHooks) HostOf(node string) role.Host     { return h.c.hostOf(node) }
func (h managerHooks) ListAll(ch string) []role.Hosted  { return h.c.listAll(ch) }
func (h managerHooks) Notify(ch string, nodes []string) { h.c.notify(ch, nodes) }
func (h managerHooks) Managed(ch string) bool           { return h.c.managed(ch) }
func (h managerHooks) Skew() time.Duration              { return h.c.skew() }
func (h managerHooks) Quorate() bool                    { return h.c.Quorate() }
func (h managerHooks) Usable(node string) bool          { return h.c.usable(node) }
func (h managerHooks) Go(f func()) bool                 { return h.c.Go(f) }
func (h managerHooks) Claim(ch string, id uint64, host string, over uint64) (bool, uint64, string) {
	return h.c.claim(ch, id, host, over)
}
func (h managerHooks) Confirm(ch string) (bool, string) { return h.c.confirm(ch) }
func (h managerHooks) Copy(to, ch string, epoch uint64, ref role.StreamletRef) error {
	return h.c.copyTo(to, ch, epoch, ref)
}
func (h managerHooks) Choose(ch string, seq uint64, load manager.Load, exclude []string) (string, bool) {
	return h.c.choose(ch, seq, load, exclude)
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

// ManagerOf returns the node managing channel in this node's view; false
// when no live node does.
func (c *Cluster) ManagerOf(channel string) (string, bool) { return c.managerOf(channel) }

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

// LinkFailures counts the links that ended other than by Shutdown.
func (c *Cluster) LinkFailures() int64 { return c.linkFailures.Load() }

// Halt stops the cluster layer as a crash would: no membership leave, the
// links are left to the caller's event loops to close. For fault tests.
func (c *Cluster) Halt() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	close(c.stop)
	if ml := c.ml.Load(); ml != nil {
		_ = ml.Shutdown()
	}
	c.wg.Wait()
	c.poolWG.Wait()
}

// Goroutines returns how many of the cluster's own goroutines are running
// (for tests: 0 the moment Shutdown or Halt returned).
func (c *Cluster) Goroutines() int { return c.owned.Running() }
