// Package cluster makes a node one member of a Sluice cluster: the
// membership view and load gossip (package membership), the metadata log
// (package cluster/metalog: hashicorp/raft) whose state machine (package
// meta) holds every channel's streamlet list on every node, the routing of
// grants and list changes to the log's leader, whose manager decides them,
// the links to other nodes and the node-to-node operations over them
// (PROTOCOL.md 9), the remote Host, and the node's Status.
//
// It wires three packages: cluster/view (the membership view and its
// decisions), cluster/nodelink (the node links: handshake, record layer,
// requests, heartbeats) and cluster/metalog (the Raft log). What is its
// own is the meaning of the node frames: the op handlers (serve.go), the
// data plane's replication (replicate.go, ackwait.go), feeds and appends
// of inbound connections (inbound.go), copies and drain (drain.go), and
// the leader's duties (leader.go). It never touches gnet: the engine's
// event loops carry the connections' bytes through nodelink's Transport,
// Conn and NodeConn interfaces, and the engine's gateway is reached
// through the Gateway interface.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/cluster/metalog"
	"github.com/sluice-rtm/sluice/cluster/nodelink"
	"github.com/sluice-rtm/sluice/cluster/view"
	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/internal/owned"
	"github.com/sluice-rtm/sluice/manager"
	"github.com/sluice-rtm/sluice/membership"
	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/role"
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
	// Secret authenticates nodes to each other (node links and the
	// metadata log) and encrypts gossip. Empty means the network is
	// trusted; it is required when Options.Auth is set, since node
	// connections bypass client permissions.
	Secret string
	// Capacity is the node's relative size for placement (0 = its CPUs).
	Capacity float64
	// RPCTimeout bounds one node-to-node request (0 = 2 s).
	RPCTimeout time.Duration
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

	// RaftListen is the TCP address of the metadata log's transport (""
	// = Listen's host, its port plus one); RaftAdvertise the one other
	// nodes dial ("" = Advertise's host, or RaftListen's, with that port).
	RaftListen, RaftAdvertise string
	// DataDir holds the metadata log (write-ahead log, snapshots, this
	// node's server id); a restarted node keeps its identity with it. ""
	// keeps the log in memory: a restart is a new server that replays the
	// log from the others (tests).
	DataDir string
	// BootstrapExpect is how many nodes a new cluster waits to see before
	// the smallest-named forms it (0 = 1).
	BootstrapExpect int
	// RaftTimeout is the metadata log's heartbeat and election timeout
	// (0 = 1 s): a leader's failure is noticed within about twice it.
	RaftTimeout time.Duration
	// NodeGoneAfter is how long a node must have been unreachable before
	// the leader takes it out of every streamlet list (NODE_GONE), its
	// incarnation unchanged (0 = 60 s; at least twice RaftTimeout). A node
	// that restarts (a new incarnation: its memory is gone) is taken out
	// at once. Until then what only it holds is waited for, never
	// announced lost: a partition or pause shorter than this loses
	// nothing. It bounds how long readers of a streamlet held only by a
	// dead node, and writers of a single-copy channel whose open streamlet
	// it holds, wait for an explicit gap.
	NodeGoneAfter time.Duration
}

// Manager is what the cluster needs of this node's channel manager
// (package manager), which acts while this node leads the metadata log.
type Manager interface {
	role.Manager
	Unreachable(channel string, id uint64, orderer, follower string) (manager.Recovered, error)
	NodeGone(node, next string) error
	SetInterest(channel, node string, n int)
	Lead()
	Follow()
	Leading() bool
	CopyStats() (done, failed int64, running int, waiting int64)
}

