package cluster

import (
	"context"
	"time"

	"github.com/sluice-rtm/sluice/cluster/metalog"
	"github.com/sluice-rtm/sluice/cluster/view"
	"github.com/sluice-rtm/sluice/manager"
	"github.com/sluice-rtm/sluice/membership"
	"github.com/sluice-rtm/sluice/placement"
	"github.com/sluice-rtm/sluice/role"
)

// The membership and the view (package cluster/view): the membership
// (memberlist) reports the live members and carries each node's gossiped
// metadata (view.Meta); run feeds the view from it at every change and
// gossips this node's load report; refresh passes the members on to the
// metadata log, the gateway and the services.

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
	c.view.UpdateLocal(func(m *view.Meta) {
		m.Streamlets = int(ld.Hosted)
		m.Channels = c.st.Len()
		m.Conns = c.gw.Conns()
		m.MsgsIn = float64(in-c.lastIn) / sec
		m.BytesIn = float64(bytes-c.lastBytes) / sec
	})
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
	var live []view.Member
	var rm []metalog.Member
	for _, m := range ml.All() {
		var meta view.Meta
		if m.Local {
			meta = c.view.Local()
		} else if d, ok := view.DecodeMeta(m.Meta); ok {
			meta = d
		} else {
			continue
		}
		alive := m.State == membership.Alive || m.State == membership.Suspect
		rm = append(rm, metalog.Member{Name: m.Name, Addr: meta.Raft, ServerID: meta.SID, Bootstrapped: meta.Boot,
			Alive: alive, Left: m.State == membership.Left, Draining: meta.Drain})
		if alive {
			live = append(live, view.Member{Name: m.Name, Meta: meta})
		}
	}
	gone := c.view.Set(live)
	c.tellService(live)
	if rl := c.rlog.Load(); rl != nil {
		rl.SetMembers(rm)
	}
	for _, name := range gone {
		c.gw.HostDown(name)
		c.endCopies(name)
	}
	c.gw.SetNodes(c.view.ClientAddrs(c.clientAddr))
	c.pokeLeader()
}

// hostOf returns node's Host role: this node's host, or a remote one when
// node is a live member not marked down; nil otherwise.
func (c *Cluster) hostOf(node string) role.Host {
	if node == c.self {
		return c.host
	}
	if !c.view.Reachable(node) {
		return nil
	}
	return remoteHost{c, node}
}

// Reachable reports whether node is a live member this node's links
// reach (not marked down); this node counts.
func (c *Cluster) Reachable(node string) bool { return c.view.Reachable(node) }

// Live reports whether node is a live member (alive or suspected by the
// membership, reachable from here or not); this node counts.
func (c *Cluster) Live(node string) bool { return c.view.Live(node) }

// Alive counts the members in the node's view that are not marked down.
func (c *Cluster) Alive() int { return c.view.Alive() }

// GossipAddr returns the membership's address ("" before Start).
func (c *Cluster) GossipAddr() string {
	if ml := c.ml.Load(); ml != nil {
		return ml.Addr()
	}
	return ""
}

// ManagerHooks is the cluster as this node's manager sees it: the nodes
// (manager.Cluster) and the metadata log it commits to (manager.Log).
type ManagerHooks interface {
	manager.Cluster
	manager.Log
}

// managerHooks implements ManagerHooks.
type managerHooks struct{ c *Cluster }

// Hooks returns the cluster as the manager's Cluster and Log.
func (c *Cluster) Hooks() ManagerHooks { return managerHooks{c} }

func (h managerHooks) Propose(ctx context.Context, cmd []byte) ([]byte, uint64, error) {
	return h.c.propose(ctx, cmd)
}

func (h managerHooks) HostOf(node string) role.Host { return h.c.hostOf(node) }
func (h managerHooks) Usable(node string) bool      { return h.c.view.Usable(node) }
func (h managerHooks) Gone(node string) bool        { return h.c.view.Gone(node) }
func (h managerHooks) Go(f func()) bool             { return h.c.Go(f) }
func (h managerHooks) Copy(to, ch string, epoch uint64, ref role.StreamletRef) error {
	return h.c.copyTo(to, ch, epoch, ref)
}

// Choose picks the host of the channel's next streamlet (view.Choose).
func (h managerHooks) Choose(ch string, seq uint64, load manager.Load, exclude []string) (string, bool) {
	cl := placement.ChannelLoad{MsgsPerSec: load.MsgsPerSec, BytesPerSec: load.BytesPerSec, Subscribers: load.Readers}
	return h.c.view.Choose(ch, seq, cl, exclude)
}
