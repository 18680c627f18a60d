package engine

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rtm/sluice/internal/realip"
	"github.com/sluice-rtm/sluice/wire"
)

// gcra is a rate limiter (the generic cell rate algorithm, equivalent to a
// token bucket): tat is the theoretical arrival time of the next request.
// A request at now is allowed when it is at most tolerance ahead of
// schedule; each allowed request moves tat by one interval. Integer only,
// no clock of its own: the loop passes its iteration time.
type gcra struct{ tat int64 }

// allow reports whether a request at now (unix ns) fits, and if so
// accounts it.
func (g *gcra) allow(now, interval, tolerance int64) bool {
	tat := max(g.tat, now)
	if tat-now > tolerance+interval {
		// Impossible unless the wall clock went back: after an allowed
		// request tat-now <= tolerance+interval. Start afresh rather than
		// refuse everything until the clock catches up.
		tat = now
	}
	if tat-now > tolerance {
		return false
	}
	g.tat = tat + interval
	return true
}

// rateParams converts a rate (per second) and a burst into the GCRA
// interval and tolerance, in nanoseconds; a rate of 0 gives interval 0
// (unlimited).
func rateParams(rate float64, burst int) (interval, tolerance int64) {
	if rate <= 0 {
		return 0, 0
	}
	interval = max(int64(float64(time.Second)/rate), 1)
	return interval, interval * int64(max(burst, 1)-1)
}

// addrLimiter counts connections per remote IP for Options.MaxConnsPerAddr.
// Safe for concurrent use (gnet loops and the TLS acceptor); it is touched
// once per connection, never per message.
type addrLimiter struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func newAddrLimiter(maxPerAddr int) *addrLimiter {
	return &addrLimiter{max: maxPerAddr, n: make(map[string]int)}
}

// acquire counts one more connection from ip; false (nothing counted) when
// ip is at the limit. With no limit configured it counts nothing and
// returns true.
func (a *addrLimiter) acquire(ip string) bool {
	if a.max <= 0 || ip == "" {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n[ip] >= a.max {
		return false
	}
	a.n[ip]++
	return true
}

// release forgets one connection from ip counted by acquire.
func (a *addrLimiter) release(ip string) {
	if a.max <= 0 || ip == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n[ip]--; a.n[ip] <= 0 {
		delete(a.n, ip)
	}
}

// hostOf returns the IP of a remote address ("" when it has none, e.g. a
// unix socket).
func hostOf(a net.Addr) string {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.String()
	case nil:
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return ""
	}
	return host
}

// checkIdle runs from the loop's sweep for every connection: a connection
// silent for PingInterval gets a PING (a live client answers PONG), one
// silent for IdleTimeout gets ERROR IDLE_TIMEOUT and is closed.
func (l *loop) checkIdle(c *conn) {
	o := &l.srv.opts
	if o.IdleTimeout <= 0 || !c.hello || c.closing || c.closed {
		return
	}
	silent := l.now - c.sec.lastIn
	switch {
	case silent > int64(o.IdleTimeout):
		c.sendError(0, wire.CodeIdleTimeout, fmt.Sprintf("nothing received for %v", o.IdleTimeout))
	case !c.sec.pinged && o.PingInterval > 0 && silent > int64(o.PingInterval):
		c.sec.pinged = true
		s, k := c.ownStart()
		c.scratch = wire.AppendPing(c.scratch, 0)
		c.ownEnd(s, k)
	}
}

// notePartial records, after input was handled, whether c has started a
// frame it has not completed (pending bytes of it buffered): the time its
// first byte came, for FrameTimeout. progressed says whether a frame was
// completed meanwhile, so the pending bytes belong to a new frame. For a
// sealed node connection a record counts as part of its frame.
func (c *conn) notePartial(now int64, pending int, progressed bool) {
	switch {
	case pending == 0:
		c.partialSince = 0
	case progressed || c.partialSince == 0:
		c.partialSince = now
	}
}

