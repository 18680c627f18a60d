package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-rtm/sluice/cluster/nodelink"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// The cluster's use of the node links (package cluster/nodelink): the
// frames it hands the cluster (linkHandler), the requests the cluster
// makes (call), and the engine's remote appends and reads.

// ErrLinkDown: the connection to a peer node failed or was closed; the
// outcome of requests in flight on it is unknown.
var ErrLinkDown = nodelink.ErrLinkDown

// linkHandler is the cluster as the links see it (nodelink.Handler).
type linkHandler struct{ c *Cluster }

func (h linkHandler) Serve(peer string, op wire.NodeOp, body []byte) (uint8, []byte, string) {
	return h.c.serve(peer, op, body)
}

// Feed fills a copy to adopt (drain.go) and the gateway's copy: either
// may exist.
func (h linkHandler) Feed(node string, f wire.NodeFeed, stamps, run []byte) {
	h.c.fillAdoption(node, f, stamps, run)
	h.c.fillCopy(f, stamps, run)
}

func (h linkHandler) Replicated(l *nodelink.Link, r wire.NodeReplicated) { h.c.replicated(l, r) }
func (h linkHandler) Down(node string)                                   { h.c.markDown(node) }
func (h linkHandler) Heartbeat(now int64, paused bool)                   { h.c.nudgeSenders(now, paused) }

// call sends op to node (dialing when needed) and waits for the answer,
// at most the links' call timeout.
func (c *Cluster) call(node string, op wire.NodeOp, body []byte) ([]byte, error) {
	b, err := c.links.Call(node, op, body)
	return b, opErr(err)
}

// callFor is call with its own timeout.
func (c *Cluster) callFor(node string, op wire.NodeOp, body []byte, timeout time.Duration) ([]byte, error) {
	b, err := c.links.CallFor(node, op, body, timeout)
	return b, opErr(err)
}

// opErr turns a peer's refusal (nodelink.StatusError) into an opError,
// which stands for the role error its status means.
func opErr(err error) error {
	if se, ok := errors.AsType[*nodelink.StatusError](err); ok {
		return &opError{se.Status, se.Text}
	}
	return err
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
func (c *Cluster) Connect(node string) bool { return c.links.Dial(node) != nil }

// Append sends a NODE_APPEND of count records (run, wire.AppendRecord
// each) for streamlet g.Streamlet to its host over the open link, without
// dialing (ErrNoLink when there is none). done runs on the link's loop
// with the host's answer, or with an error when the link failed.
func (c *Cluster) Append(g role.Grant, count int, run []byte, done func(wire.NodeAppended, error)) error {
	l := c.links.Existing(g.Host)
	if l == nil {
		return ErrNoLink
	}
	return l.Queue(func(dst []byte, id uint32) []byte {
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
// Gateway.Copy. It may wait for the network.
func (c *Cluster) Read(node string, id uint64, from uint32) error {
	l := c.links.Dial(node)
	if l == nil {
		return fmt.Errorf("%w: %s unreachable", ErrLinkDown, node)
	}
	return l.Send(wire.AppendNodeRead(nil, id, from))
}

// Unread tells node that this node's copy of streamlet id is gone
// (NODE_UNREAD), if a link is open; it never dials.
func (c *Cluster) Unread(node string, id uint64) {
	if l := c.links.Existing(node); l != nil {
		_ = l.Send(wire.AppendNodeUnread(nil, id))
	}
}

// fillCopy applies a NODE_FEED (on the link's loop) to this node's copy
// of the streamlet: records are appended with their original stamps, a
// sealed feed completes the copy, a gone one breaks it (the host does not
// hold the streamlet: not yet, since a committed streamlet may be read
// before its host got it, or not any more: the readers read it again
// until the committed list says what became of it), and the channel's
// readers are woken.
func (c *Cluster) fillCopy(f wire.NodeFeed, stamps, run []byte) {
	s := c.gw.Copy(f.Streamlet)
	if s == nil {
		return // dropped meanwhile
	}
	s.Fill(int(f.Start), int(f.Count), func(i int) ([]byte, bool, int64) {
		var p []byte
		var ext bool
		p, ext, run, _ = wire.NextRecordExt(run) // validated by DecodeNodeFeed
		return p, ext, wire.FeedStamp(stamps, i)
	}, f.Flags&wire.FeedSealed != 0)
	if f.Flags&wire.FeedGone != 0 {
		s.Break()
	}
	c.gw.Wake(s.Channel())
}

// StaleAfter is how long a gateway's read stream may stand still before
// it looks at its channel's list and the open streamlet's length again
// (two RPC timeouts; package engine, progress.go).
func (c *Cluster) StaleAfter() time.Duration { return 2 * c.rpcTimeout() }
