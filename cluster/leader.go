package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/cluster/metalog"
	"github.com/sluice-rtm/sluice/cluster/view"
	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// The metadata log and its leader. Every node runs a member of the Raft
// group (3 or 5 voters, the rest non-voters: metalog's reconcile) whose
// state machine is this node's meta.State; the leader's manager decides
// every change of the lists and commits it. This file starts the log,
// feeds its state machine, follows who leads (watchLeader: the local
// manager leads exactly while this node does, after a barrier), routes the
// gateway's grants and list requests to the leader, records the nodes'
// incarnations (reconcileNodes) and notices when this node has been
// without a leader for long (a minority side: its clients are sent away).

// maxSnapshot bounds a snapshot this node restores (from a peer that
// passed the node handshake; 100,000 channels of six streamlets with two
// replicas take about 42 MB, BENCHMARKS.md).
const maxSnapshot = 1 << 30

// leadState is who leads the metadata log as this node sees it.
type leadState struct {
	// lastLeader is the leader seen last (the interest worker sends to
	// it); noLeaderSince is when this node last lost sight of a leader
	// (unix ns; 0 while it knows one); away is set once its clients were
	// sent away for that.
	lastLeader    atomic.Pointer[string]
	noLeaderSince atomic.Int64
	away          atomic.Bool
	// reconcile wakes watchLeader (membership changed).
	reconcile chan struct{}
}

func (ls *leadState) init() {
	ls.reconcile = make(chan struct{}, 1)
	empty := ""
	ls.lastLeader.Store(&empty)
}

func (c *Cluster) pokeLeader() {
	select {
	case c.reconcile <- struct{}{}:
	default:
	}
}

// goneAfter is how long a member must have been dead (per the membership)
// before what it holds counts as gone (Options.NodeGoneAfter). A node
// unreachable with its incarnation unchanged still holds what it held: a
// pause or a cut under this bound loses nothing even with a single copy,
// while the writers of a channel whose single-copy streamlet is on a dead
// node wait about that long for a new one. A restart is told by the new
// incarnation, not by time.
func (c *Cluster) goneAfter() time.Duration {
	d := c.opts.NodeGoneAfter
	if d <= 0 {
		d = defaultNodeGoneAfter
	}
	return max(d, 2*c.raftTimeout())
}

// defaultNodeGoneAfter is Options.NodeGoneAfter's default: longer than a
// routine pause, partition or slow restart, short enough that a node that
// never returns ends in explicit gaps within a minute.
const defaultNodeGoneAfter = time.Minute

// awayAfter is how long a node stays without a leader before it sends its
// clients elsewhere: well past an election.
func (c *Cluster) awayAfter() time.Duration { return max(2*c.rpcTimeout(), 4*c.raftTimeout()) }

// raftAddrs returns the log's listen and advertised addresses: by default
// the gossip addresses' hosts with their port plus one.
func (c *Cluster) raftAddrs() (listen, adv string, err error) {
	next := func(addr string) (string, error) {
		h, p, err := net.SplitHostPort(addr)
		if err != nil {
			return "", err
		}
		port, err := strconv.Atoi(p)
		if err == nil && port == 0 {
			return net.JoinHostPort(h, "0"), nil // any free port, as the gossip's (tests)
		}
		if err != nil || port < 0 || port >= 65535 {
			return "", fmt.Errorf("port of %q: cannot derive the metadata log's port from it; set the raft address", addr)
		}
		return net.JoinHostPort(h, strconv.Itoa(port+1)), nil
	}
	listen, adv = c.opts.RaftListen, c.opts.RaftAdvertise
	if listen == "" {
		if listen, err = next(c.opts.Listen); err != nil {
			return "", "", err
		}
	}
	if adv == "" && c.opts.Advertise != "" {
		h, _, err := net.SplitHostPort(c.opts.Advertise)
		if err != nil {
			return "", "", err
		}
		_, p, err := net.SplitHostPort(listen)
		if err != nil {
			return "", "", err
		}
		adv = net.JoinHostPort(h, p)
	}
	return listen, adv, nil
}

// startLog starts this node's member of the metadata log.
func (c *Cluster) startLog() (*metalog.Raft, error) {
	listen, adv, err := c.raftAddrs()
	if err != nil {
		return nil, fmt.Errorf("cluster: metadata log: %w", err)
	}
	rt := c.raftTimeout()
	rl, err := metalog.NewRaft(metalog.Config{Node: c.self, Bind: listen, Advertise: adv, Secret: c.opts.Secret,
		DataDir: c.opts.DataDir, BootstrapExpect: c.opts.BootstrapExpect, Logger: c.log, OnAdvert: c.onAdvert,
		HeartbeatTimeout: rt, ElectionTimeout: rt, LeaderLeaseTimeout: rt / 2}, fsm{c})
	if err != nil {
		return nil, fmt.Errorf("cluster: metadata log: %w", err)
	}
	c.rlog.Store(rl)
	return rl, nil
}

