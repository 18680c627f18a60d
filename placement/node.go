package placement

import (
	"fmt"
	"math"
)

// NodeID names a node. It is compared as a string; the empty ID is invalid.
type NodeID string

// State is a node's membership state.
type State uint8

// Node states. Only Alive nodes manage channels or receive new streamlets.
// The zero State is Alive.
const (
	// Alive: a healthy member; eligible for every role.
	Alive State = iota
	// Draining: leaving gracefully. Keeps the streamlets it hosts until they
	// close, but is never chosen as manager or host, and its load and
	// capacity are left out of T and C.
	Draining
	// Down: failed or gone. Never chosen; load and capacity are ignored.
	Down
)

// String returns "alive", "draining", "down" or "state(N)".
func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Draining:
		return "draining"
	case Down:
		return "down"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// NodeLoad is a node's own load report (node-specific load data). Rates are
// per second over the node's reporting window. All fields must be finite and
// non-negative; CPU and Mem are utilisation fractions in [0,1].
type NodeLoad struct {
	Streamlets     int     // streamlets hosted, open or closed
	MsgsInPerSec   float64 // messages appended per second
	MsgsOutPerSec  float64 // messages sent to readers per second
	BytesInPerSec  float64 // payload bytes appended per second
	BytesOutPerSec float64 // payload bytes sent to readers per second
	Conns          int     // open connections
	CPU            float64 // CPU utilisation, 0..1
	Mem            float64 // memory utilisation, 0..1
}

func (l *NodeLoad) valid() bool {
	return l.Streamlets >= 0 && l.Conns >= 0 &&
		nonNeg(l.MsgsInPerSec) && nonNeg(l.MsgsOutPerSec) &&
		nonNeg(l.BytesInPerSec) && nonNeg(l.BytesOutPerSec) &&
		nonNeg(l.CPU) && l.CPU <= 1 && nonNeg(l.Mem) && l.Mem <= 1
}

// ChannelLoad is a channel's own load data (channel-specific load data), as
// measured by its manager: the publish rate into the channel and how many
// subscribers read it.
type ChannelLoad struct {
	MsgsPerSec  float64 // messages published per second
	BytesPerSec float64 // payload bytes published per second
	Subscribers int     // current subscribers, all gateways together
	// LimitMsgs and LimitBytes are the channel's streamlet limits
	// (limit-msgs, limit-size) when a channel rule overrides the defaults;
	// zero means the scorer's own.
	LimitMsgs, LimitBytes float64
}

// Node is one member of the cluster as the snapshot sees it.
type Node struct {
	ID NodeID
	// Capacity is the node's relative size (for example its CPU cores), a
	// positive finite number in the unit of Options.CapacityUnit. Fair
	// shares and ring points are proportional to it.
	Capacity float64
	State    State // Alive (the zero value), Draining or Down
	Load     NodeLoad
}

func (n *Node) validate() error {
	if n.ID == "" {
		return fmt.Errorf("empty ID: %w", ErrInvalidNode)
	}
	if !(n.Capacity > 0) || math.IsInf(n.Capacity, 0) {
		return fmt.Errorf("node %q: capacity %v: %w", n.ID, n.Capacity, ErrInvalidNode)
	}
	if n.State > Down {
		return fmt.Errorf("node %q: %v: %w", n.ID, n.State, ErrInvalidNode)
	}
	if !n.Load.valid() {
		return fmt.Errorf("node %q: load report %+v: %w", n.ID, n.Load, ErrInvalidNode)
	}
	return nil
}

// nonNeg reports whether x is finite and >= 0.
func nonNeg(x float64) bool { return x >= 0 && !math.IsInf(x, 1) }
