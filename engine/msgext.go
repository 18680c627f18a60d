package engine

import (
	"github.com/sluice-rtm/sluice/wire"
)

// Message headers, message ids and S2 on client connections (PROTOCOL.md
// 2.14, 2.15): what the loops check on PUBLISH, and how a DATA batch is
// encoded once per kind of subscriber (msgdata.go).

// serverFeatures are the feature bits a server accepts in HELLO.
const serverFeatures = wire.FeatureHeaders | wire.FeatureS2 | wire.FeatureRefresh | wire.FeaturePresence | wire.FeatureFilters

// compressedOK reports whether a client's frame may carry
// FlagCompressed: only a PUBLISH on a connection that negotiated S2 (a
// node connection's compressed frames are package cluster's).
func (l *loop) compressedOK(c *conn, h wire.Header) bool {
	return h.Type == wire.TypePublish && c.hello && c.s2
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
	_, malformed, invalid := wire.ParseExtChecked(body, wire.TypePublish) // one walk over the headers
	if malformed != nil {
		c.sendError(0, wire.CodeProtocolError, malformed.Error())
		return false
	}
	if invalid != nil {
		c.sendError(h.ID, wire.CodeInvalidHeaders, invalid.Error())
		return false
	}
	return true
}