// onAdvert gossips the log's new advert (it joined a cluster).
func (c *Cluster) onAdvert(a metalog.Advert) {
	c.view.UpdateLocal(func(m *view.Meta) { m.Raft, m.SID, m.Boot = a.Addr, a.ServerID, a.Bootstrapped })
	if !c.Go(c.gossipMeta) {
		c.log.Warn("sluice cluster: gossiping the metadata log's advert was dropped (pool full); the next load report carries it")
	}
}

// fsm is the log's state machine: this node's meta.State.
type fsm struct{ c *Cluster }

func (f fsm) Apply(index uint64, cmd []byte) []byte {
	r := f.c.st.Apply(index, cmd)
	f.c.signalApplied()
	return r
}

// Snapshot captures the state (a pointer per channel); the snapshot
// encodes it in Persist, on raft's snapshot goroutine, while commands go
// on applying.
func (f fsm) Snapshot() (metalog.Snapshot, error) { return f.c.st.Snapshot(), nil }

// Restore replaces the state with a snapshot (a node far behind, or one
// restarting from its data dir): every channel may have changed, so every
// reader looks again, and a leading manager reloads what is due.
func (f fsm) Restore(r io.Reader) error {
	if err := f.c.st.Restore(r, maxSnapshot); err != nil {
		return err
	}
	f.c.st.Range(func(ch *meta.Channel) bool {
		f.c.gw.Changed(ch.Name)
		return true
	})
	if f.c.mgr.Leading() {
		f.c.mgr.Lead()
	}
	f.c.signalApplied()
	return nil
}

// signalApplied wakes waitApplied's callers.
func (c *Cluster) signalApplied() {
	c.appliedMu.Lock()
	close(c.applied)
	c.applied = make(chan struct{})
	c.appliedMu.Unlock()
}

// waitApplied waits until this node's state applied index, at most d;
// false when it did not.
func (c *Cluster) waitApplied(index uint64, d time.Duration) bool {
	return c.waitState(d, func() bool { return c.st.Applied() >= index })
}

// waitState waits until cond, a condition on this node's state, holds, at
// most d: it is checked again at every command applied. False when it
// did not hold in time.
func (c *Cluster) waitState(d time.Duration, cond func() bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		c.appliedMu.Lock()
		ch := c.applied
		c.appliedMu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-c.stop:
			return false
		}
	}
}

// watchLeader follows the log's leadership (its own goroutine, until the
// cluster stops): the manager leads while this node does, after a barrier
// (its state then holds everything committed); the interest goes to each
// new leader; the leader records the nodes' incarnations; a node long
// without a leader sends its clients away.
func (c *Cluster) watchLeader() {
	rl := c.rlog.Load()
	t := time.NewTicker(max(c.raftTimeout()/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			c.mgr.Follow()
			return
		case <-rl.LeadershipChanged():
		case <-c.reconcile:
		case <-t.C:
		}
		ld := rl.Leadership()
		c.followLeadership(rl, ld)
		if prev := *c.lastLeader.Load(); prev != ld.Leader {
			leader := ld.Leader
			c.lastLeader.Store(&leader)
			if leader != "" {
				c.resendInterest()
				c.log.Info("sluice cluster: metadata log leader", "leader", leader, "term", ld.Term, "self", ld.Self)
			}
		}
		c.checkAway(ld)
		if ld.Self && c.mgr.Leading() {
			c.reconcileNodes()
		}
	}
}

// followLeadership makes the manager lead exactly while this node leads.
func (c *Cluster) followLeadership(rl *metalog.Raft, ld metalog.Leadership) {
	switch {
	case ld.Self && !c.mgr.Leading():
		ctx, cancel := context.WithTimeout(context.Background(), 2*c.raftTimeout())
		err := rl.Barrier(ctx)
		cancel()
		if err != nil {
			c.log.Warn("sluice cluster: leading the metadata log, but its barrier failed; trying again", "err", err)
			c.pokeLeader()
			return
		}
		c.mgr.Lead()
		c.log.Info("sluice cluster: this node leads the metadata log and manages every channel", "term", ld.Term)
	case !ld.Self && c.mgr.Leading():
		c.mgr.Follow()
		c.log.Info("sluice cluster: this node no longer leads the metadata log", "leader", ld.Leader)
	}
}

