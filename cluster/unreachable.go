package cluster

import (
	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/manager"
	"github.com/sluice-rtm/sluice/wire"
)

// A follower this node, the orderer, cannot reach (DESIGN.md
// "Replication"). The streamlet's records become visible, and its
// publishes acknowledged, only once every follower holds them; a follower
// that stops acknowledging while the channel's manager still sees it
// alive (a one-way cut, or a partition between the two hosts alone) would
// hold the acknowledgements until the link came back. So the heartbeat
// watches every sender (stallClock): once its follower has acknowledged
// nothing of what it was sent for stallAfter (two RPC timeouts, the same
// silence that ends a link), the orderer asks the channel's manager to
// recover the streamlet (UNREACHABLE, manager.Unreachable): fence, tails,
// seal at what every replica that answers holds, writers continue on a new
// streamlet whose orderer and followers reach each other. The answer is
// applied here too (applyRecovered), for when the manager could not reach
// this node: the acknowledgements it covers go out, the publishes beyond
// it get a retriable refusal (not stored), never a wrong PUBACK. The
// request goes to the leader of the metadata log, whose manager decides
// every change of the lists.

// stallClock watches one follower's acknowledgements (the heartbeat's;
// pure: time comes in as an argument).
type stallClock struct {
	lagging bool  // the follower held less than was written at the last look
	acked   int   // its acknowledged count at since
	since   int64 // when it last moved, or the lag was first seen
}

// observe takes the follower's acknowledged count and the records written
// at now, and reports whether it has lagged with no progress for at least
// after. A reported stall restarts the clock, so the next report comes
// after another full interval.
func (sc *stallClock) observe(acked, written int, now, after int64) bool {
	switch {
	case acked >= written:
		sc.lagging = false
		return false
	case !sc.lagging || acked != sc.acked:
		sc.lagging, sc.acked, sc.since = true, acked, now
		return false
	case now-sc.since < after:
		return false
	}
	sc.since = now
	return true
}

// stallAfter is how long a follower may acknowledge nothing of what it
// lags behind before the orderer asks for a recovery without it.
func (c *Cluster) stallAfter() int64 { return int64(2 * c.rpcTimeout()) }

// watchStall is the heartbeat's check of one sender at now (paused: the
// heartbeat itself ran late, so silence says nothing). A stall starts a
// recovery request on the pool, at most one per sender at a time.
func (sd *sender) watchStall(now int64, paused bool) {
	s := sd.s
	if _, final := s.Durable(); final {
		return
	}
	if paused {
		sd.stall.lagging = false // the clock starts again
		return
	}
	if !sd.stall.observe(int(sd.acked.Load()), s.Buf().Written(), now, sd.c.stallAfter()) {
		return
	}
	if !sd.asking.CompareAndSwap(false, true) {
		return
	}
	if !sd.c.Go(func() {
		defer sd.asking.Store(false)
		sd.c.askRecovery(s, sd.node)
	}) {
		sd.asking.Store(false)
	}
}

// askRecovery asks the manager of s's channel to recover s without the
// link to follower, and applies the answer. Runs on the pool.
func (c *Cluster) askRecovery(s *host.Streamlet, follower string) {
	req := unreachableReq{Channel: s.Channel(), ID: s.ID(), Orderer: c.self, Follower: follower}
	c.log.Warn("sluice cluster: a follower acknowledged nothing for two RPC timeouts; asking the manager to recover the streamlet",
		"channel", req.Channel, "streamlet", req.ID, "follower", follower, "written", s.Buf().Written(), "acknowledged", s.Buf().Len())
	r, err := c.unreachable(req)
	if err != nil {
		c.log.Warn("sluice cluster: recovery of a streamlet with an unreachable follower failed; asking again later",
			"channel", req.Channel, "streamlet", req.ID, "follower", follower, "err", err)
		return
	}
	c.applyRecovered(s, r)
}

// unreachable sends req to the leader's manager (here when this node
// leads).
func (c *Cluster) unreachable(req unreachableReq) (manager.Recovered, error) {
	var e wire.NodeEnc
	encUnreachable(&e, req)
	var r manager.Recovered
	b, err := c.leaderCall(wire.OpUnreachable, e.B, func() ([]byte, error) {
		var err error
		r, err = c.mgr.Unreachable(req.Channel, req.ID, req.Orderer, req.Follower)
		return nil, err
	})
	if err != nil || b == nil {
		return r, err
	}
	return decRecovered(b)
}

// applyRecovered ends this node's replica of s as the manager recovered
// the streamlet (the manager may not have reached it): sealed at the
// recovered length with the recovered replica set, so the publishes that
// length covers are acknowledged and the ones beyond refused; a lost
// streamlet is sealed at what is visible here (readers get GAP lost for
// it; nothing beyond was acknowledged). Nothing happens when the replica
// is final already (the manager's SEAL_AT reached it).
func (c *Cluster) applyRecovered(s *host.Streamlet, r manager.Recovered) {
	if _, final := s.Durable(); final {
		return
	}
	n, keep := int(r.Len), r.Replicas
	if r.Lost {
		n, _ = s.Durable()
		keep = nil
	}
	if err := s.SealAt(n, keep); err != nil {
		c.log.Warn("sluice cluster: applying a streamlet's recovery failed", "channel", s.Channel(), "streamlet", s.ID(), "err", err)
	}
}

// serveUnreachable is UNREACHABLE at the leader.
func (c *Cluster) serveUnreachable(req unreachableReq) ([]byte, error) {
	r, err := c.mgr.Unreachable(req.Channel, req.ID, req.Orderer, req.Follower)
	if err != nil {
		return nil, err
	}
	var e wire.NodeEnc
	encRecovered(&e, r)
	return e.B, nil
}
