package cluster

import (
	"encoding/binary"
	"fmt"

	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// The links: one outbound Link per peer, dialed by the goroutine that
// needs it (joined when several do) and enrolled in an event loop.

// link returns an open link to node, dialing it when needed; nil when the
// node is unknown, down or cannot be reached.
func (c *Cluster) link(node string) *Link { return c.linkTo(node, false) }

// linkTo is link; with force it dials even while node is marked down
// (redial: the mark keeps a node out of placement, not out of reach), a
// link made clears the mark, and a failure changes nothing.
func (c *Cluster) linkTo(node string, force bool) *Link {
	c.mu.Lock()
	if l := c.links[node]; l != nil && !l.closed() {
		c.mu.Unlock()
		return l
	}
	addr, ok := c.view.Dialable(node, force)
	if !ok {
		c.mu.Unlock()
		return nil
	}
	if d := c.dialing[node]; d != nil {
		// Another goroutine dials the node: wait for its outcome, with no
		// lock held.
		c.mu.Unlock()
		<-d.done
		return d.l
	}
	d := &dial{done: make(chan struct{})}
	c.dialing[node] = d
	c.mu.Unlock()
	l, err := c.dialLink(node, addr, c.rpcTimeout())
	c.mu.Lock()
	delete(c.dialing, node)
	if err == nil {
		c.links[node] = l
	}
	c.mu.Unlock()
	if err == nil {
		c.view.Reached(node, force)
	}
	d.l = l // nil on failure; read by the waiters after done is closed
	close(d.done)
	if err != nil {
		if !force {
			c.log.Warn("sluice cluster: peer unreachable", "node", node, "err", err)
			c.markDown(node)
		}
		return nil
	}
	return l
}

// dial is a dial in progress (Cluster.dialing): the goroutines that need
// the same node's link wait on done instead of dialing again.
type dial struct {
	done chan struct{}
	l    *Link
}

// existingLink returns the open link to node without dialing (for the
// loops, which never wait for the network); nil if there is none.
func (c *Cluster) existingLink(node string) *Link {
	c.mu.RLock()
	l := c.links[node]
	c.mu.RUnlock()
	if l == nil || l.closed() {
		return nil
	}
	return l
}

// call sends op to node and waits for the answer. A link failure marks
// the node down.
func (c *Cluster) call(node string, op wire.NodeOp, body []byte) ([]byte, error) {
	l := c.link(node)
	if l == nil {
		return nil, fmt.Errorf("%w: %s unreachable", ErrLinkDown, node)
	}
	return l.call(op, body)
}

// linkClosed is called once per link when it ends.
func (c *Cluster) linkClosed(l *Link, err error) {
	c.mu.Lock()
	if c.links[l.node] == l {
		delete(c.links, l.node)
	}
	c.mu.Unlock()
	select {
	case <-c.stop:
		return // shutting down
	default:
	}
	c.linkFailures.Add(1)
	c.log.Warn("sluice cluster: link closed", "node", l.node, "err", err)
	c.markDown(l.node)
}

// markDown keeps node out of placement for view.DownFor (until a link to
// it is made again) and ends the copies this node reads from it where
// they are: the readers read them again, from another replica or later.
// It says nothing of what node holds: only the leader, from the
// membership, decides that a node is gone (leader.go).
func (c *Cluster) markDown(node string) {
	if !c.view.MarkDown(node) {
		return
	}
	c.gw.HostDown(node)
	c.endCopies(node)
}

// Connect makes sure a link to node is open, dialing it when needed; it
// reports whether one is. It may wait for the network.
func (c *Cluster) Connect(node string) bool { return c.link(node) != nil }

// AppendBytes returns the NODE_APPEND bytes this node sent (frames
// included) and what they would have been uncompressed.
func (c *Cluster) AppendBytes() (sent, raw uint64) { return c.appendSent.Load(), c.appendRaw.Load() }

// Append sends a NODE_APPEND of count records (run, wire.AppendRecord
// each) for streamlet g.Streamlet to its host over the open link, without
// dialing (ErrNoLink when there is none). done runs on the link's loop
// with the host's answer, or with an error when the link failed.
func (c *Cluster) Append(g role.Grant, count int, run []byte, done func(wire.NodeAppended, error)) error {
	l := c.existingLink(g.Host)
	if l == nil {
		return ErrNoLink
	}
	return l.queue(func(dst []byte, id uint32) []byte {
		a := wire.NodeAppend{Streamlet: g.Streamlet, Epoch: g.Epoch, Count: uint32(count)}
		raw := wire.HeaderLen + wire.NodeAppendPrefixLen + len(run)
		c.appendRaw.Add(uint64(raw))
		if c.opts.S2 && len(run) >= wire.DefaultS2Threshold {
			// Compressed in place: the header is written once the block's
			// length is known.
			start := len(dst)
			dst = wire.AppendNodeAppendS2Header(dst, id, a, 0)
			var ok bool
			one := [1][]byte{run}
			if dst, ok, _ = wire.AppendCompressedRun(dst, one[:], len(run), wire.DefaultS2Threshold, nil); ok {
				binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-wire.HeaderLen))
				c.appendSent.Add(uint64(len(dst) - start))
				return dst
			}
			dst = dst[:start]
		}
		c.appendSent.Add(uint64(raw))
		dst = wire.AppendNodeAppendHeader(dst, id, a, len(run))
		return append(dst, run...)
	}, func(h wire.Header, body []byte, err error) {
		var res wire.NodeAppended
		if err == nil {
			if h.Type != wire.TypeNodeAppended {
				err = fmt.Errorf("%w: answered %v to NODE_APPEND", ErrLinkDown, h.Type)
			} else {
				res, err = wire.DecodeNodeAppended(body)
			}
		}
		done(res, err)
	})
}

// Read asks node to feed streamlet id to this node's copy from record
// from on (NODE_READ), dialing when needed; the feed arrives through
// Gateway.Feed. It may wait for the network.
func (c *Cluster) Read(node string, id uint64, from uint32) error {
	l := c.link(node)
	if l == nil {
		return fmt.Errorf("%w: %s unreachable", ErrLinkDown, node)
	}
	return l.send(wire.AppendNodeRead(nil, id, from))
}

// Unread tells node that this node's copy of streamlet id is gone
// (NODE_UNREAD), if a link is open; it never dials.
func (c *Cluster) Unread(node string, id uint64) {
	if l := c.existingLink(node); l != nil {
		_ = l.send(wire.AppendNodeUnread(nil, id))
	}
}