// checkAway sends the clients elsewhere once this node has been without a
// leader for awayAfter, and takes them again once it has one.
func (c *Cluster) checkAway(ld metalog.Leadership) {
	now := c.now().UnixNano()
	if ld.Leader != "" {
		c.noLeaderSince.Store(0)
		if c.away.Swap(false) {
			c.log.Info("sluice cluster: a leader is back; taking clients again", "leader", ld.Leader)
		}
		return
	}
	since := c.noLeaderSince.Load()
	if since == 0 {
		c.noLeaderSince.Store(now)
		return
	}
	if now-since >= int64(c.awayAfter()) && !c.away.Swap(true) {
		c.log.Warn("sluice cluster: no leader of the metadata log for long; sending clients to other nodes",
			"for", time.Duration(now-since))
		c.gw.CutOff()
	}
}

// RefusesClients reports whether the node sends clients away: it has been
// without a leader of the metadata log for long (a minority side).
func (c *Cluster) RefusesClients() bool { return c.away.Load() }

// reconcileNodes commits, on the leader, each node's incarnation: a live
// node whose gossiped incarnation is not the recorded one (new, or
// restarted: it holds nothing it held before) is recorded with it; a node
// recorded but dead for goneAfter, or departed, is recorded as gone. Each
// NODE_GONE takes the node out of every list; until it commits, the node
// is not usable.
func (c *Cluster) reconcileNodes() {
	rec := c.st.Instances()
	live := c.view.Incarnations()
	alive := make(map[string]bool, len(live))
	for name := range live {
		alive[name] = true
	}
	var recorded []string
	for name := range rec {
		recorded = append(recorded, name)
	}
	c.view.NoteDead(alive, recorded)
	for _, ch := range incarnationChanges(rec, live, c.view.DeadFor, c.goneAfter()) {
		c.nodeGone(ch.node, ch.next)
	}
}

// incarnationChange is one NODE_GONE to commit: node's recorded
// incarnation ends, and next ("" = none yet) is recorded.
type incarnationChange struct{ node, next string }

// incarnationChanges decides the NODE_GONEs of a reconciliation (pure):
// rec holds the recorded incarnations, live the incarnations the
// membership reports for live nodes ("" = not gossiped yet), deadFor how
// long a node has been out of the membership. A live node running another
// incarnation than the recorded one restarted (or is new): its memory is
// gone and it is recorded with the new one at once. A recorded node that
// is not live is taken out only once it has been dead for after: until
// then it may be paused or cut off with everything it held, and what only
// it holds is waited for rather than announced lost. Changes come in name
// order.
func incarnationChanges(rec, live map[string]string, deadFor func(string) time.Duration, after time.Duration) []incarnationChange {
	var out []incarnationChange
	for name, inst := range live {
		if r, ok := rec[name]; inst != "" && (!ok || r != inst) {
			out = append(out, incarnationChange{name, inst})
		}
	}
	for name := range rec {
		if _, ok := live[name]; !ok && deadFor(name) >= after {
			out = append(out, incarnationChange{name, ""})
		}
	}
	slices.SortFunc(out, func(a, b incarnationChange) int { return strings.Compare(a.node, b.node) })
	return out
}

func (c *Cluster) nodeGone(name, next string) {
	if err := c.mgr.NodeGone(name, next); err != nil {
		c.log.Warn("sluice cluster: recording a node's incarnation failed; trying again", "node", name, "next", next, "err", err)
		return
	}
	if next == "" {
		c.log.Info("sluice cluster: node gone: taken out of every streamlet list", "node", name)
	} else {
		c.log.Info("sluice cluster: node incarnation recorded", "node", name, "instance", next)
	}
}

// errLeaderUnknown: no leader answered within the call's bound.
var errLeaderUnknown = fmt.Errorf("%w: no leader of the metadata log reachable", role.ErrUnavailable)

// leaderCall runs op at the leader: local when this node leads, else a
// request to the leader's node, retried when the leader changes or its
// link fails, for at most callTimeout. It waits for the network. A node
// whose log has not started yet (clients are served from the start on)
// waits for it like for a leader.
func (c *Cluster) leaderCall(op wire.NodeOp, body []byte, local func() ([]byte, error)) ([]byte, error) {
	deadline := time.Now().Add(c.links.CallTimeout()) // a bound on waiting, not a decision: wall time
	var last error = errLeaderUnknown
	for {
		var ld metalog.Leadership
		if rl := c.rlog.Load(); rl != nil {
			ld = rl.Leadership()
		}
		if ld.Self && c.mgr.Leading() {
			return local()
		}
		if ld.Leader != "" && !ld.Self {
			b, err := c.call(ld.Leader, op, body)
			if err == nil || !retriableAtLeader(err) {
				return b, err
			}
			last = err
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("%w: %v", role.ErrUnavailable, last)
		}
		select {
		case <-c.stop:
			return nil, fmt.Errorf("%w: shutting down", role.ErrUnavailable)
		case <-time.After(max(c.raftTimeout()/10, 5*time.Millisecond)):
		}
	}
}

