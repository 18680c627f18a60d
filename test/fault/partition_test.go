//go:build faultsuite

package fault

import (
	"testing"
	"time"
)

// partitionCases are the partitions that separate one replica from the
// writer: replicated streamlets (--replicas 2) on 21 channels that a
// manages, with publishers and subscribers on every node; b and c are cut
// off from each other alone (both still reach a, the manager, and the
// clients), both ways or only b's packets to c, for longer than the
// bound, then healed. Streamlets that one of them orders and the other
// follows stop being acknowledged (a follower its orderer cannot reach,
// which a still sees alive): within two RPC timeouts the orderer asks a to
// recover the streamlet, and the channels continue on streamlets that do
// not pair b and c. Every publish gets its outcome within the bound
// (without the recovery the stalled ones wait for the heal); no
// acknowledged message may be lost (nor announced lost), none delivered
// twice, no position acknowledged twice; replayed from the start on every
// node after the heal, every channel holds them all. partition-manager
// cuts a, the manager, from b instead (below).
func partitionCases() []faultCase {
	byA21 := func(t *testing.T, names []string) []string { return managedBy(t, "fault.pa", 21, names, "a") }
	// cut drops packets from nodes i to j, and from j to i when both, for
	// the fault's length (longer than the bound), then heals.
	cut := func(i, j int, both bool) func(*topo) {
		return func(tp *topo) {
			undo := tp.dropToPeers(tp.nodes[i], tp.nodes[j])
			defer undo()
			if both {
				undoBack := tp.dropToPeers(tp.nodes[j], tp.nodes[i])
				defer undoBack()
			}
			time.Sleep(bound + 4*time.Second) // the fault's length
		}
	}
	return []faultCase{
		{name: "partition-replica", flags: []string{"--replicas", "2"}, noLoss: true, outcomeBound: true, needsNft: true,
			chans: byA21, pubs: []int{0, 1, 2}, subs: []int{0, 1, 2}, replay: true,
			fault: cut(1, 2, true)},
		// a, the manager of every channel, and b cut off from each other
		// alone: each sees the other down while both keep a majority with
		// c, which sees both alive. In b's view the channels have another
		// manager (b or c), to which b's gateway sends its grants; only a
		// is the manager of the full view (c's), and only a may continue
		// them: nothing acknowledged may be lost, no position acknowledged
		// twice.
		// b's live subscribers may be told GAP lost over acknowledged
		// messages (a known limit); the replay after the heal must have
		// them all.
		{name: "partition-manager", flags: []string{"--replicas", "2"}, noLoss: true, liveGapsOK: true, outcomeBound: true, needsNft: true,
			chans: byA21, pubs: []int{0, 1, 2}, subs: []int{0, 1, 2}, replay: true,
			fault: cut(0, 1, true)},
		// N = 3 on three nodes: every streamlet is on b and c; while the
		// cut holds, a streamlet ordered by one of them gets only a as
		// its other replica (degraded, counted and logged).
		{name: "one-way-replica-r3", flags: []string{"--replicas", "3"}, noLoss: true, outcomeBound: true, needsNft: true,
			chans: byA21, pubs: []int{0, 1, 2}, subs: []int{0, 1, 2}, replay: true,
			fault: cut(1, 2, false)},
		{name: "one-way-replica", flags: []string{"--replicas", "2"}, noLoss: true, outcomeBound: true, needsNft: true,
			chans: byA21, pubs: []int{0, 1, 2}, subs: []int{0, 1, 2}, replay: true,
			fault: cut(1, 2, false)},
	}
}
