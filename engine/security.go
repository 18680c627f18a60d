package engine

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
	"github.com/sluice-rtm/sluice/internal/realip"
	"github.com/sluice-rtm/sluice/wire"
)

// security is the Server's state for authentication, abuse limits, TLS
// and metrics. It is embedded in Server; every field is safe for
// concurrent use or written only during Start.
type security struct {
	auth    atomic.Pointer[authState] // nil: authentication off
	authMu  sync.Mutex                // serialises SetAuth
	reloads atomic.Int64
	// JWTs (jwt.go): tokens refused (HELLO or REFRESH), refreshes taken,
	// connections closed with TOKEN_EXPIRED.
	jwtRefused, jwtRefreshes, jwtExpired atomic.Int64

	rateInterval  int64 // GCRA parameters of PublishRate (0 = unlimited)
	rateTolerance int64
	addrs         *addrLimiter
	trusted       realip.Trusted // Options.TrustedProxies

	accepted atomic.Int64
	rejected [5]atomic.Int64 // indexed like rejectReasons

	metricsAddr string
	httpSrv     *http.Server
	httpDone    chan struct{} // closed when httpSrv's goroutine returned
	tlsBr       *tlsBridge
	// The WebSocket listener (ws.go): wsAcc for ws://, wssBr for wss://.
	wsAddr      string
	wsTLS       bool
	wsAcc       *wsAcceptor
	wssBr       *tlsBridge
	loopsUp     chan struct{} // closed when gnet's loops run (TLS only)
	loopsUpOnce sync.Once
}

// initSecurity prepares the security state from the validated options.
func (s *Server) initSecurity() error {
	st, err := compileAuth(s.opts.Auth)
	if err != nil {
		return err
	}
	s.auth.Store(st)
	s.rateInterval, s.rateTolerance = rateParams(s.opts.PublishRate, s.opts.PublishBurst)
	s.addrs = newAddrLimiter(s.opts.MaxConnsPerAddr)
	if s.trusted, err = realip.ParseTrusted(s.opts.TrustedProxies); err != nil {
		return err
	}
	return nil
}

// warnExposure logs a warning when clients can reach an address that is
// not loopback while authentication is off.
func (s *Server) warnExposure() {
	if s.opts.Auth != nil {
		return
	}
	for _, a := range []string{s.addr, s.opts.TLSListen, s.opts.WSListen} {
		if a != "" && !isLoopback(a) {
			s.log.Warn("authentication is off and clients can connect from other hosts: anyone may publish and subscribe; configure auth or listen on loopback", "addr", a)
		}
	}
}

func (s *Server) countReject(reason string) {
	for i, r := range rejectReasons {
		if r == reason {
			s.rejected[i].Add(1)
		}
	}
}

// bridged is the gnet connection context of a connection enrolled by the
// TLS bridge or the WebSocket listener: its real peer, which a socket pair
// does not know, and what it came through.
type bridged struct {
	ip  string
	tls bool // through the TLS bridge
	ws  bool // from the WebSocket listener
}

// admit applies the per-address limit to a new connection and fills its
// security state; it returns the ERROR to send and gnet.Close when the
// connection is refused. Runs on the connection's loop in OnOpen; br is the
// TLS bridge's context (nil for plain TCP). A connection from a trusted
// proxy is counted later, once its client's address is known
// (clientaddr.go).
func (s *Server) admit(c *conn, br *bridged) ([]byte, gnet.Action) {
	c.sec.lastIn = c.opened
	ip := hostOf(c.gc.RemoteAddr())
	if br != nil {
		ip, c.sec.tls = br.ip, br.tls
	}
	c.sec.remote = ip
	if c.sec.addr = s.firstAddrStage(ip, br); c.sec.addr != addrKnown {
		return nil, gnet.None
	}
	if !s.addrs.acquire(ip) {
		s.countReject(RejectPerAddr)
		return c.refuse(wire.CodeTooManyConnections, fmt.Sprintf("at most %d connections per address", s.opts.MaxConnsPerAddr))
	}
	if s.opts.MaxConnsPerAddr > 0 {
		c.sec.ip = ip // counted: released in forget
	}
	s.accepted.Add(1)
	return nil, gnet.None
}

// maxLingeringRefusals bounds the connections refused at open that
// linger at once (refuseAtOpen); past it a refused connection is closed
// at once, so that a flood of refused connections cannot hold sockets
// (and places under MaxConns) for lingerTime each.
const maxLingeringRefusals = 1024

// lingerRefusal ends c, refused from OnOpen before anything was read,
// with out (its ERROR, id 0: no request was read, so there is no id to
// echo) the way every fatal ERROR ends (PROTOCOL.md 7.1): once gnet has
// written it, the write side is shut down and what the client sends (its
// HELLO, publishes) is read and dropped until it closes or lingerTime
// passes, so the client reads the ERROR and end of stream instead of a
// reset caused by its unread HELLO. TLS connections close at once.
func (s *Server) lingerRefusal(c *conn, out []byte) ([]byte, gnet.Action) {
	if c.sec.tls || s.lingering.Add(1) > maxLingeringRefusals {
		if !c.sec.tls {
			s.lingering.Add(-1)
		}
		return out, gnet.Close
	}
	c.refused = true
	l := c.l
	l.execute(func() { // after gnet has written out
		if !c.closed {
			l.closeGracefully(c)
		}
	})
	return out, gnet.None
}

// forget releases what admit counted; called when the connection is
// cleaned up.
func (s *Server) forget(c *conn) {
	if c.refused {
		c.refused = false
		s.lingering.Add(-1)
	}
	s.addrs.release(c.sec.ip)
	c.sec.ip = ""
}