// Host is what the cluster needs of this node's host (package host):
// its Host role, which peers and the manager use, and what the data plane
// serves from it. The cluster installs itself as the host's id source and
// replication hooks (New).
type Host interface {
	role.Host
	// Streamlet returns the hosted streamlet id (nil when it is not held
	// here); List the hosted streamlets of a channel, Channels the
	// channels with any.
	Streamlet(id uint64) *host.Streamlet
	List(channel string) ([]role.Hosted, error)
	Channels() []string
	// Load is the node's load report; MessageIDs a page of the stored
	// message ids (DEDUP_IDS).
	Load() host.Load
	MessageIDs(streamlets []uint64, from int, since int64, limit int) host.IDPage
	// Draining reports whether the host takes no new streamlets; NewCopy
	// and Adopt make and take a copy of a peer's closed streamlet.
	Draining() bool
	NewCopy(id uint64, channel string, first uint64, l role.Limits, copyOf string) *host.Streamlet
	Adopt(s *host.Streamlet, meta role.Hosted) error
	SetIDSource(src host.IDSource, budget time.Duration)
	SetReplicationHooks(onOrder, onCommit func(*host.Streamlet))
	SetSealWait(d time.Duration)
}

var _ Host = (*host.Host)(nil)

// Gateway is what the cluster needs from this node's gateway (package
// engine). Its methods must not block.
type Gateway interface {
	// Changed: the channel's streamlet list may have changed; the
	// gateway's readers look it up again.
	Changed(channel string)
	// HostDown: the link to node failed; the gateway's copies it fed end
	// where they are (and are read again, from another replica or later).
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
	// CutOff: the node has been without a leader of the metadata log for
	// long (a minority side); the gateway sends its clients elsewhere.
	CutOff()
}

// Config is what a Cluster is built from.
type Config struct {
	Options Options
	// Self is this node's name (the server's name); Instance names this
	// process (its host's incarnation: hosts keep streamlets in memory,
	// so a restarted node holds nothing its earlier one held).
	Self, Instance string
	Host           Host
	// State is this node's replica of the metadata state machine; the
	// cluster feeds it from the log (its observer is the caller's).
	State   *meta.State
	Gateway Gateway
	// Transport enrolls dialed links in the engine's event loops; the
	// Conn its loops attach is the data plane's (Conn) too.
	Transport nodelink.Transport
	// Conns are the limits of node connections.
	Conns nodelink.ConnOptions
	Log   *slog.Logger
	Clock func() time.Time
	// Limits returns a channel's streamlet limits (sizing the copies this
	// node adopts, drain.go).
	Limits func(channel string) role.Limits
	// Service answers the node operations of services (presence) and
	// learns the live members (service.go); nil: none.
	Service Service
	// Cut is fault injection for tests (nil in production): while it
	// reports true for a peer, nothing this node sends to it over node
	// links arrives, as when a firewall drops this node's packets to it.
	// Any goroutine; must not block.
	Cut func(peer string) bool
}

// Cluster is the node's cluster layer. Safe for concurrent use: a method
// may be called from any goroutine unless its comment says otherwise; one
// that says it waits for the network must not be called on an event loop.
type Cluster struct {
	cfg      Config
	self     string
	instance string
	opts     Options
	// appendSent and appendRaw count NODE_APPEND bytes as sent and as they
	// would be uncompressed (Append).
	appendSent, appendRaw atomic.Uint64
	// feedRaw and feedSent count NODE_FEED bytes as they would be
	// uncompressed and as sent (inbound.go's feeds).
	feedRaw, feedSent atomic.Uint64
	mgr               Manager
	host              Host
	st                *meta.State
	gw                Gateway
	log               *slog.Logger
	clientAddr        string
	// ml is set once membership started; the loops serve peers (status)
	// before that.
	ml atomic.Pointer[membership.Node]
	// rlog is the metadata log, set by Start.
	rlog atomic.Pointer[metalog.Raft]
	// applied is closed and replaced after every command applied here
	// (waitApplied).
	appliedMu sync.Mutex
	applied   chan struct{}

	// view is the membership as this node sees it, with its decisions
	// (package cluster/view); links are the node links (package
	// cluster/nodelink).
	view  *view.View
	links *nodelink.Links

	changed chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup // run, the leader watcher, the interest worker
	jobs    chan func()    // the calls pool's queue (pool.go)
	// serveJobs is the serving pool's queue (pool.go).
	serveJobs chan func()
	poolWG    sync.WaitGroup

	lastIn, lastBytes uint64

	// owned counts the cluster's goroutines that have not ended
	// (internal/owned): 0 once Shutdown or Halt returned.
	owned owned.Count

	// snd holds the senders of the streamlets this node orders
	// (replicate.go); replSent and replHeld count forwarded records.
	snd                senders
	replSent, replHeld atomic.Uint64

	interests // this node's readers as registered with the leader (interest.go)
	leadState // who leads, cut-off (leader.go)

	// drainReq is signalled by OP_DRAIN (drain.go); copyTable holds the
	// copies being made here.
	drainReq chan struct{}
	copyTable
}

