package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/sluice-rtm/sluice/wire"
)

// Message headers, message ids and S2 on client connections (PROTOCOL.md
// 2.14, 2.15): what the loops check on PUBLISH, and how a DATA batch is
// encoded once per kind of subscriber (msgdata.go).

// serverFeatures are the feature bits a server accepts in HELLO.
const serverFeatures = wire.FeatureHeaders | wire.FeatureS2

// compressedOK reports whether a frame may carry FlagCompressed: a
// PUBLISH on a connection that negotiated S2, or a node's NODE_APPEND or
// NODE_FEED.
func (l *loop) compressedOK(c *conn, h wire.Header) bool {
	switch h.Type {
	case wire.TypePublish:
		return c.hello && c.peer == nil && c.s2
	case wire.TypeNodeAppend:
		return c.peer != nil
	case wire.TypeNodeFeed:
		return c.link != nil
	}
	return false
}

// inflatePublish returns the uncompressed body of a compressed PUBLISH,
// held in l.inflated until the loop's flush, or nil after answering a
// malformed one (a block claiming more than max payload is refused before
// anything is allocated).
func (l *loop) inflatePublish(c *conn, body []byte) []byte {
	pl, err := wire.PublishPrefixLen(body)
	var n int
	if err == nil {
		n, err = wire.S2DecodedLen(body[pl:], l.srv.opts.MaxPayload, wire.TypePublish)
	}
	if err != nil {
		c.sendError(0, wire.CodeProtocolError, err.Error())
		return nil
	}
	if cap(l.inflated)-len(l.inflated) < pl+n {
		// A new array; publishes of the run keep the old one alive.
		l.inflated = make([]byte, 0, max(2*cap(l.inflated), pl+n, 64<<10))
	}
	start := len(l.inflated)
	out, err := wire.Inflate(l.inflated[start:start], body, pl, uint32(pl+n), wire.TypePublish)
	if err != nil {
		c.sendError(0, wire.CodeProtocolError, err.Error())
		return nil
	}
	l.inflated = l.inflated[:start+len(out)]
	return out[:len(out):len(out)]
}

// checkExt validates the extended record body of a PUBLISH with FlagExt:
// a connection without FeatureHeaders, or a layout error, is malformed;
// bad keys or values get INVALID_HEADERS.
func (l *loop) checkExt(c *conn, h wire.Header, body []byte) bool {
	if !c.headers {
		c.sendError(0, wire.CodeProtocolError, "PUBLISH has flag EXT, but headers were not negotiated")
		return false
	}
	e, err := wire.ParseExt(body, wire.TypePublish)
	if err != nil {
		c.sendError(0, wire.CodeProtocolError, err.Error())
		return false
	}
	if err := wire.CheckHeaderBlock(e.Headers); err != nil {
		c.sendError(h.ID, wire.CodeInvalidHeaders, fmt.Sprintf("%v", err))
		return false
	}
	return true
}

// Node links (PROTOCOL.md 2.15): NODE_APPEND (cluster.Append) and
// NODE_FEED batches of at least s2Min record bytes go as one S2 block when
// that saves an eighth, when ClusterOptions.S2 is set; the receiver inflates
// them after checking the declared length against the node body limit.

// appendFeedS2 appends to c.scratch a compressed NODE_FEED of the run in
// l.iov (nb bytes) and reports whether it did; when compression is off or
// does not pay, nothing is appended.
func (l *loop) appendFeedS2(c *conn, f wire.NodeFeed, stamps []int64, nb int) bool {
	if l.srv.opts.Cluster == nil || !l.srv.opts.Cluster.S2 || nb < s2Min {
		return false
	}
	hdr := len(c.scratch)
	c.scratch = wire.AppendNodeFeedS2Header(c.scratch, f, stamps, 0)
	var ok bool
	c.scratch, ok, l.zin = wire.AppendCompressedRun(c.scratch, l.iov, nb, s2Min, l.zin)
	if !ok {
		c.scratch = c.scratch[:hdr]
		return false
	}
	binary.BigEndian.PutUint32(c.scratch[hdr:], uint32(len(c.scratch)-hdr-wire.HeaderLen))
	l.srv.feedSent.Add(uint64(len(c.scratch) - hdr))
	return true
}

// inflateFeed returns the uncompressed body of a compressed NODE_FEED (in
// l.feedZ, valid until the next one), or body itself.
func (l *loop) inflateFeed(h wire.Header, body []byte) ([]byte, error) {
	if h.Flags&wire.FlagCompressed == 0 {
		return body, nil
	}
	if h.Type != wire.TypeNodeFeed {
		return nil, fmt.Errorf("%w: %v has flag COMPRESSED", wire.ErrMalformed, h.Type)
	}
	pre, err := wire.NodeFeedPrefix(body)
	if err != nil {
		return nil, err
	}
	l.feedZ, err = wire.Inflate(l.feedZ, body, pre, l.srv.peerMaxBody, wire.TypeNodeFeed)
	return l.feedZ, err
}
