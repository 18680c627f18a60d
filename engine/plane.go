package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-rtm/sluice/cluster"
	"github.com/sluice-rtm/sluice/cluster/nodelink"
	"github.com/sluice-rtm/sluice/console"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// plane is the gateway's one way to the control plane: write grants,
// channel info, reader interest, remote appends and background work. A
// completion (done) always runs on the asking loop: inline, before the
// call returns, when the answer is at hand (a single node: the manager is
// in this process), or later as a task on that loop (a cluster: the call
// ran on one of the cluster's pooled goroutines). Callers handle both. The
// gateway's files never ask whether a cluster exists; only the two
// implementations below differ.
type plane interface {
	// writeGrant asks channel's manager for a write grant; after names the
	// streamlet of the previous grant that refused a write (0 if none).
	writeGrant(l *loop, channel string, after uint64, done func(role.Grant, error))
	// info asks for lc's channel info (creating the channel if create is
	// set); found is false for a channel the manager does not know. err
	// is set when there is no answer (the manager unreachable, the node's
	// pool full); info is then the zero value, which is no channel's.
	info(lc *loopChan, create bool, done func(info role.ChannelInfo, found bool, err error))
	// interest registers delta reading loops of channel with its manager.
	interest(channel string, delta int)
	// expire asks the channel's manager to expire its streamlets through
	// streamlet through (the retention budget; it may wait for the
	// network: call it off the loops).
	expire(channel string, through uint64) (int, error)
	// appendRemote sends a batch of count records (run) under grant g to a
	// peer host; done runs on l. errNoPeer: no link to g.Host is open.
	appendRemote(l *loop, g role.Grant, count int, run []byte, done func(wire.NodeAppended, error)) error
	// background runs fn off the loops (single node: inline); false when
	// it could not be started (fn did not run).
	background(fn func()) bool
	// sweep runs the control plane's periodic work (the ticker calls it).
	sweep()
	// refusesClients reports whether this node must send clients away (a
	// cluster node cut off from the majority); a single node never does.
	refusesClients() bool
	// staleAfter is how long a copy may lag behind what its manager lists
	// before its feed counts as dead; 0 on a single node (no copies).
	staleAfter() time.Duration
	// acceptNode takes c, whose first frame is NODE_HELLO, as an inbound
	// node connection and returns its protocol, which the loop carries
	// from then on; nil when this node takes no node connections (a
	// single node: NODE_HELLO is then a frame before HELLO).
	acceptNode(c cluster.Conn) nodelink.NodeConn
	// readCopy asks node, the host of streamlet id, to feed this node's
	// copy of it from record from (mirror.go; never on a loop: it may
	// dial); unreadCopy stops the feed.
	readCopy(node string, id uint64, from uint32) error
	unreadCopy(node string, id uint64)
	// reachable reports whether this node has a working link to node
	// (which replica a copy reads from).
	reachable(node string) bool
	// live reports whether node is a live member of the cluster (alive
	// or suspected, reachable from here or not).
	live(node string) bool
	// start joins the cluster once the client listener is up at addr;
	// shutdown leaves it (Shutdown, before the loops stop).
	start(addr string) error
	shutdown()
	// status is the node's view of the cluster; false on a single node.
	status() (Status, bool)
	// members is the console's member list; self is this node's own
	// entry as the console measured it (a single node's only one).
	members(self console.Member) []console.Member
	// startDrain puts the node in lame-duck mode in the cluster; false
	// when there is nothing to drain to (a single node). drainLeft
	// reports the streamlets held nowhere else, and whether no other
	// node can take them; drainRequested is signalled when the cluster
	// asks this node to drain (nil: never).
	startDrain() bool
	drainLeft() (left int, noTarget bool)
	drainRequested() <-chan struct{}
}

// errNoPeer: the grant names a host that cannot be reached now.
var errNoPeer = errors.New("engine: no link to the streamlet's host")

// localPlane is the control plane of a single node: every call is a call
// on this process's manager and completes inline.
type localPlane struct{ s *Server }

func (p localPlane) writeGrant(_ *loop, channel string, after uint64, done func(role.Grant, error)) {
	done(p.s.mgr.WriteGrant(channel, after))
}

func (p localPlane) info(lc *loopChan, create bool, done func(role.ChannelInfo, bool, error)) {
	done(p.s.mgr.Info(lc.name, create))
}

func (p localPlane) expire(channel string, through uint64) (int, error) {
	return p.s.mgr.Expire(channel, through)
}

func (p localPlane) interest(channel string, delta int) {
	p.s.mgr.Interest(channel, p.s.host.Node(), delta)
}

func (p localPlane) appendRemote(*loop, role.Grant, int, []byte, func(wire.NodeAppended, error)) error {
	return errNoPeer // every streamlet is hosted here
}

func (p localPlane) background(fn func()) bool { fn(); return true }

// sweep does nothing: a single node frees streamlets at expiry itself and
// has no orphans.
func (p localPlane) sweep() {}

func (p localPlane) refusesClients() bool { return false }

func (p localPlane) staleAfter() time.Duration { return 0 }

func (p localPlane) acceptNode(cluster.Conn) nodelink.NodeConn { return nil }

