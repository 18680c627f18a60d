package cluster

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// RELAY (PROTOCOL.md 9.5): a manager request passed on once. Two nodes cut
// off from each other alone each see the other down; a channel the other
// one manages has another manager in this node's partial view, which a
// majority refuses (confirm.go): its grants would be refused and its
// lookups would rebuild the channel from the hosts this node reaches,
// announcing as lost what only the unreachable side could report. So while
// the manager of the whole membership (the members alive in gossip, the
// ones whose links failed included) is a member this node cannot reach,
// its manager requests (WRITE_GRANT, INFO, INTEREST, EXPIRE) go through
// another member: RELAY asks it to serve the request if it manages the
// channel in its own view, or to pass it on to the manager of its view,
// once (never back to the asker: a member whose view names the asker
// answers an error, and the asker then follows its own view, as when the
// unreachable member died). A relayed INTEREST counts at the manager for
// the member that passed it on, not for the asker.

// isManagerOp reports whether op may be relayed.
func isManagerOp(op wire.NodeOp) bool {
	switch op {
	case wire.OpWriteGrant, wire.OpInfo, wire.OpInterest, wire.OpExpire:
		return true
	}
	return false
}

// appendRelay appends RELAY's request body: the op, then its body.
func appendRelay(dst []byte, op wire.NodeOp, body []byte) []byte {
	return append(append(dst, byte(op)), body...)
}

// decRelay splits RELAY's request body into the relayed op and its body
// (a sub-slice of b); only manager ops are relayed.
func decRelay(b []byte) (wire.NodeOp, []byte, error) {
	if len(b) == 0 {
		return 0, nil, fmt.Errorf("%w: RELAY: no op", wire.ErrMalformed)
	}
	op := wire.NodeOp(b[0])
	if !isManagerOp(op) {
		return 0, nil, fmt.Errorf("%w: RELAY of op %d, not a manager op", wire.ErrMalformed, op)
	}
	return op, b[1:len(b):len(b)], nil
}

// relayTo reports the manager of the whole membership when requests for
// channel must be relayed to it: this node's view is partial and that
// manager is a member it cannot reach (nor itself).
func (c *Cluster) relayTo(channel string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.full == nil {
		return "", false
	}
	id, ok := c.full.Manager(channel)
	m := string(id)
	if !ok || m == c.self {
		return "", false
	}
	_, down := c.down[m]
	return m, down
}

// relay sends op with body towards mgr through the other members in turn
// (sorted), until one answers; it waits for the network.
func (c *Cluster) relay(mgr string, op wire.NodeOp, body []byte) ([]byte, error) {
	c.mu.RLock()
	var via []string
	for name := range c.members {
		if _, down := c.down[name]; !down && name != c.self && name != mgr {
			via = append(via, name)
		}
	}
	c.mu.RUnlock()
	slices.Sort(via)
	req := appendRelay(nil, op, body)
	err := fmt.Errorf("%w: no member passes requests on to %s", ErrLinkDown, mgr)
	for _, n := range via {
		var b []byte
		if b, err = c.call(n, wire.OpRelay, req); !errors.Is(err, ErrLinkDown) {
			return b, err
		}
	}
	return nil, err
}

// serveRelay serves a relayed request from peer: here when this node
// manages the channel in its own view, else at the manager of its view,
// never back to peer and never relayed again.
func (c *Cluster) serveRelay(peer string, op wire.NodeOp, body []byte) (uint8, []byte, string) {
	ch := wire.NewNodeDec(wire.TypeNodeRequest, body).Str8()
	m, ok := c.managerOf(ch)
	switch {
	case !ok || m == peer:
		return wire.NodeFailed, nil, fmt.Sprintf("%v: %q is not managed here, and not passed back", role.ErrChannelMoved, ch)
	case m == c.self:
		return c.Serve(peer, op, body)
	}
	b, err := c.call(m, op, body)
	if err != nil {
		if oe, isOp := errors.AsType[*opError](err); isOp {
			return oe.status, nil, oe.text
		}
		return wire.NodeFailed, nil, err.Error()
	}
	return wire.NodeOK, b, ""
}
