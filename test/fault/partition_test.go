//go:build faultsuite

package fault

import (
	"slices"
	"time"
)

// partitionCases are the partitions that separate one replica from the
// writer: replicated streamlets (--replicas 2) on 21 channels, with
// publishers and subscribers on every node. The two nodes that do not
// lead the metadata log are cut off from each other alone (both still
// reach the leader, which manages every channel, and the clients), both
// ways or only one's packets to the other, for longer than the bound,
// then healed. Streamlets that one of them orders and the other follows
// stop being acknowledged (a follower its orderer cannot reach, which the
// leader still sees alive): within two RPC timeouts the orderer asks the
// leader to recover the streamlet, and the channels continue on
// streamlets that do not pair the two. Every publish gets its outcome
// within the bound (without the recovery the stalled ones wait for the
// heal); no acknowledged message may be lost (nor announced lost), none
// delivered twice, no position acknowledged twice; replayed from the
// start on every node after the heal, every channel holds them all.
// partition-leader cuts the leader from one other node instead (below).
func partitionCases() []faultCase {
	chans := chanNames("fault.pa", 21)
	// cut drops packets from the node from(leader) to the node to(leader)
	// (and back when both) for the fault's length (longer than the bound),
	// then heals; leader is the metadata log's leader when it strikes.
	cut := func(from, to func(leader int) int, both bool) func(*topo) {
		return func(tp *topo) {
			l := slices.Index(tp.names(), tp.leaderName())
			i, j := from(l), to(l)
			tp.t.Logf("the leader is %s; cutting %s -> %s%s", tp.nodes[l].name, tp.nodes[i].name, tp.nodes[j].name, pick(both, " both ways", ""))
			undo := tp.dropToPeers(tp.nodes[i], tp.nodes[j])
			defer undo()
			if both {
				undoBack := tp.dropToPeers(tp.nodes[j], tp.nodes[i])
				defer undoBack()
			}
			time.Sleep(bound + 4*time.Second) // the fault's length
		}
	}
	leader := func(l int) int { return l }
	other1 := func(l int) int { return (l + 1) % 3 }
	other2 := func(l int) int { return (l + 2) % 3 }
	return []faultCase{
		{name: "partition-replica", flags: []string{"--replicas", "2"}, noLoss: true, outcomeBound: true, needsNft: true,
			chans: chans, pubs: []int{0, 1, 2}, subs: []int{0, 1, 2}, replay: true,
			fault: cut(other1, other2, true)},
		// The leader and another node cut off from each other alone:
		// each sees the other down while both keep a majority with the
		// third, which sees both alive. The leader keeps its lease on the
		// log through the third node (or loses it, and a new one is
		// elected): either way only the committed lists decide, so
		// nothing acknowledged may be lost or announced lost to a live
		// subscriber, no position acknowledged twice. The cut node's
		// gateway reaches the leader through no link: its grants fail
		// until the cut heals or it is sent elsewhere.
		{name: "partition-leader", flags: []string{"--replicas", "2"}, noLoss: true, outcomeBound: true, needsNft: true,
			chans: chans, pubs: []int{0, 1, 2}, subs: []int{0, 1, 2}, replay: true,
			fault: cut(leader, other1, true)},
		// N = 3 on three nodes: every streamlet is on every node; while
		// the cut holds, a streamlet ordered by one of the two gets only
		// the leader as its other replica (degraded, counted and logged).
		{name: "one-way-replica-r3", flags: []string{"--replicas", "3"}, noLoss: true, outcomeBound: true, needsNft: true,
			chans: chans, pubs: []int{0, 1, 2}, subs: []int{0, 1, 2}, replay: true,
			fault: cut(other1, other2, false)},
		{name: "one-way-replica", flags: []string{"--replicas", "2"}, noLoss: true, outcomeBound: true, needsNft: true,
			chans: chans, pubs: []int{0, 1, 2}, subs: []int{0, 1, 2}, replay: true,
			fault: cut(other1, other2, false)},
	}
}
