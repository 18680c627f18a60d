package cluster

import (
	"sync"

	"github.com/sluice-rtm/sluice/wire"
)

// MANAGER (PROTOCOL.md 9.5): which node manages a channel in the answering
// node's view. A node's view leaves out the members whose links failed, so
// two nodes cut off from each other alone (both still reach the others)
// each see the other down while both keep a majority: a channel one of
// them manages has another manager in the other's partial view, and that
// view's gateway sends its grants there. So a manager confirms its role
// with a strict majority of the known nodes, each answering from its own
// view, before it opens a streamlet or fences one (manager.Cluster.Confirm):
// majorities intersect, and a node that sees the real manager alive names
// it, so the partial view's manager is refused. Through the consistent
// hashing of placement.Snapshot.Manager, the manager of the full view is
// the manager of every view that contains it: a partition never moves a
// channel away from a node that still sees a majority.

// decManagerResult decodes a MANAGER result: the manager's name, empty
// when no live node manages the channel in the answering node's view.
func decManagerResult(b []byte) (string, error) {
	d := wire.NewNodeDec(wire.TypeNodeResponse, b)
	m := d.Str8()
	if err := d.Done(); err != nil {
		return "", err
	}
	return m, nil
}

// managerHere answers MANAGER at this node: the channel's manager in its
// view ("" when none).
func (c *Cluster) managerHere(channel string) string {
	m, ok := c.managerOf(channel)
	if !ok {
		return ""
	}
	return m
}

// confirmed is the pure decision of a confirmation: self may act as the
// channel's manager when a strict majority of the known nodes named it
// (names: one per node that answered, this node's own included). other is
// the node named most often besides self, for the refusal's text.
func confirmed(self string, names []string, known int) (ok bool, other string) {
	votes := 0
	count := map[string]int{}
	for _, n := range names {
		if n == self {
			votes++
			continue
		}
		if n != "" {
			count[n]++
			if count[n] > count[other] || (count[n] == count[other] && n < other) {
				other = n
			}
		}
	}
	return 2*votes > max(known, len(names)), other
}

// confirm asks every live node which node manages channel in its view
// (MANAGER, in parallel on the owned pool; this node answers from its own
// view directly, and refuses at once when that names another node) and reports whether a strict majority of the known nodes
// named this node; otherwise the node most of the others named (""
// if none). A node that does not answer names nobody. It waits for the
// network, with no lock held (manager.Cluster.Confirm).
func (c *Cluster) confirm(channel string) (bool, string) {
	own := c.managerHere(channel)
	if own != c.self {
		return false, own // this node's own view names another: no round
	}
	c.mu.RLock()
	var nodes []string
	for name := range c.members {
		if _, down := c.down[name]; !down && name != c.self {
			nodes = append(nodes, name)
		}
	}
	known := max(len(c.known), len(c.members))
	c.mu.RUnlock()
	var e wire.NodeEnc
	e.Str8(channel)
	names := make([]string, 1, 1+len(nodes))
	names[0] = own
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		c.owned.Go(func() {
			b, err := c.call(n, wire.OpManager, e.B)
			var m string
			if err == nil {
				m, err = decManagerResult(b)
			}
			if err != nil {
				c.log.Warn("sluice cluster: a manager's confirmation got no answer", "channel", channel, "node", n, "err", err)
				return
			}
			mu.Lock()
			names = append(names, m)
			mu.Unlock()
		}, wg.Done)
	}
	wg.Wait()
	return confirmed(c.self, names, known)
}

// Confirm is the confirmation a manager asks before it opens or fences a
// streamlet of channel (confirm; manager.Cluster.Confirm). Safe for
// concurrent use; it waits for the network.
func (c *Cluster) Confirm(channel string) (bool, string) { return c.confirm(channel) }
