package manager

import (
	"errors"
	"fmt"
)

// A manager acts on a channel only while a majority of the nodes agree it
// is the channel's manager (DESIGN.md, "Under pauses and partitions"). A
// node's view leaves out the members whose links failed: two nodes cut
// off from each other alone both keep a majority with the others, and
// each manages, in its partial view, channels the full view gives to the
// other. Quorum does not keep those apart, and neither does a successor
// compare-and-set when the predecessor's host is one of the two (the one
// that cannot reach it lists it lost and continues above its range, the
// other seals it at its real end and continues there: positions
// acknowledged twice). So before a manager opens any streamlet, and
// before it fences or seals one in a recovery, it confirms its role
// (Cluster.Confirm: every live node names the channel's manager in its own
// view; a strict majority of the known nodes must name this one).
// Majorities intersect and a node that still sees the full view's manager
// names it, so the partial view's manager is refused: it drops its state
// (a refused manager's list is nobody's) and the writer gets a retriable
// refusal. A single node confirms nothing.

// ErrNotManager: a majority of the cluster's nodes does not name this
// node the channel's manager in their views; nothing was opened or fenced
// (retriable: the views agree again once the cut heals or the membership
// settles).
var ErrNotManager = errors.New("manager: a majority of the nodes does not name this node the channel's manager")

// confirm confirms this node's role as channel's manager (no lock held:
// it waits for the network). It returns nil on a single node.
func (m *Manager) confirm(channel string) error {
	if m.cl == nil {
		return nil
	}
	m.confirms.Add(1)
	ok, other := m.cl.Confirm(channel)
	if ok {
		return nil
	}
	m.refused.Add(1)
	if m.cfg.Log != nil {
		m.cfg.Log.Info("sluice cluster: not confirmed as a channel's manager; refusing", "channel", channel, "majority_names", other)
	}
	return fmt.Errorf("%w: %q (the others name %q)", ErrNotManager, channel, other)
}

// Confirms returns how many confirmations this manager asked for and how
// many were refused (metrics, status). Safe for concurrent use.
func (m *Manager) Confirms() (asked, refused int64) { return m.confirms.Load(), m.refused.Load() }
