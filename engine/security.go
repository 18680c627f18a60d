package engine

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
	"github.com/sluice-rtm/sluice/wire"
)

// security is the Server's state for authentication, abuse limits, TLS
// and metrics. It is embedded in Server; every field is safe for
// concurrent use or written only during Start.
type security struct {
	auth    atomic.Pointer[authState] // nil: authentication off
	authMu  sync.Mutex                // serialises SetAuth
	reloads atomic.Int64

	rateInterval  int64 // GCRA parameters of PublishRate (0 = unlimited)
	rateTolerance int64
	addrs         *addrLimiter

	accepted atomic.Int64
	rejected [5]atomic.Int64 // indexed like rejectReasons

	metricsAddr string
	httpSrv     *http.Server
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
// TLS bridge's context (nil for plain TCP).
func (s *Server) admit(c *conn, br *bridged) ([]byte, gnet.Action) {
	c.sec.lastIn = c.opened
	ip := hostOf(c.gc.RemoteAddr())
	if br != nil {
		ip, c.sec.tls = br.ip, br.tls
	}
	c.sec.remote = ip
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

// forget releases what admit counted; called when the connection is
// cleaned up.
func (s *Server) forget(c *conn) {
	s.addrs.release(c.sec.ip)
	c.sec.ip = ""
}