// readCopy fails: a single node hosts every streamlet and has no copies.
func (p localPlane) readCopy(node string, id uint64, _ uint32) error {
	return fmt.Errorf("%w: %s (streamlet %d): a single node has no peers", errNoPeer, node, id)
}
func (p localPlane) unreadCopy(string, uint64)                    {}
func (p localPlane) reachable(node string) bool                   { return node == p.s.host.Node() }
func (p localPlane) live(node string) bool                        { return node == p.s.host.Node() }
func (p localPlane) start(string) error                           { return nil }
func (p localPlane) shutdown()                                    {}
func (p localPlane) status() (Status, bool)                       { return Status{}, false }
func (p localPlane) members(self console.Member) []console.Member { return []console.Member{self} }
func (p localPlane) startDrain() bool                             { return false }
func (p localPlane) drainLeft() (int, bool)                       { return 0, false }
func (p localPlane) drainRequested() <-chan struct{}              { return nil }

// clusterPlane is the control plane of a cluster node: grants go to the
// metadata log's leader, channel info is this node's replica of the
// committed lists (the open streamlet's length asked of a replica), on the
// cluster's bounded pool of goroutines (a loop never waits for the
// network), completing as tasks on the asking loop. Channel info is cached
// per loop view until a committed change of the channel (gwChan.gen).
type clusterPlane struct {
	s  *Server
	cl *cluster.Cluster
}

// errOverloaded: the cluster's pool has no room for another call.
var errOverloaded = errors.New("engine: too many control-plane calls in progress")

func (p clusterPlane) writeGrant(l *loop, channel string, after uint64, done func(role.Grant, error)) {
	self := p.s.host.Node()
	if !p.cl.Go(func() {
		g, err := p.cl.WriteGrant(channel, after)
		if err == nil && g.Host != self {
			p.cl.Connect(g.Host) // dial here, not on the loop
		}
		l.execute(func() { done(g, err) })
	}) {
		done(role.Grant{}, fmt.Errorf("%w: write grant for %q", errOverloaded, channel))
	}
}

func (p clusterPlane) info(lc *loopChan, create bool, done func(role.ChannelInfo, bool, error)) {
	gen := lc.gc.gen.Load()
	if !create && lc.infoValid && lc.infoGen == gen {
		done(lc.info, lc.infoFound, nil)
		return
	}
	l := lc.l
	if !p.cl.Go(func() {
		info, found, err := p.cl.Info(lc.name, create)
		if err != nil {
			p.s.log.Debug("sluice: channel info failed", "channel", lc.name, "err", err)
		}
		l.execute(func() {
			if err == nil {
				lc.cacheInfo(info, found || create, gen)
			}
			done(info, found, err)
		})
	}) {
		l.execute(func() {
			done(role.ChannelInfo{}, false, fmt.Errorf("%w: channel info for %q", errOverloaded, lc.name))
		})
	}
}

func (p clusterPlane) interest(channel string, delta int) { p.cl.Interest(channel, delta) }

func (p clusterPlane) expire(channel string, through uint64) (int, error) {
	return p.cl.Expire(channel, through)
}

func (p clusterPlane) appendRemote(l *loop, g role.Grant, count int, run []byte, done func(wire.NodeAppended, error)) error {
	err := p.cl.Append(g, count, run, func(res wire.NodeAppended, err error) {
		l.execute(func() { done(res, err) })
	})
	if errors.Is(err, cluster.ErrNoLink) {
		return errNoPeer
	}
	return err
}

func (p clusterPlane) background(fn func()) bool { return p.cl.Go(fn) }

// sweep frees orphaned streamlets (retention.go, reapOrphans).
func (p clusterPlane) sweep() { p.reapOrphans() }

func (p clusterPlane) refusesClients() bool { return p.cl.RefusesClients() }

func (p clusterPlane) staleAfter() time.Duration { return p.cl.StaleAfter() }

func (p clusterPlane) acceptNode(c cluster.Conn) nodelink.NodeConn { return p.cl.Accept(c) }

func (p clusterPlane) readCopy(node string, id uint64, from uint32) error {
	return p.cl.Read(node, id, from)
}
func (p clusterPlane) unreadCopy(node string, id uint64) { p.cl.Unread(node, id) }
func (p clusterPlane) reachable(node string) bool        { return p.cl.Reachable(node) }
func (p clusterPlane) live(node string) bool             { return p.cl.Live(node) }
func (p clusterPlane) start(addr string) error           { return p.cl.Start(addr) }
func (p clusterPlane) shutdown()                         { p.cl.Shutdown() }
func (p clusterPlane) status() (Status, bool)            { return p.cl.Status(), true }

// members lists the cluster's members with their gossiped load.
func (p clusterPlane) members(console.Member) []console.Member {
	var out []console.Member
	for _, m := range p.cl.Status().Members {
		out = append(out, console.Member{Name: m.Name, Addr: m.Client, State: m.State, Load: console.Load{
			Streamlets: int64(m.Streamlets), Channels: int64(m.Channels), Connections: int64(m.Conns),
			MsgsInPerSec: m.MsgsIn, BytesInPerSec: m.BytesIn,
		}})
	}
	return out
}
func (p clusterPlane) startDrain() bool                { p.cl.StartDrain(); return true }
func (p clusterPlane) drainLeft() (int, bool)          { return p.cl.DrainLeft() }
func (p clusterPlane) drainRequested() <-chan struct{} { return p.cl.DrainRequested() }
