// Package metalog is the cluster's replicated metadata log: an ordered log of
// commands applied, in the same order and exactly once, by a deterministic
// state machine (FSM) on every node.
//
// Two implementations share the Log interface:
//
//   - Single: one node, no disk, always the leader. Propose applies the
//     command synchronously, under a mutex, on the caller's goroutine. It is
//     what a server without a cluster runs: no data directory, no set-up.
//   - Raft: hashicorp/raft over an authenticated, encrypted TCP transport of
//     its own (the node handshake and sealed records of package wire), with a
//     write-ahead log and file snapshots in a data directory, automatic
//     bootstrap from the gossip membership, and a leader that keeps 1, 3 or 5
//     voters among the live members (reconcile.go).
//
// Commands and results are opaque bytes; package meta gives them meaning.
package metalog

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// FSM is the replicated state machine.
//
// Apply is called once per committed command, in log order, never
// concurrently with another Apply, Snapshot or Restore (Single: on the
// proposer's goroutine, under the log's mutex; Raft: on raft's FSM
// goroutine). It must be deterministic: no I/O, no clock, no randomness, no
// dependence on anything but the state and cmd, so every node computes the
// same state. cmd is read-only; Apply may keep it. The result goes back to
// the proposer (on the node that proposed; other nodes discard it).
//
// Snapshot captures the state at the last applied index; it is called
// between Applies, must be fast, and the returned Snapshot's Persist may run
// concurrently with later Applies (so the state must be captured, e.g.
// copied or made immutable, by Snapshot itself). Restore replaces the whole
// state with a snapshot's bytes; it is called between Applies. Single never
// calls Snapshot or Restore.
type FSM interface {
	Apply(index uint64, cmd []byte) []byte
	Snapshot() (Snapshot, error)
	Restore(r io.Reader) error
}

// Snapshot is a point-in-time copy of an FSM's state. Persist writes it
// (once; it may run concurrently with the FSM's later Applies) and Release
// is called when the log is done with it, after Persist or instead of it.
type Snapshot interface {
	Persist(w io.Writer) error
	Release()
}

// Log is a replicated log of commands applied by an FSM. Every method is
// safe for concurrent use.
type Log interface {
	// Propose appends cmd to the log and returns the FSM's result for it
	// and its index once it is committed and applied on this node. The log
	// keeps cmd: the caller must not modify it afterwards.
	//
	// On a node that is not the leader it fails at once with a
	// *NotLeaderError (wrapping ErrNotLeader) that names the leader if
	// known; nothing is forwarded, the caller routes to the leader. ctx
	// bounds the wait to hand cmd to the log; once handed over, Propose
	// waits for the outcome, which comes at the latest when a leader that
	// lost its quorum steps down (the leader lease): then it fails with
	// ErrLeadershipLost, and the entry may or may not be committed (a
	// compare-and-set command, retried against the new leader's state, is
	// safe either way). A command longer than the log's limit fails with
	// ErrTooLarge.
	Propose(ctx context.Context, cmd []byte) (result []byte, index uint64, err error)

	// Barrier returns once every entry committed before the call is applied
	// on this node. Only the leader can do this (others get a
	// *NotLeaderError); a new leader calls it before serving from its state.
	// ctx bounds the wait to start the barrier, as for Propose.
	Barrier(ctx context.Context) error

	// Leader returns the node name of the current leader ("" if unknown)
	// and whether it is this node.
	Leader() (node string, self bool)

	// Leadership returns the current leadership state, with its term.
	Leadership() Leadership

	// LeadershipChanged returns a channel (the same one on every call, with
	// one slot) that receives a signal after every change of Leadership: a
	// new leader, no leader, this node gaining or losing leadership, a new
	// term. Signals coalesce: a slow reader gets one signal for several
	// changes and must read Leadership to learn the latest state (its Term
	// tells a leadership lost and regained apart). One value is pending at
	// the start, so a reader learns the initial state at once. One reader.
	LeadershipChanged() <-chan struct{}

	// Status returns a snapshot of the log's state for operators.
	Status() Status

	// Shutdown stops the log and waits for every goroutine it started. Later
	// calls to the other methods fail with ErrShutdown (Leader and Status
	// keep answering). It is idempotent.
	Shutdown() error
}

// Leadership is a node's view of who leads the log.
type Leadership struct {
	Term     uint64 // the current term (Single: always 1)
	Leader   string // the leader's node name, "" if unknown
	LeaderID string // the leader's server id, "" if unknown
	Self     bool   // this node is the leader
}

// Server is one member of the Raft configuration.
type Server struct {
	Node string // node name (from the server id)
	ID   string // server id: node name, '@', incarnation (identity.go)
	Addr string // Raft transport address
}

// Status is what Status reports.
type Status struct {
	Node     string // this node's name
	ServerID string // this node's server id
	State    string // "leader", "follower", "candidate" or "shutdown"
	Leadership
	Voters    []Server // the latest configuration's voters, sorted by node
	NonVoters []Server // its non-voters, sorted by node

	FirstIndex   uint64 // first index held in the log store (0: empty)
	LastIndex    uint64 // last index stored (log or snapshot)
	CommitIndex  uint64 // last index known committed
	AppliedIndex uint64 // last index applied by the FSM on this node

	SnapshotIndex uint64 // index of the latest snapshot taken or installed (0: none)
	SnapshotTerm  uint64
}

// Errors.
var (
	// ErrNotLeader is wrapped by *NotLeaderError.
	ErrNotLeader = errors.New("metalog: this node is not the leader")
	// ErrLeadershipLost: the leader lost its leadership while the entry
	// was in flight; the entry may or may not be committed.
	ErrLeadershipLost = errors.New("metalog: leadership lost while the entry was in flight (it may still be committed)")
	// ErrShutdown: the log was shut down.
	ErrShutdown = errors.New("metalog: shut down")
	// ErrTooLarge: a command over the log's limit (Config.MaxCommand).
	ErrTooLarge = errors.New("metalog: command too large")
)

// NotLeaderError is the error of Propose and Barrier on a node that is not
// the leader. It wraps ErrNotLeader.
type NotLeaderError struct {
	Leader string // the leader's node name, "" if unknown
}

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return ErrNotLeader.Error() + " (leader unknown)"
	}
	return fmt.Sprintf("%v (the leader is %q)", ErrNotLeader, e.Leader)
}

// Unwrap returns ErrNotLeader.
func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

// DefaultMaxCommand is the default limit on a command's length: room for
// package meta's largest command (an Expire or Drop batch of 4,096 entries
// with 255-byte names, about 1.1 MB).
const DefaultMaxCommand = 2 << 20
