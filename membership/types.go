// Package membership is Sluice's cluster membership and failure detection.
//
// It wraps github.com/hashicorp/memberlist (SWIM gossip): every node runs a
// Node, which binds one TCP and one UDP socket on the same port, probes its
// peers, and gossips a small opaque metadata blob per node (Sluice stores the
// node's client address and load report there). The package never interprets
// the metadata.
//
// memberlist reports membership changes through a delegate called on its own
// goroutines; this package copies each change into a table of Member values
// under its own lock, so Members and All return race-free snapshots, and
// forwards the change to Config.OnChange as an Event.
package membership

import (
	"errors"
	"strconv"
)

// MetaMax is the largest metadata blob a node may carry, in bytes. It is
// memberlist's own limit for node meta (memberlist.MetaMaxSize).
const MetaMax = 512

// NameMax is the longest node name accepted, in bytes.
const NameMax = 64

// Sentinel errors. Errors returned by this package wrap one of these with
// context; test for them with errors.Is.
var (
	// ErrInvalidConfig reports a Config that cannot be used (bad name,
	// unparsable address, negative duration).
	ErrInvalidConfig = errors.New("membership: invalid config")
	// ErrMetaTooLarge reports metadata longer than MetaMax bytes.
	ErrMetaTooLarge = errors.New("membership: metadata too large")
	// ErrNoSeedReachable reports a Join in which no given address could be
	// contacted.
	ErrNoSeedReachable = errors.New("membership: no seed reachable")
	// ErrTimeout reports that a broadcast (UpdateMeta, Leave) was not
	// confirmed sent to a peer within the timeout. The change is still queued
	// and gossiped; only the confirmation is missing.
	ErrTimeout = errors.New("membership: broadcast timeout")
	// ErrClosed reports an operation on a Node that has left the cluster or
	// has been shut down.
	ErrClosed = errors.New("membership: node closed")
)

// EventKind says what happened to a member.
type EventKind uint8

const (
	// EventJoin: a member became alive (new, or back after Dead/Left).
	EventJoin EventKind = iota
	// EventLeave: a member left gracefully or was declared dead.
	EventLeave
	// EventUpdate: an alive member's metadata changed.
	EventUpdate
)

// String returns "join", "leave" or "update".
func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventUpdate:
		return "update"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one membership change, passed to Config.OnChange. Member is a
// snapshot taken when the change was applied; the receiver owns it, including
// Member.Meta.
type Event struct {
	Kind   EventKind
	Member Member
}

// State is a member's liveness as this node last learned it.
type State uint8

const (
	// Alive: the member answers probes (or has not yet been declared dead).
	Alive State = iota
	// Suspect: the member failed a probe and may be declared dead soon.
	// memberlist v0.7.0 does not report suspicion to its delegates, so this
	// package currently reports a suspected member as Alive until it is
	// declared Dead; the value is part of the API so that callers and
	// `sluice cluster status` handle it once it can be observed.
	Suspect
	// Dead: the member stopped answering and was declared failed.
	Dead
	// Left: the member announced a graceful leave.
	Left
)

// String returns "alive", "suspect", "dead" or "left".
func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	case Left:
		return "left"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Member is a snapshot of one cluster member. Values returned by this package
// are copies: the caller may keep and modify them, Meta included.
type Member struct {
	Name  string
	Addr  string // gossip address "host:port" the member advertises
	Meta  []byte // the member's metadata, at most MetaMax bytes
	State State
	Local bool // this node
}

// live reports whether m counts as a current member (Alive or Suspect).
func (m *Member) live() bool { return m.State == Alive || m.State == Suspect }

func (m Member) clone() Member {
	if m.Meta != nil {
		m.Meta = append([]byte(nil), m.Meta...)
	}
	return m
}
