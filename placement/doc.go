// Package placement decides where Sluice puts things: which live node manages
// a channel, and which node hosts a channel's next streamlet.
//
// The package is pure and deterministic. It does no I/O, reads no clock and
// uses no global or hidden randomness. The input is a membership snapshot (the
// nodes, their capacities, states and load reports) and the output is a
// decision value that the caller carries out. Equal inputs give equal
// decisions, whatever order the nodes were listed in.
//
// # Channel managers
//
// [Snapshot.Manager] uses consistent hashing: the channel name is hashed with
// xxhash (64 bits) onto a ring of points, and the channel belongs to the node
// that owns the first point at or after that hash (wrapping around). Each node
// owns a number of points that grows with its capacity (see
// [Options.PointsPerUnit]), and a point's position depends only on the node's
// ID and the point's number. So a node joining or leaving moves only the
// channels on the arcs it gains or loses: about capacity/total capacity of
// them, which is 1/n for n equal nodes. Only Alive nodes manage channels.
//
// # Hosting nodes: consistent hashing with bounded loads
//
// [Snapshot.Host] follows Mirrokni, Thorup and Zadimoghaddam, "Consistent
// Hashing with Bounded Loads" (2016), weighted by capacity. The streamlet's
// key is the channel name mixed with the streamlet's sequence number in the
// channel, so successive streamlets of one channel start at unrelated ring
// points and spread over the nodes. From that point the ring is walked
// clockwise, and of the first [Options.Choices] distinct nodes that stay
// within their limit (2 by default; 1 is the classic algorithm, where the
// first such node wins) the one with the smallest load-after/capacity takes
// the streamlet. With
//
//	w     = Scorer.StreamletWeight(channel load)   the new streamlet's weight
//	L_i   = node i's load (Scorer.NodeLoad of its report, plus what
//	        Commit/AddLoad added since)
//	T     = sum of L_i over Alive nodes
//	C     = sum of Capacity over Alive nodes
//	limit_i = (1+e) * (T + w) * Capacity_i / C
//
// node i fits when L_i + w <= limit_i: its load after taking the streamlet
// is at most (1+e) times its capacity-weighted fair share of the total load
// after the placement. The test keeps a relative safety margin of 1e-9, so the
// bound still holds when someone re-evaluates it with a different float
// summation order.
//
// The walk examines at most [Options.MaxProbes] ring points; if it finds
// fewer than Choices fitting nodes there, the best of those it found wins. If
// none fits,
// Host scans every Alive node and takes the one with the smallest
// (L_i + w) / Capacity_i, ties going to the smallest node ID. Because the
// limit is the same multiple of capacity for every node, that node fits
// whenever any node fits; so the bound is violated only when no Alive node at
// all can take the streamlet within it, and the Decision then says
// Overflow. That cannot happen while w <= e * T * Cmin / C, where Cmin is the
// smallest Alive capacity (the streamlet weighs at most e times the smallest
// node's fair share): the node with the least load per capacity has
// L_i <= T*Capacity_i/C, so L_i + w <= (1+e)*T*Capacity_i/C <= limit_i. It
// can happen on an almost empty cluster, or for a channel hotter than e times
// a node's fair share; the streamlet then goes to the node that ends up least
// loaded relative to its capacity, which is the best any single node can do.
//
// # Guarantees
//
//   - Determinism: the same nodes (in any order), options, load adjustments
//     and arguments give the same decision.
//   - Manager and Host only ever return Alive nodes. Draining and Down nodes
//     are never chosen; when no node is Alive both report false.
//   - Host never returns a node whose load would exceed its limit if any Alive
//     node could take the streamlet within its limit (Decision.Overflow is
//     false exactly then), and never overflows while w <= e*T*Cmin/C. The
//     bound is a property of each decision: a node that takes a streamlet is
//     within its limit right after, and while loads only grow (Place after
//     Place) it stays within (1+e) x its share of the current total. A node
//     reported above its share is simply not given more. Loads that fall
//     later elsewhere (AddLoad < 0, SetLoad) or a join (a new snapshot with
//     more capacity) can leave a node above its new share until its
//     streamlets close. Nothing is ever moved.
//   - Spread: successive streamlets of one channel (seq, seq+1, ...) start
//     their walks at independent ring points, so a hot channel's streamlets
//     land on nodes drawn about in proportion to capacity, not on one node.
//   - Movement: Manager changes only for channels on the ring arcs that a
//     joining node takes or a leaving node gives up (expected share
//     Capacity/C). Host decisions also depend on loads, so a join moves more
//     new streamlets than that: toward the new, empty node, as intended.
//   - Cost: a decision allocates nothing. Manager is a hash plus a bucketed
//     ring lookup (O(1) expected); Host adds one probe per node that is full,
//     expected O(1/e^2) probes in the worst case of the bounded-loads
//     analysis, at most MaxProbes before the O(n) fallback scan. Choices
//     = 2 costs about one more probe than Choices = 1.
//
// # Concurrency
//
// A Snapshot is a value owned by its caller. The read-only methods (Manager,
// Host, Len, Node, Load, Total, Index, Options) may run concurrently with each
// other. The mutating methods (Commit, AddLoad, SetLoad, Place) need exclusive
// access: no other method may run on the same Snapshot at the same time.
// Clone gives an independent copy that shares the immutable ring.
package placement
