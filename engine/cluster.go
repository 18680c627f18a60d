package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/membership"
	"github.com/sluice-rtm/sluice/placement"
	"github.com/sluice-rtm/sluice/wire"
)

// ClusterOptions makes a Server one node of a cluster. The node's name is
// Options.ServerName, which must be unique in the cluster; every node must
// run with the same streamlet limits and the same cluster secret.
type ClusterOptions struct {
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
}

// cluster is the node's cluster layer: membership and load gossip, the
// placement view, links to peers, and the routing of manager and host
// calls to the node that plays the role. Safe for concurrent use; mu
// guards the view and the links and is never held across network I/O.
type cluster struct {
	srv        *Server
	self       string
	opts       ClusterOptions
	clientAddr string
	// ml is set once membership started; the loops serve peers (status)
	// before that.
	ml atomic.Pointer[membership.Node]

	mu      sync.RWMutex
	members map[string]member // alive members, self included
	down    map[string]int64  // node -> unix ns until which it is kept out
	snap    *placement.Snapshot
	others  *placement.Snapshot // without this node, for host choices
	links   map[string]*link
	dialMu  map[string]*sync.Mutex

	meta    nodeMeta // guarded by metaMu
	metaMu  sync.Mutex
	changed chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup

	lastIn, lastBytes uint64

	linkFailures atomic.Int64 // links that ended other than by shutdown

	imu   sync.Mutex // guards iq and iBusy (interestAsync)
	iq    []interestReq
	iBusy bool
}

func (c *cluster) rpcTimeout() time.Duration {
	if c.opts.RPCTimeout > 0 {
		return c.opts.RPCTimeout
	}
	return 2 * time.Second
}

func (c *cluster) skew() time.Duration {
	if c.opts.ClockSkew > 0 {
		return c.opts.ClockSkew
	}
	return time.Second
}

// newCluster sets up the cluster layer before the event loops start (the
// loops read Server.cl); startCluster then joins the membership.
func (s *Server) newCluster() {
	o := *s.opts.Cluster
	if o.Capacity <= 0 {
		o.Capacity = float64(runtime.NumCPU())
	}
	c := &cluster{srv: s, self: s.opts.ServerName, opts: o,
		members: make(map[string]member), down: make(map[string]int64), links: make(map[string]*link),
		dialMu: make(map[string]*sync.Mutex), changed: make(chan struct{}, 1), stop: make(chan struct{})}
	s.cl = c
	s.mgr.cl = c
	s.route = &clusterRouter{c}
}

// startCluster joins the cluster; the server's client listener is up.
func (s *Server) startCluster() error {
	c, o := s.cl, s.cl.opts
	c.clientAddr = o.ClientAdvertise
	if c.clientAddr == "" {
		c.clientAddr = s.addr
	}
	c.meta = nodeMeta{Client: c.clientAddr, Cap: o.Capacity}
	ml, err := membership.Start(membership.Config{
		Name: c.self, BindAddr: o.Listen, AdvertiseAddr: o.Advertise, Join: o.Join,
		Secret: []byte(o.Secret), Meta: c.encodeMeta,
		OnChange: func(membership.Event) { c.poke() },
		Logger:   s.log,
	})
	if err != nil {
		return fmt.Errorf("engine: cluster: %w", err)
	}
	c.ml.Store(ml)
	c.refresh()
	c.wg.Add(1)
	go c.run()
	s.log.Info("sluice cluster node", "node", c.self, "gossip", ml.Addr(), "client", c.clientAddr)
	return nil
}

func (c *cluster) poke() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *cluster) encodeMeta() []byte {
	c.metaMu.Lock()
	defer c.metaMu.Unlock()
	b, _ := json.Marshal(c.meta)
	return b
}

// run refreshes the view on membership changes and reports load.
func (c *cluster) run() {
	defer c.wg.Done()
	every := c.opts.ReportInterval
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-c.stop:
			return
		case <-c.changed:
			c.refresh()
		case now := <-t.C:
			c.report(now.Sub(last))
			last = now
			c.refresh()
		}
	}
}

// report updates this node's load report and gossips it.
func (c *cluster) report(dt time.Duration) {
	in, bytes := c.srv.host.appended.Load(), c.srv.host.appendedBytes.Load()
	sec := max(dt.Seconds(), 1e-3)
	c.metaMu.Lock()
	c.meta.Streamlets = int(c.srv.host.hosted.Load())
	c.meta.Channels = c.srv.mgr.channels()
	c.meta.Conns = int(c.srv.conns.Load())
	c.meta.MsgsIn = float64(in-c.lastIn) / sec
	c.meta.BytesIn = float64(bytes-c.lastBytes) / sec
	c.metaMu.Unlock()
	c.lastIn, c.lastBytes = in, bytes
	_ = c.ml.Load().UpdateMeta(time.Second)
}