// retriableAtLeader reports whether a leader request's failure may pass
// with the next leader: the link failed, or the node no longer leads.
func retriableAtLeader(err error) bool {
	return errors.Is(err, ErrLinkDown) || errors.Is(err, role.ErrNotLeader)
}

// WriteGrant asks the leader's manager for a write grant of channel (see
// role.Manager.WriteGrant). It waits for the network.
func (c *Cluster) WriteGrant(channel string, after uint64) (role.Grant, error) {
	var e wire.NodeEnc
	e.Str8(channel)
	e.U64(after)
	var g role.Grant
	b, err := c.leaderCall(wire.OpWriteGrant, e.B, func() ([]byte, error) {
		var err error
		g, err = c.mgr.WriteGrant(channel, after)
		return nil, err
	})
	if err != nil || b == nil {
		return g, err
	}
	d := wire.NewNodeDec(wire.TypeNodeResponse, b)
	g = decGrant(d)
	return g, d.Done()
}

// Info returns the channel's committed list as this node's state holds it,
// the open streamlet's length asked of a replica. A channel this node does
// not know is created at the leader when create is set, and its answer
// waited for here. found is false for a channel that does not exist; err
// is set when the leader could not be asked. It waits for the network.
func (c *Cluster) Info(channel string, create bool) (role.ChannelInfo, bool, error) {
	ch, ok := c.st.Channel(channel)
	if !ok && create {
		var e wire.NodeEnc
		e.Str8(channel)
		b, err := c.leaderCall(wire.OpCreate, e.B, func() ([]byte, error) {
			if _, _, err := c.mgr.Info(channel, true); err != nil {
				return nil, err
			}
			var r wire.NodeEnc
			r.U64(c.st.Applied())
			return r.B, nil
		})
		if err != nil {
			return role.ChannelInfo{}, false, err
		}
		d := wire.NewNodeDec(wire.TypeNodeResponse, b)
		index := d.U64()
		if err := d.Done(); err != nil {
			return role.ChannelInfo{}, false, err
		}
		if !c.waitApplied(index, c.links.CallTimeout()) {
			return role.ChannelInfo{}, false, fmt.Errorf("%w: channel %q created at the leader, not applied here in time", role.ErrUnavailable, channel)
		}
		ch, ok = c.st.Channel(channel)
	}
	if !ok {
		return role.ChannelInfo{}, false, nil
	}
	n := 0
	if o, open := ch.Open(); open {
		n = c.openLen(o)
	}
	return ch.Info(n), true, nil
}

// openLen returns how many records of the open streamlet o are visible:
// from this node's replica when it holds one, else from its orderer (a
// request); 0 when neither can tell.
func (c *Cluster) openLen(o role.StreamletRef) int {
	if s := c.host.Streamlet(o.ID); s != nil {
		return s.Buf().Len()
	}
	if h := c.hostOf(o.Host); h != nil {
		if n, ok := h.Len(o.ID); ok {
			return n
		}
	}
	return 0
}

// Expire asks the leader's manager to expire the channel's streamlets
// through streamlet through (the retention budget). It waits for the
// network.
func (c *Cluster) Expire(channel string, through uint64) (int, error) {
	var e wire.NodeEnc
	e.Str8(channel)
	e.U64(through)
	var n int
	b, err := c.leaderCall(wire.OpExpire, e.B, func() ([]byte, error) {
		var err error
		n, err = c.mgr.Expire(channel, through)
		return nil, err
	})
	if err != nil || b == nil {
		return n, err
	}
	d := wire.NewNodeDec(wire.TypeNodeResponse, b)
	n = int(d.U32())
	return n, d.Done()
}

// Leadership returns who leads the metadata log as this node sees it.
func (c *Cluster) Leadership() metalog.Leadership {
	if rl := c.rlog.Load(); rl != nil {
		return rl.Leadership()
	}
	return metalog.Leadership{}
}

// TransferLeadership hands this node's leadership of the metadata log to
// node (a voter); only the leader may (tests, and operators' maintenance).
// It waits for the network (until the transfer is done or failed).
func (c *Cluster) TransferLeadership(node string) error {
	rl := c.rlog.Load()
	if rl == nil {
		return fmt.Errorf("%w: the metadata log has not started", role.ErrNotLeader)
	}
	return rl.TransferLeadership(node)
}
