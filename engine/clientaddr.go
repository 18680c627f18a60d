package engine

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/sluice-rtm/sluice/internal/proxyproto"
	"github.com/sluice-rtm/sluice/wire"
	"github.com/sluice-rtm/sluice/ws"
)

// Client addresses behind trusted proxies (Options.TrustedProxies).
//
// A connection's address is its peer's, unless the peer is a trusted
// proxy; then the proxy says who the client is, in two places:
//
//	TCP, WebSocket    a PROXY protocol v1/v2 header before the first byte
//	                  of the stream (optional: a trusted peer without one
//	                  is a client itself, e.g. a node or a health check)
//	TLS (and wss)     the same header before the TLS handshake, read by
//	                  the TLS bridge (tls.go), which enrolls the
//	                  connection with the address it names
//	WebSocket         the upgrade's Forwarded or X-Forwarded-For header,
//	                  when the address known so far is still a trusted
//	                  proxy (internal/realip walks the chain)
//
// Until the address is known (conn.sec.addr != addrKnown) the connection
// is not counted by the per-address limit; then it is counted once, or
// refused with TOO_MANY_CONNECTIONS (HTTP 503 for a WebSocket upgrade).
// Before the address is known a connection can send nothing else: what
// waits for the rest of a PROXY header is at most proxyproto.MaxLen bytes
// and the handshake timeout.

// addrStage is how far a connection's client address is known.
type addrStage uint8

const (
	addrKnown       addrStage = iota // counted (or not limited); the normal case
	addrProxyHeader                  // from a trusted proxy: a PROXY header may come first
	addrHTTPHeaders                  // WebSocket from a trusted proxy: the upgrade's headers name the client
)

// firstAddrStage is the stage of a new connection from ip; br is its
// bridge context (nil for TCP).
func (s *Server) firstAddrStage(ip string, br *bridged) addrStage {
	if s.trusted.Empty() || !s.trusted.Contains(parseAddr(ip)) {
		return addrKnown
	}
	switch {
	case br == nil, br.ws && !br.tls:
		return addrProxyHeader
	case br.ws: // wss: the bridge read the PROXY header, if any
		return addrHTTPHeaders
	}
	return addrKnown // TLS: the bridge read the PROXY header, if any
}

// parseAddr parses an IP ("" or garbage: the invalid Addr).
func parseAddr(ip string) netip.Addr {
	a, _ := netip.ParseAddr(ip)
	return a
}

// proxyHeader reads a PROXY header at the start of buf for c (stage
// addrProxyHeader). It returns the bytes it consumed, or -1 while the
// header is incomplete (c has sent nothing else). A malformed header is a
// protocol error that closes c. A TCP connection's address is then known
// and counted; a WebSocket's goes on to its upgrade's headers if the
// address is still a trusted proxy's.
func (l *loop) proxyHeader(c *conn, buf []byte) int {
	h, n, err := proxyproto.Parse(buf)
	switch {
	case err == proxyproto.ErrIncomplete:
		return -1
	case err == proxyproto.ErrNotProxy:
		n = 0
	case err != nil:
		c.sec.addr = addrKnown
		c.sendError(0, wire.CodeProtocolError, err.Error())
		return len(buf)
	case !h.Local:
		c.sec.remote = h.Src.Addr().Unmap().String()
	}
	if c.ws != nil && l.srv.trusted.Contains(parseAddr(c.sec.remote)) {
		c.sec.addr = addrHTTPHeaders
		return n
	}
	l.settleAddr(c)
	return n
}

// wsAddrHeaders takes the client address of c from its upgrade request's
// Forwarded or X-Forwarded-For headers (stage addrHTTPHeaders) and counts
// it. It reports false when c was refused.
func (l *loop) wsAddrHeaders(c *conn, req *ws.Request) bool {
	a := l.srv.trusted.FromHeaders(parseAddr(c.sec.remote), req.Forwarded, req.XForwardedFor)
	if a.IsValid() {
		c.sec.remote = a.String()
	}
	return l.settleAddr(c)
}

// settleAddr ends the search for c's address: c is counted under
// c.sec.remote, or refused. It reports false when c was refused.
func (l *loop) settleAddr(c *conn) bool {
	s := l.srv
	c.sec.addr = addrKnown
	if !s.addrs.acquire(c.sec.remote) {
		s.countReject(RejectPerAddr)
		c.sendError(0, wire.CodeTooManyConnections, fmt.Sprintf("at most %d connections per address", s.opts.MaxConnsPerAddr))
		return false
	}
	if s.opts.MaxConnsPerAddr > 0 {
		c.sec.ip = c.sec.remote // counted: released in forget
	}
	s.accepted.Add(1)
	return true
}

// readProxyHeader reads the PROXY header that a trusted proxy may send
// before the TLS handshake on raw, within deadline. It returns the
// client's IP (ip when the header is absent or names no client) and a
// connection that yields the bytes read after the header first.
func readProxyHeader(raw net.Conn, ip string, deadline time.Time) (string, net.Conn, error) {
	if err := raw.SetReadDeadline(deadline); err != nil {
		return ip, raw, err
	}
	defer raw.SetReadDeadline(time.Time{})
	buf := make([]byte, proxyproto.MaxLen)
	have := 0
	for {
		k, err := raw.Read(buf[have:])
		have += k
		if have == 0 && err == nil {
			continue
		}
		h, n, perr := proxyproto.Parse(buf[:have])
		switch {
		case perr == proxyproto.ErrIncomplete && err == nil:
			continue
		case perr == proxyproto.ErrIncomplete:
			return ip, raw, fmt.Errorf("reading a PROXY header: %w", err)
		case perr == proxyproto.ErrNotProxy:
			n = 0
		case perr != nil:
			return ip, raw, perr
		case !h.Local:
			ip = h.Src.Addr().Unmap().String()
		}
		return ip, &prefixConn{Conn: raw, rest: buf[n:have]}, nil
	}
}

// prefixConn is a net.Conn whose first bytes were already read (rest).
type prefixConn struct {
	net.Conn
	rest []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.rest) > 0 {
		n := copy(b, p.rest)
		p.rest = p.rest[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}