// refresh rebuilds the view from membership: members that left are
// handled as failed, and the placement snapshots are rebuilt with the
// gossiped loads.
func (c *cluster) refresh() {
	now := time.Now().UnixNano()
	seen := make(map[string]member)
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
	c.mu.Unlock()
	for _, name := range gone {
		c.nodeGone(name)
	}
	c.srv.setNodes(c.clientAddrs())
	c.reinterest()
}

// interestAsync registers delta reading loops of channel with its manager
// off the loop, in call order (one worker, so a +1 never overtakes the -1
// before it).
func (c *cluster) interestAsync(channel string, delta int) {
	c.imu.Lock()
	c.iq = append(c.iq, interestReq{channel, delta})
	start := !c.iBusy
	c.iBusy = true
	c.imu.Unlock()
	if start {
		go c.interestWorker()
	}
}

type interestReq struct {
	channel string
	delta   int
}

func (c *cluster) interestWorker() {
	for {
		c.imu.Lock()
		if len(c.iq) == 0 {
			c.iBusy = false
			c.imu.Unlock()
			return
		}
		r := c.iq[0]
		c.iq = c.iq[1:]
		c.imu.Unlock()
		c.srv.route.Interest(r.channel, c.self, r.delta)
		if r.delta > 0 {
			// A streamlet opened before the manager knew this node reads
			// the channel was not announced to it: look again once.
			c.srv.gw.changed(r.channel)
		}
	}
}

// reinterest registers this node's readers with the new manager of every
// channel whose manager changed in the view (the new manager rebuilt the
// channel without them), and wakes the readers to look again.
func (c *cluster) reinterest() {
	type item struct {
		name string
		k    int
	}
	var todo []item
	gw := c.srv.gw
	gw.mu.Lock()
	for name, gc := range gw.m {
		if gc.interest <= 0 {
			continue
		}
		if m, _ := c.managerOf(name); m != gc.mgr {
			gc.mgr = m
			todo = append(todo, item{name, gc.interest})
		}
	}
	gw.mu.Unlock()
	for _, it := range todo {
		c.srv.route.Interest(it.name, c.self, it.k)
		gw.changed(it.name)
	}
}

