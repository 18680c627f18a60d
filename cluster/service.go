package cluster

import (
	"fmt"

	"github.com/sluice-rtm/sluice/cluster/view"
	"github.com/sluice-rtm/sluice/wire"
)

// Service is a node-to-node service beside the cluster's roles (presence,
// package presence): it answers the node operations numbered from
// wire.OpServiceFirst and learns who the live members are. It depends on
// nothing of the cluster but its links and its membership view, so the
// roles' coordination can change under it.
type Service interface {
	// Serve answers one NODE_REQUEST of op (wire.OpServiceFirst or
	// above) from node peer, with the op body body (valid only during
	// the call): a status (wire.NodeOK and the result, wire.NodeBadOp
	// for a body that breaks the op's layout, wire.NodeFailed and a
	// text). It is called on the cluster's pool, never on a loop, and
	// must not wait for the network.
	Serve(peer string, op wire.NodeOp, body []byte) (status uint8, result []byte, text string)
	// Members is told the names of the live members, this node included,
	// whenever the cluster refreshes its view: at every membership change
	// (a join, a graceful leave, a death declared by the failure
	// detector) and at every load report. It is called on one goroutine
	// at a time and must not block.
	Members(alive []string)
}

// Call sends a NODE_REQUEST of op with body to node over this node's
// link to it and returns the result of an OK answer. It waits at most the
// link's request timeout (three RPC timeouts); a refusal is an error with
// the node's text. Any goroutine but the event loops.
//
// A service is not the failure detector: Call dials a live member without
// a link as redial does (a failed dial marks nothing down), and does not
// dial a member marked down. A link it opened is like any other: its
// heartbeat's verdict applies.
func (c *Cluster) Call(node string, op wire.NodeOp, body []byte) ([]byte, error) {
	l := c.links.Existing(node)
	if l == nil && c.view.Reachable(node) {
		l = c.links.Redial(node)
	}
	if l == nil {
		return nil, fmt.Errorf("%w: %s unreachable", ErrLinkDown, node)
	}
	b, err := l.Call(op, body)
	return b, opErr(err)
}

// serveService passes a request of a service's op to Config.Service.
func (c *Cluster) serveService(peer string, op wire.NodeOp, body []byte) (uint8, []byte, string) {
	if c.cfg.Service == nil {
		return wire.NodeBadOp, nil, "no service answers this operation on this node"
	}
	return c.cfg.Service.Serve(peer, op, body)
}

// tellService gives Config.Service the live members that answer service
// ops (refresh): a node of a version without them (during a rolling
// upgrade) would end the link on an op it does not know.
func (c *Cluster) tellService(live []view.Member) {
	if c.cfg.Service == nil {
		return
	}
	alive := make([]string, 0, len(live)+1)
	alive = append(alive, c.self)
	for _, m := range live {
		if m.Name != c.self && m.Meta.Svc {
			alive = append(alive, m.Name)
		}
	}
	c.cfg.Service.Members(alive)
}
