package cluster

import "time"

// Quorum. A node acts as a channel manager (grants writes, opens
// streamlets) and serves clients only while it sees a strict majority of
// the cluster's known members alive. The known members are every node
// seen alive in the last forgetMember, except those that left gracefully
// (a drained node leaves; a killed or cut-off one does not). So of the
// two sides of a partition at most one can continue a channel: the other
// refuses publishes (manager.ErrNoQuorum; UNAVAILABLE: not stored) and, once
// that has lasted awayAfter, sends its clients away (GOAWAY UNAVAILABLE,
// then refuses their HELLO), and they resume on a
// node of the majority. Without it a node cut off from the others
// managed every channel alone, acknowledged publishes in incarnations
// of its own that the majority's subscribers never heard of, and after
// the partition healed these were neither delivered nor reported lost
// anywhere but on that node (DESIGN.md, "Positions are never reused").
//
// When the node loses or regains its quorum, it forgets the channels it
// manages: what it built or kept while it might not have been the only
// manager is rebuilt from the hosts at the next use.

// forgetMember is how long a member stays known after it was last seen
// alive (a node that died for good stops counting after it).
const forgetMember = time.Minute

// hasQuorum reports whether alive members are a strict majority of known
// ones (alive ones included).
func hasQuorum(alive, known int) bool { return 2*alive > known }

// updateKnown records the members seen alive at now, drops those that
// left and those not seen alive for forget, and returns how many are
// known. known maps names to when they were last seen alive (unix ns).
func updateKnown(known map[string]int64, alive, left []string, now int64, forget time.Duration) int {
	for _, n := range alive {
		known[n] = now
	}
	for _, n := range left {
		delete(known, n)
	}
	for n, at := range known {
		if now-at > int64(forget) {
			delete(known, n)
		}
	}
	return len(known)
}

// Quorate reports whether the node has its quorum now: the members
// alive in its view that it can reach are a majority of the known ones.
// It is computed at each call, so that a link failure (markDown) takes
// effect at once, before the next refresh acts on the change.
func (c *Cluster) Quorate() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.quorumLocked()
}

// quorumLocked is quorate with c.mu held.
func (c *Cluster) quorumLocked() bool {
	reachable := 0
	for name := range c.members {
		if !c.unreach[name] || name == c.self {
			reachable++
		}
	}
	return len(c.known) == 0 || hasQuorum(reachable, len(c.known))
}

// setQuorum records the node's quorum after a refresh and acts on a
// change: the managed channels are forgotten; the clients are sent away
// once the loss has lasted awayAfter (checkAway).
func (c *Cluster) setQuorum(ok bool) {
	if c.noQuorum.Load() == !ok {
		return
	}
	c.noQuorum.Store(!ok)
	c.mgr.ForgetAll()
	if ok {
		c.noQuorumSince.Store(0)
		c.away.Store(false)
		c.log.Warn("sluice cluster: a majority of the cluster is reachable again; serving clients")
		return
	}
	c.noQuorumSince.Store(c.now().UnixNano())
	c.log.Warn("sluice cluster: cut off from the majority of the cluster; refusing publishes")
}

// awayAfter is how long a node is without quorum before it sends its
// clients elsewhere: a link that failed once and is dialed again at the
// next heartbeat does not cost the clients their connections.
func (c *Cluster) awayAfter() time.Duration { return c.StaleAfter() }

// clientsAway decides, at now, whether a node without quorum since since
// (unix ns, 0: it has its quorum) sends its clients away.
func clientsAway(now, since int64, after time.Duration) bool {
	return since != 0 && now-since >= int64(after)
}

// checkAway sends the clients away once the loss of quorum has lasted
// awayAfter (the heartbeat).
func (c *Cluster) checkAway(now time.Time) {
	if !clientsAway(now.UnixNano(), c.noQuorumSince.Load(), c.awayAfter()) || c.away.Load() {
		return
	}
	c.away.Store(true)
	c.log.Warn("sluice cluster: still cut off from the majority of the cluster; sending clients away")
	c.gw.CutOff()
}

// RefusesClients reports whether the node sends clients away (it has
// been without quorum for awayAfter): HELLO is refused meanwhile.
func (c *Cluster) RefusesClients() bool { return c.away.Load() }