// checkFrame runs from the loop's sweep: a frame begun more than
// FrameTimeout ago and still incomplete ends the connection.
func (l *loop) checkFrame(c *conn) {
	d := l.srv.opts.FrameTimeout
	if d <= 0 || c.partialSince == 0 || c.closing || c.closed || l.now-c.partialSince <= int64(d) {
		return
	}
	l.stats.frameTimeouts++
	c.sendError(0, wire.CodeIdleTimeout, fmt.Sprintf("a frame begun %v ago is still incomplete", d))
}

// noteInput records that c sent something (for the idle timeout).
func (c *conn) noteInput(now int64) {
	c.sec.lastIn = now
	c.sec.pinged = false
}

// tlsConfigured reports whether a TLS certificate is configured (then the
// WebSocket listener serves wss://).
func (o *Options) tlsConfigured() bool {
	return o.TLSConfig != nil || (o.TLSCertFile != "" && o.TLSKeyFile != "")
}

// validateSecurity checks the fields of auth, limits, TLS and metrics.
func (o *Options) validateSecurity() error {
	switch {
	case o.IdleTimeout < 0:
		return optErr("IdleTimeout", "negative")
	case o.FrameTimeout < 0:
		return optErr("FrameTimeout", "negative")
	case o.IdleTimeout > 0 && o.PingInterval > 0 && o.IdleTimeout <= o.PingInterval:
		return optErr("IdleTimeout", "%v must be longer than PingInterval (%v), or clients that ping on time are closed", o.IdleTimeout, o.PingInterval)
	case o.PublishRate < 0 || o.PublishRate > 1e9 || o.PublishRate != o.PublishRate:
		return optErr("PublishRate", "%v is outside 0..1e9 per second", o.PublishRate)
	case o.PublishBurst < 0 || o.PublishBurst > 1<<24:
		return optErr("PublishBurst", "%d is outside 0..16777216", o.PublishBurst)
	case o.PublishRate > 0 && o.PublishBurst < 1:
		return optErr("PublishBurst", "must be at least 1 when PublishRate is set")
	case o.MaxConnsPerAddr < 0:
		return optErr("MaxConnsPerAddr", "negative")
	}
	for i, p := range o.TrustedProxies {
		if _, err := realip.ParseTrusted([]string{p}); err != nil || strings.TrimSpace(p) == "" {
			return optErr(fmt.Sprintf("TrustedProxies[%d]", i), "%q is not an IP address or CIDR prefix (10.0.0.0/8, fd00::/8)", p)
		}
	}
	if o.TLSListen != "" {
		if _, _, err := net.SplitHostPort(o.TLSListen); err != nil {
			return optErr("TLSListen", "%q is not HOST:PORT: %v", o.TLSListen, err)
		}
		if o.TLSConfig == nil && (o.TLSCertFile == "" || o.TLSKeyFile == "") {
			return optErr("TLSCertFile", "TLSListen needs a certificate and key (TLSCertFile and TLSKeyFile)")
		}
	} else if o.WSListen == "" && (o.TLSCertFile != "" || o.TLSKeyFile != "") {
		return optErr("TLSListen", "empty, but a TLS certificate is configured")
	} else if o.TLSConfig == nil && (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return optErr("TLSCertFile", "a TLS certificate needs both TLSCertFile and TLSKeyFile")
	}
	if o.WSListen != "" {
		if _, _, err := net.SplitHostPort(o.WSListen); err != nil {
			return optErr("WSListen", "%q is not HOST:PORT: %v", o.WSListen, err)
		}
	}
	for i, a := range o.WSOrigins {
		if a != "*" && !strings.Contains(a, "://") {
			return optErr(fmt.Sprintf("WSOrigins[%d]", i), "%q is neither \"*\" nor an origin like https://app.example.com", a)
		}
	}
	if o.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(o.MetricsListen); err != nil {
			return optErr("MetricsListen", "%q is not HOST:PORT: %v", o.MetricsListen, err)
		}
	}
	return o.Auth.validate()
}
