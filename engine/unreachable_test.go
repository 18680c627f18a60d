package engine

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestReplication_OrdererCutFromFollowerResumes: N = 2; once the open
// streamlet of a channel managed by a is ordered by b and followed by c,
// b's packets to c are dropped for good (a one-way cut; a, the manager,
// reaches both and sees both alive). c acknowledges nothing more, so the
// streamlet's acknowledgements stop; after two RPC timeouts b asks a to
// recover the streamlet without the link, and publishing resumes on a new
// streamlet whose orderer and followers reach each other: every publish
// gets its outcome within the bound (acknowledged, or refused as not
// stored), and the subscriber gets every acknowledged message once, in
// order, none announced lost. The publisher is on a (its NODE_APPEND waits
// at b) or on b itself (its PUBACK waits in b's loop). Without the
// recovery neither is ever answered.
func TestReplication_OrdererCutFromFollowerResumes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pub, sub int // indexes of a, b, c
	}{
		{"publisher on the manager", 0, 2},
		{"publisher on the orderer", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cut atomic.Bool
			mutate := func(o *Options) {
				o.Replicas = 2
				// Long enough that the streamlet cut stays open through
				// the stall.
				o.LimitLife = 5 * time.Second
				o.LimitMsgs = 1000
				if o.ServerName == "b" {
					o.cutPeer = func(peer string) bool { return peer == "c" && cut.Load() }
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
			run := publishThroughKill(t, nodes[tc.pub], nodes[tc.sub], ch, killPlan{n: 400, from: 130, within: 40 * time.Second, killWithin: 20 * 1000,
				fault: func() bool {
					open, _, ok := openHeld(a, ch)
					if !ok || open.Host != "b" || !openOn(a, ch, "c", false)() {
						return false
					}
					cut.Store(true)
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
			if a.mgr.Recoveries() == 0 {
				t.Fatal("no recovery ran at the manager")
			}
			// No streamlet still open pairs b and c as orderer and
			// follower.
			info, _ := stateInfo(a, ch)
			for _, r := range info.Streamlets {
				if set := r.Set(); !r.Closed && len(set) > 1 {
					for _, f := range set[1:] {
						if (set[0] == "b" && f == "c") || (set[0] == "c" && f == "b") {
							t.Fatalf("open streamlet %d after the cut: replicas %v", r.ID, set)
						}
					}
				}
			}
		})
	}
}
