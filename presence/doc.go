// Package presence is a node's picture of who is in each channel
// (presence) and how busy each channel is (occupancy), for the whole
// cluster, and the replication that keeps the pictures of the nodes
// converging.
//
// A Registry holds, per channel, this node's local part (the members and
// counts of its own connections, which the gateway reports) and one part
// per other node (what that node last pushed). Queries (Query,
// Occupancy) read the sum. Every change that a watcher of the channel
// should see becomes a Delivery queued for the watcher's sink (an event
// loop of the gateway), in the order the registry applied the changes, so
// a loop that answers a query and later delivers the queued changes gives
// its subscriber a consistent picture: the changes it delivers after a
// query are a suffix of the history whose prefix the query showed, and
// joins and leaves are idempotent set operations.
//
// Replication is soft state, apart from the cluster's consensus log:
// each node pushes its local part to every other live node over node
// requests (PROTOCOL.md 9.5, PRESENCE_SYNC), one push in flight per peer
// (stop and wait: what changes meanwhile is batched into the next push),
// each numbered, a snapshot first and changes after it. A receiver that
// misses a push or restarted answers RESYNC and gets a snapshot. A node
// that leaves the membership (it left, or its failure detector declared
// it dead) is dropped from every other node's picture at once (Peers),
// its members leaving.
//
// Memory is bounded by Limits: the members one node stores for a channel
// (local and remote together) and the bytes of all its member entries.
// A local join past a bound is refused; a remote member past it is not
// stored (queries then say Partial; counts stay exact, since every push
// carries each channel's counts).
//
// Pure logic with a clock-free core: the Registry does no I/O and starts
// no goroutine; Syncer runs the pushes over a Caller (the cluster's node
// requests in production, an in-memory one in tests).
package presence
