package metalog

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// The reconcile loop: on every SetMembers, change of leadership and
// ReconcileInterval, a node with an empty log decides whether to bootstrap
// a cluster, and the leader applies plan's changes to the configuration,
// one at a time, each waited for (raft commits one configuration change at
// a time). Decisions are plan's and shouldBootstrap's; this is their I/O.

// reconcileState is what the loop keeps across rounds.
type reconcileState struct {
	clock  memberClock
	caught map[string]time.Time // since when each follower is caught up
}

func (r *Raft) reconcileLoop() {
	t := time.NewTicker(r.cfg.ReconcileInterval)
	defer t.Stop()
	var rs reconcileState
	for {
		select {
		case <-r.stop:
			return
		case <-r.kick:
		case <-t.C:
		}
		r.reconcile(&rs)
	}
}

// reconcile runs one round.
func (r *Raft) reconcile(rs *reconcileState) {
	defer r.rounds.Add(1)
	if !r.hasState.Load() && r.raft.LastIndex() > 0 {
		r.markState() // a leader added this node and replicated to it
	}
	servers, err := r.noteConfig()
	if err != nil {
		return // shut down
	}
	members, set := r.memberView()
	if !set {
		return // not before the membership is known: no cluster of one's own by mistake
	}
	if !r.hasState.Load() {
		self := members[len(members)-1]
		if shouldBootstrap(self, members, r.cfg.BootstrapExpect) {
			r.bootstrap(bootstrapVoters(self, members, r.cfg.MaxVoters))
		}
		return
	}
	if r.raft.State() != raft.Leader {
		rs.caught = nil
		return
	}
	now := time.Now()
	view := rs.clock.fill(members, servers, now)
	var peers map[string]peerState
	peers, rs.caught = peerStates(r.peers.snapshot(), rs.caught, now, r.raft.CommitIndex(), r.cfg.MaxLag, r.cfg.HeartbeatTimeout)
	changes := plan(planInput{
		Self: r.id, Now: now, Servers: servers, Members: view, Peers: peers,
		DeadAfter: r.cfg.DeadAfter, StableAfter: r.cfg.StableAfter, MaxVoters: r.cfg.MaxVoters,
	})
	for _, c := range changes {
		select {
		case <-r.stop:
			return
		default:
		}
		if err := r.applyChange(c); err != nil {
			r.log.Warn("metalog: configuration change failed", "change", c.Kind.String(), "server", c.ID, "reason", c.Reason, "err", err)
			return // the next round plans again from what is committed
		}
		r.log.Info("metalog: configuration changed", "change", c.Kind.String(), "server", c.ID, "addr", c.Addr, "reason", c.Reason)
	}
}

// applyChange makes one configuration change and waits until it is
// committed (or fails).
func (r *Raft) applyChange(c change) error {
	id, addr := raft.ServerID(c.ID), raft.ServerAddress(c.Addr)
	timeout := r.cfg.IOTimeout
	if c.Kind == transfer {
		return r.transferTo(id, addr)
	}
	return r.op(func() error {
		var f raft.Future
		switch c.Kind {
		case addNonvoter:
			f = r.raft.AddNonvoter(id, addr, 0, timeout)
		case promote:
			f = r.raft.AddVoter(id, addr, 0, timeout)
		case demote:
			f = r.raft.DemoteVoter(id, 0, timeout)
		case remove:
			f = r.raft.RemoveServer(id, 0, timeout)
		default:
			return errors.New("metalog: unknown configuration change")
		}
		return f.Error()
	})
}

// bootstrap starts a new cluster whose first configuration has voters
// (this node and members seen with empty logs, bootstrapVoters); the
// others are added by the reconcile loop of the leader elected.
func (r *Raft) bootstrap(voters []cfgServer) {
	servers := make([]raft.Server, 0, len(voters))
	for _, v := range voters {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v.ID), Address: raft.ServerAddress(v.Addr)})
	}
	err := r.op(func() error { return r.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error() })
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		r.log.Warn("metalog: bootstrap failed", "err", err)
		return
	}
	r.bootstraps.Add(1)
	r.log.Info("metalog: bootstrapped a new cluster", "server", r.id, "expect", r.cfg.BootstrapExpect, "voters", len(voters))
	r.markState()
}

// markState records that this node holds Raft state and tells OnAdvert,
// once. Called on the reconcile loop only.
func (r *Raft) markState() {
	if r.hasState.CompareAndSwap(false, true) && r.cfg.OnAdvert != nil {
		r.cfg.OnAdvert(r.Advert())
	}
}