func (c *Cluster) now() time.Time { return c.cfg.Clock() }

// rpcTimeout is Options.RPCTimeout with its default.
func (c *Cluster) rpcTimeout() time.Duration { return c.links.RPCTimeout() }

func (c *Cluster) raftTimeout() time.Duration {
	if c.opts.RaftTimeout > 0 {
		return c.opts.RaftTimeout
	}
	return time.Second
}

// New sets up the cluster layer before the event loops start; Start then
// joins the membership and the metadata log.
func New(cfg Config) *Cluster {
	o := cfg.Options
	if o.Capacity <= 0 {
		o.Capacity = float64(runtime.NumCPU())
	}
	c := &Cluster{cfg: cfg, self: cfg.Self, instance: cfg.Instance, opts: o, host: cfg.Host,
		st: cfg.State, gw: cfg.Gateway, log: cfg.Log, applied: make(chan struct{}),
		changed: make(chan struct{}, 1), stop: make(chan struct{}),
		drainReq: make(chan struct{}, 1), copyTable: copyTable{copies: make(map[uint64]*pendingCopy)}}
	c.view = view.New(view.Config{Self: cfg.Self, Instance: cfg.Instance, Recorded: cfg.State.Instance, Clock: cfg.Clock,
		GoneAfter: c.goneAfter()})
	c.links = nodelink.New(nodelink.Config{Self: cfg.Self, Secret: o.Secret, Conns: cfg.Conns, Transport: cfg.Transport,
		Directory: c.view, Handler: linkHandler{c}, Go: c.goServe, Stop: c.stop, Log: cfg.Log, Clock: cfg.Clock,
		RPCTimeout: o.RPCTimeout, Cut: cfg.Cut})
	c.interests.init()
	c.leadState.init()
	c.host.SetIDSource(idSource{c}, c.rpcTimeout())
	c.host.SetReplicationHooks(c.startSenders, func(s *host.Streamlet) { c.gw.Wake(s.Channel()) })
	c.host.SetSealWait(c.rpcTimeout() / 2)
	c.startPool()
	c.wg.Add(1)
	c.owned.Go(c.interestWorker, c.wg.Done)
	return c
}

// SetManager connects this node's channel manager, which acts while this
// node leads the metadata log (its Log is this Cluster, its manager.Cluster
// Hooks); call it before Start.
func (c *Cluster) SetManager(m Manager) { c.mgr = m }

// propose commits cmd to the metadata log (the manager's Log): it fails
// with an error wrapping role.ErrNotLeader on a node that does not lead.
func (c *Cluster) propose(ctx context.Context, cmd []byte) ([]byte, uint64, error) {
	rl := c.rlog.Load()
	if rl == nil {
		return nil, 0, fmt.Errorf("%w: the metadata log has not started", role.ErrNotLeader)
	}
	res, idx, err := rl.Propose(ctx, cmd)
	if errors.Is(err, metalog.ErrNotLeader) {
		err = fmt.Errorf("%w: %v", role.ErrNotLeader, err)
	}
	return res, idx, err
}