// rebuildSnap builds the placement snapshots; c.mu is held.
func (c *cluster) rebuildSnap() {
	var all, others []placement.Node
	for _, m := range c.members {
		if _, down := c.down[m.Name]; down && m.Name != c.self {
			continue
		}
		capacity := m.Cap
		if !(capacity > 0) {
			capacity = 1
		}
		n := placement.Node{ID: placement.NodeID(m.Name), Capacity: capacity, Load: placement.NodeLoad{
			Streamlets: max(m.Load.Streamlets, 0), Conns: max(m.Load.Conns, 0),
			MsgsInPerSec: max(m.Load.MsgsIn, 0), BytesInPerSec: max(m.Load.BytesIn, 0)}}
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

// clientAddrs lists the client addresses of the live members, this node
// first (for WELCOME).
func (c *cluster) clientAddrs() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := []string{c.clientAddr}
	var rest []string
	for _, m := range c.members {
		if m.Name != c.self {
			rest = append(rest, m.Client)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// managerOf returns the node managing channel in this node's view.
func (c *cluster) managerOf(channel string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.snap == nil {
		return c.self, true
	}
	id, ok := c.snap.Manager(channel)
	return string(id), ok
}

func (c *cluster) managed(channel string) bool {
	m, ok := c.managerOf(channel)
	return !ok || m == c.self
}

// choose picks a host for the next streamlet of channel: by bounded-load
// consistent hashing over the other nodes (so that a manager's death and a
// host's are independent failures), or over all when alone.
func (c *cluster) choose(channel string, seq uint64, load chanLoad, exclude []string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := placement.ChannelLoad{MsgsPerSec: load.msgsPerSec, BytesPerSec: load.bytesPerSec, Subscribers: load.readers}
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// link returns an open link to node, dialing it when needed; nil when the
// node is unknown, down or cannot be reached.
func (c *cluster) link(node string) *link {
	c.mu.Lock()
	if l := c.links[node]; l != nil && !l.closed() {
		c.mu.Unlock()
		return l
	}
	m, ok := c.members[node]
	_, down := c.down[node]
	dm := c.dialMu[node]
	if dm == nil {
		dm = new(sync.Mutex)
		c.dialMu[node] = dm
	}
	c.mu.Unlock()
	if !ok || down {
		return nil
	}
	dm.Lock()
	defer dm.Unlock()
	c.mu.RLock()
	l := c.links[node]
	c.mu.RUnlock()
	if l != nil && !l.closed() {
		return l
	}
	l, err := dialLink(c, node, m.Client, c.rpcTimeout())
	if err != nil {
		c.srv.log.Warn("sluice cluster: peer unreachable", "node", node, "err", err)
		c.markDown(node)
		return nil
	}
	c.mu.Lock()
	c.links[node] = l
	c.mu.Unlock()
	return l
}

// existingLink returns the open link to node without dialing (for the
// loops, which never wait for the network); nil if there is none.
func (c *cluster) existingLink(node string) *link {
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
func (c *cluster) call(node string, op wire.NodeOp, body []byte) ([]byte, error) {
	l := c.link(node)
	if l == nil {
		return nil, fmt.Errorf("%w: %s unreachable", errLinkDown, node)
	}
	return l.call(op, body)
}

// linkClosed is called once per link when it ends.
func (c *cluster) linkClosed(l *link, err error) {
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
	c.srv.log.Warn("sluice cluster: link closed", "node", l.node, "err", err)
	c.markDown(l.node)
}

// markDown keeps node out of routing and placement for downFor and
// handles it as failed: its streamlets are lost to the channels this node
// manages, and the copies this node reads from it end where they are.
func (c *cluster) markDown(node string) {
	if node == c.self {
		return
	}
	c.mu.Lock()
	_, already := c.down[node]
	c.down[node] = time.Now().Add(downFor).UnixNano()
	c.rebuildSnap()
	c.mu.Unlock()
	if !already {
		// Asynchronously: markDown runs inside failed calls, some made
		// under a channel's lock that nodeGone takes.
		go func() {
			c.nodeGone(node)
			c.reinterest()
		}()
	}
}

// nodeGone applies a node's failure to this node's roles.
func (c *cluster) nodeGone(node string) {
	c.srv.mgr.nodeDown(node)
	c.srv.mirrors.hostDown(node)
}

// hostOf returns node's Host role.
func (c *cluster) hostOf(node string) Host {
	if node == c.self {
		return c.srv.host
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
func (c *cluster) listAll(channel string) []Hosted {
	c.mu.RLock()
	var nodes []string
	for name := range c.members {
		if _, down := c.down[name]; !down {
			nodes = append(nodes, name)
		}
	}
	c.mu.RUnlock()
	var mu sync.Mutex
	var out []Hosted
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var hs []Hosted
			if n == c.self {
				hs, _ = c.srv.host.List(channel)
			} else {
				hs, _ = remoteHost{c, n}.List(channel)
			}
			mu.Lock()
			out = append(out, hs...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// notify tells reader nodes of channel that it changed.
func (c *cluster) notify(channel string, nodes []string) {
	var e wire.NodeEnc
	e.Str8(channel)
	for _, n := range nodes {
		if n == c.self {
			c.srv.gw.changed(channel)
			continue
		}
		go func() {
			if l := c.link(n); l != nil {
				l.post(wire.OpNotify, e.B)
			}
		}()
	}
}

// shutdown leaves the cluster and closes the links.
func (c *cluster) shutdown() {
	close(c.stop)
	_ = c.ml.Load().Leave(time.Second)
	_ = c.ml.Load().Shutdown()
	c.wg.Wait()
	c.mu.Lock()
	links := c.links
	c.links = map[string]*link{}
	c.mu.Unlock()
	for _, l := range links {
		l.close(errLinkDown)
	}
}

// remoteHost is the Host role of a peer node, reached over a link.
type remoteHost struct {
	c    *cluster
	node string
}

func (h remoteHost) HostStreamlet(g Grant) error {
	var e wire.NodeEnc
	encGrant(&e, g)
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

func (h remoteHost) List(channel string) ([]Hosted, error) {
	var e wire.NodeEnc
	e.Str8(channel)
	b, err := h.c.call(h.node, wire.OpList, e.B)
	if err != nil {
		return nil, err
	}
	return decHosted(b, h.node)
}

var _ Host = remoteHost{}

// clusterRouter is the Manager the gateway uses in a cluster: each call
// goes to the channel's manager in this node's view, local or remote; when
// the manager's node fails, the call is retried at the next one.
type clusterRouter struct{ c *cluster }

// routed runs local on this node or remote(node) on the manager's node.
func (r *clusterRouter) routed(channel string, local func() error, remote func(node string) error) error {
	var err error
	for tries := 0; tries < 3; tries++ {
		node, ok := r.c.managerOf(channel)
		if !ok {
			return fmt.Errorf("%w: no live node manages %q", errNoHost, channel)
		}
		if node == r.c.self {
			return local()
		}
		if err = remote(node); err == nil || !errors.Is(err, errLinkDown) {
			return err
		}
		// The manager's node failed (and is now marked down): the view
		// names another manager, which rebuilds the channel.
	}
	return err
}

func (r *clusterRouter) WriteGrant(channel string, after uint64) (Grant, error) {
	var g Grant
	err := r.routed(channel, func() (err error) {
		g, err = r.c.srv.mgr.WriteGrant(channel, after)
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

func (r *clusterRouter) Info(channel string, create bool) (ChannelInfo, bool) {
	info, found, _ := r.c.info(channel, create)
	return info, found
}

// info asks the channel's manager for its list (clusterRouter.Info), and
// reports a failed request as an error rather than as "not found".
func (c *cluster) info(channel string, create bool) (info ChannelInfo, found bool, err error) {
	err = (&clusterRouter{c}).routed(channel, func() error {
		info, found = c.srv.mgr.Info(channel, create)
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

func (r *clusterRouter) Interest(channel, node string, delta int) {
	_ = r.routed(channel, func() error {
		r.c.srv.mgr.Interest(channel, node, delta)
		return nil
	}, func(m string) error {
		var e wire.NodeEnc
		e.Str8(channel)
		e.U32(uint32(int32(delta)))
		_, err := r.c.call(m, wire.OpInterest, e.B)
		return err
	})
}

func (r *clusterRouter) Expire(channel string, through uint64) (int, error) {
	var n int
	err := r.routed(channel, func() (err error) {
		n, err = r.c.srv.mgr.Expire(channel, through)
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

var _ Manager = (*clusterRouter)(nil)

// serve executes one NODE_REQUEST from peer node on a goroutine of its
// own (operations may wait for other nodes) and returns the status and
// result body.
func (c *cluster) serve(peer string, op wire.NodeOp, body []byte) (uint8, []byte, string) {
	d := wire.NewNodeDec(wire.TypeNodeRequest, body)
	var e wire.NodeEnc
	s := c.srv
	fail := func(err error) (uint8, []byte, string) {
		switch {
		case errors.Is(err, errUnknownStreamlet):
			return wire.NodeUnknown, nil, err.Error()
		case errors.Is(err, errSuccessorTaken):
			return wire.NodeStale, nil, err.Error()
		case errors.Is(err, ErrShuttingDown):
			return wire.NodeShutdown, nil, err.Error()
		}
		return wire.NodeFailed, nil, err.Error()
	}
	switch op {
	case wire.OpWriteGrant:
		ch, after := d.Str8(), d.U64()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		g, err := s.mgr.WriteGrant(ch, after)
		if err != nil {
			return fail(err)
		}
		encGrant(&e, g)
	case wire.OpInfo:
		ch, create := d.Str8(), d.U8() != 0
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		info, found := s.mgr.Info(ch, create)
		encInfo(&e, info, found)
	case wire.OpExpire:
		ch, through := d.Str8(), d.U64()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		n, err := s.mgr.Expire(ch, through)
		if err != nil {
			return fail(err)
		}
		e.U32(uint32(n))
	case wire.OpInterest:
		ch, delta := d.Str8(), int(int32(d.U32()))
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		s.mgr.Interest(ch, peer, delta)
	case wire.OpHost:
		g := decGrant(d)
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		if err := s.host.HostStreamlet(g); err != nil {
			return fail(err)
		}
	case wire.OpSeal:
		id, succ, succHost := d.U64(), d.U64(), d.Str8()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		end, err := s.host.Seal(id, succ, succHost)
		if err != nil {
			return fail(err)
		}
		e.U64(end)
	case wire.OpFree:
		id := d.U64()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		s.host.Free(id)
	case wire.OpLen:
		id := d.U64()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		n, ok := s.host.Len(id)
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
		hs, _ := s.host.List(ch)
		encHosted(&e, hs)
	case wire.OpNotify:
		ch := d.Str8()
		if err := d.Done(); err != nil {
			return wire.NodeBadOp, nil, err.Error()
		}
		s.gw.changed(ch)
	case wire.OpStatus:
		b, _ := json.Marshal(c.status())
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
}

func (c *cluster) status() Status {
	st := Status{Node: c.self}
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
		st.Members = append(st.Members, ms)
	}
	return st
}
