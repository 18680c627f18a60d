package engine

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestReplication_OrdererCutFromFollowerResumes: N = 2; once the open
// streamlet of a channel is ordered by one node and followed by another,
// the orderer's packets to the follower are dropped for good (a one-way
// cut; the leader, a when it still leads, sees both alive). The follower
// acknowledges nothing more, so the streamlet's acknowledgements stop;
// after two RPC timeouts the orderer asks the leader to recover the
// streamlet without the link, and publishing resumes on a new streamlet
// whose orderer and followers reach each other: every publish gets its
// outcome within the bound (acknowledged, or refused as not stored), and
// the subscriber gets every acknowledged message once, in order, none
// announced lost. The publisher is on another node than the orderer (its
// NODE_APPEND waits at the orderer) or on the orderer itself (its PUBACK
// waits in the orderer's loop). Without the recovery neither is ever
// answered. The pair is whichever the placement chose (the leader hosts
// only when the others cannot, and leadership may move under load).
func TestReplication_OrdererCutFromFollowerResumes(t *testing.T) {
	nodes3 := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name      string
		pub, sub  int // indexes of a, b, c
		onOrderer bool
	}{
		{"publisher apart from the orderer", 0, 2, false},
		{"publisher on the orderer", 1, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cut atomic.Pointer[[2]string] // orderer, follower
			mutate := func(o *Options) {
				o.Replicas = 2
				// Long enough that the streamlet cut stays open through
				// the stall.
				o.LimitLife = 5 * time.Second
				o.LimitMsgs = 1000
				self := o.ServerName
				if tc.onOrderer && self == nodes3[tc.pub] {
					// The publisher's node is busier; the placement prefers it
					// as an orderer only so.
					o.Cluster.Capacity = 8
				}
				o.cutPeer = func(peer string) bool {
					p := cut.Load()
					return p != nil && p[0] == self && p[1] == peer
				}
			}
			a := startNode(t, "a", nil, mutate)
			seed := []string{a.clu().GossipAddr()}
			b := startNode(t, "b", seed, mutate)
			c := startNode(t, "c", seed, mutate)
			nodes := []*Server{a, b, c}
			eventually(t, waitFor, "three members everywhere", func() bool {
				for _, s := range nodes {
					if s.clu().Alive() != 3 {
						return false
					}
				}
				return true
			})
			ch := channelManagedBy(t, a, "a", "cut")
			pubNode := nodes[tc.pub].opts.ServerName
			run := publishThroughKill(t, nodes[tc.pub], nodes[tc.sub], ch, killPlan{n: 400, from: 130, within: 40 * time.Second, killWithin: 20 * 1000,
				fault: func() bool {
					open, _, ok := openHeld(a, ch)
					set := open.Set()
					if !ok || len(set) != 2 || (set[0] == pubNode) != tc.onOrderer || !openOn(a, ch, set[1], false)() {
						return false
					}
					cut.Store(&[2]string{set[0], set[1]})
					return true
				}})
			for _, g := range run.gaps {
				for p := range run.acked {
					if p >= g.From && p <= g.To {
						t.Fatalf("acknowledged position %d announced lost in %v", p, g)
					}
				}
			}
			// The bound: the stall timeout (two RPC timeouts) and a
			// heartbeat; the request (three RPC timeouts at most: the
			// recovery waits for a grant of the channel in progress, whose
			// host calls may meet the cut too) and, when it timed out, a
			// second one at once; the recovery's FENCE and SEAL_AT.
			if bound := 10 * a.opts.Cluster.RPCTimeout; run.longest > bound {
				t.Fatalf("a publish waited %v for its outcome after the cut, bound %v", run.longest, bound)
			}
			if a.mgr.Recoveries()+b.mgr.Recoveries()+c.mgr.Recoveries() == 0 {
				t.Fatal("no recovery ran at any leader")
			}
			// No streamlet still open pairs the cut orderer and
			// follower.
			info, _ := stateInfo(a, ch)
			for _, r := range info.Streamlets {
				if set := r.Set(); !r.Closed && len(set) > 1 {
					for _, f := range set[1:] {
						p := cut.Load()
						if (set[0] == p[0] && f == p[1]) || (set[0] == p[1] && f == p[0]) {
							t.Fatalf("open streamlet %d after the cut: replicas %v", r.ID, set)
						}
					}
				}
			}
		})
	}
}