// Start joins the membership and the metadata log; clientAddr is the
// node's client address (the server's listener is up), unless
// Options.ClientAdvertise names another. Call it once, after SetManager.
func (c *Cluster) Start(clientAddr string) error {
	o := c.opts
	c.clientAddr = o.ClientAdvertise
	if c.clientAddr == "" {
		c.clientAddr = clientAddr
	}
	c.links.SetClientAddr(c.clientAddr)
	rl, err := c.startLog()
	if err != nil {
		return err
	}
	adv := rl.Advert()
	c.view.UpdateLocal(func(m *view.Meta) {
		*m = view.Meta{Client: c.clientAddr, Cap: o.Capacity, Inst: c.instance, Raft: adv.Addr, SID: adv.ServerID, Boot: adv.Bootstrapped,
			Svc: c.cfg.Service != nil}
	})
	ml, err := membership.Start(membership.Config{
		Name: c.self, BindAddr: o.Listen, AdvertiseAddr: o.Advertise, Join: o.Join,
		Secret: []byte(o.Secret), Meta: c.view.EncodeLocal,
		OnChange: func(membership.Event) { c.poke() },
		Logger:   c.log,
	})
	if err != nil {
		_ = rl.Shutdown()
		return fmt.Errorf("cluster: %w", err)
	}
	c.ml.Store(ml)
	c.refresh()
	c.links.Start()
	c.wg.Add(2)
	c.owned.Go(c.run, c.wg.Done)
	c.owned.Go(c.watchLeader, c.wg.Done)
	c.log.Info("sluice cluster node", "node", c.self, "gossip", ml.Addr(), "raft", adv.Addr, "client", c.clientAddr,
		"server_id", adv.ServerID)
	return nil
}

func (c *Cluster) poke() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// Shutdown leaves the membership, stops the metadata log and closes the
// links. Every goroutine the cluster started has ended when it returns.
// Call it (or Halt) once.
func (c *Cluster) Shutdown() {
	close(c.stop)
	if ml := c.ml.Load(); ml != nil {
		if err := ml.Leave(time.Second); err != nil {
			c.log.Warn("sluice cluster: leaving the membership", "err", err)
		}
		if err := ml.Shutdown(); err != nil {
			c.log.Warn("sluice cluster: stopping the membership", "err", err)
		}
	}
	c.links.CloseAll() // calls in flight fail now
	c.links.Wait()
	c.wg.Wait()
	c.poolWG.Wait()
	if rl := c.rlog.Load(); rl != nil {
		if err := rl.Shutdown(); err != nil {
			c.log.Warn("sluice cluster: stopping the metadata log", "err", err)
		}
	}
}

// Halt stops the cluster layer as a crash would: no membership leave, the
// links are left to the caller's event loops to close. For fault tests.
func (c *Cluster) Halt() {
	close(c.stop)
	if ml := c.ml.Load(); ml != nil {
		_ = ml.Shutdown()
	}
	c.links.Wait()
	c.wg.Wait()
	c.poolWG.Wait()
	if rl := c.rlog.Load(); rl != nil {
		_ = rl.Shutdown()
	}
}

// Goroutines returns how many of the cluster's own goroutines are running
// (for tests: 0 the moment Shutdown or Halt returned).
func (c *Cluster) Goroutines() int {
	n := c.owned.Running() + c.links.Running()
	if rl := c.rlog.Load(); rl != nil {
		n += rl.Running()
	}
	return n
}

// Stats are counters of a node's links, for tests and benchmarks.
type Stats struct {
	// AppendSent and AppendRaw are the NODE_APPEND bytes this node sent
	// (frames included) and what they would have been uncompressed;
	// FeedSent and FeedRaw the same of NODE_FEED.
	AppendSent, AppendRaw, FeedSent, FeedRaw uint64
	// ReplSent and ReplHeld are the records this node forwarded as an
	// orderer and received as a follower.
	ReplSent, ReplHeld uint64
	// LinkFailures counts the links that ended other than by Shutdown.
	LinkFailures int64
}

// Stats returns the node's link counters. Any goroutine.
func (c *Cluster) Stats() Stats {
	return Stats{AppendSent: c.appendSent.Load(), AppendRaw: c.appendRaw.Load(), FeedSent: c.feedSent.Load(),
		FeedRaw: c.feedRaw.Load(), ReplSent: c.replSent.Load(), ReplHeld: c.replHeld.Load(),
		LinkFailures: c.links.Failures()}
}

// ErrNoLink: no link to the node is open (Append never dials).
var ErrNoLink = nodelink.ErrNoLink
