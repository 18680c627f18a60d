package engine

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/proxyproto"
	"github.com/sluice-rtm/sluice/wire"
)

// count returns how many connections of ip are counted.
func (a *addrLimiter) count(ip string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[ip]
}

// proxied dials addr as a proxy would and writes header first (nothing
// when empty); the caller completes the handshake.
func proxied(t *testing.T, addr string, header []byte) *rawConn {
	t.Helper()
	c := dialRaw(t, addr)
	if len(header) > 0 {
		c.write(header)
	}
	return c
}

// v1From and v2From make PROXY headers for a client at src.
func v1From(src string) []byte {
	s := netip.MustParseAddrPort(src)
	return proxyproto.AppendV1(nil, s, serverOf(s))
}

func v2From(src string) []byte {
	s := netip.MustParseAddrPort(src)
	return proxyproto.AppendV2(nil, s, serverOf(s), nil)
}

// serverOf is a destination of the same family as src.
func serverOf(src netip.AddrPort) netip.AddrPort {
	if src.Addr().Is4() {
		return netip.MustParseAddrPort("192.0.2.1:7400")
	}
	return netip.MustParseAddrPort("[2001:db8::1]:7400")
}

// expectRefusedPerAddr reads the ERROR TOO_MANY_CONNECTIONS that refuses c.
func expectRefusedPerAddr(t *testing.T, c *rawConn) {
	t.Helper()
	h, body, err := c.tryNext(waitFor)
	if err != nil {
		t.Fatalf("want TOO_MANY_CONNECTIONS, got %v", err)
	}
	expectCode(t, h, body, wire.CodeTooManyConnections, 0)
	c.expectClosed()
}

// TestTrustedProxy_PROXYHeaderCountsEachClient: behind a trusted proxy
// (loopback here), each client named by a PROXY v1 or v2 header is
// counted on its own by the per-address limit, whatever the proxy's own
// address; a connection of the proxy without a header is the proxy's.
func TestTrustedProxy_PROXYHeaderCountsEachClient(t *testing.T) {
	s := startTest(t, func(o *Options) { o.MaxConnsPerAddr = 1; o.TrustedProxies = []string{"127.0.0.0/8"} })
	for i, h := range [][]byte{v1From("203.0.113.1:1000"), v2From("203.0.113.2:1000"), v2From("[2001:db8::3]:1000")} {
		c := proxied(t, s.Addr(), h)
		if _, err := c.handshakeErr(); err != nil {
			t.Fatalf("client %d behind the proxy: %v", i, err)
		}
	}
	// The same client again: over its limit of 1.
	expectRefusedPerAddr(t, proxied(t, s.Addr(), v1From("203.0.113.1:2000")))
	// The proxy's own connection (a health check, a node) has no header:
	// it is counted as 127.0.0.1, once.
	if _, err := proxied(t, s.Addr(), nil).handshakeErr(); err != nil {
		t.Fatalf("a connection of the proxy itself: %v", err)
	}
	// (Counted when its first bytes tell that no PROXY header comes.)
	expectRefusedPerAddr(t, proxied(t, s.Addr(), wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "proxy"})))
	// PROXY v2 LOCAL (the balancer's own health check) is the proxy's too.
	local := proxyproto.AppendV2(nil, netip.MustParseAddrPort("1.2.3.4:1"), netip.MustParseAddrPort("[::1]:2"), nil) // mixed families: LOCAL
	expectRefusedPerAddr(t, proxied(t, s.Addr(), local))
	m := s.Metrics(t.Context())
	if m.Violations["max_conns_per_addr"] != 3 {
		t.Fatalf("max_conns_per_addr violations %d, want 3", m.Violations["max_conns_per_addr"])
	}
}

// TestTrustedProxy_HeaderInPieces: a PROXY header that arrives a few
// bytes at a time is waited for, and the HELLO behind it read after it.
func TestTrustedProxy_HeaderInPieces(t *testing.T) {
	s := startTest(t, func(o *Options) { o.MaxConnsPerAddr = 1; o.TrustedProxies = []string{"127.0.0.1"} })
	hdr := v2From("198.51.100.7:1")
	hello := wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "pieces"})
	c := dialRaw(t, s.Addr())
	all := append(append([]byte(nil), hdr...), hello...)
	for _, cut := range [][2]int{{0, 5}, {5, 15}, {15, len(hdr) + 3}, {len(hdr) + 3, len(all)}} {
		c.write(all[cut[0]:cut[1]]) // often read apart by the server; correct either way
	}
	if h, body := c.next(); h.Type != wire.TypeWelcome {
		t.Fatalf("got %s", describe(h, body))
	}
	// 198.51.100.7 holds its one place.
	expectRefusedPerAddr(t, proxied(t, s.Addr(), v1From("198.51.100.7:2")))
}

// TestUntrustedPeer_SpoofedHeadersIgnored: a peer that is not a trusted
// proxy cannot pass for another address: its PROXY header is not
// believed (and is no valid frame), its X-Forwarded-For and Forwarded
// are ignored, and it is counted under its own address.
func TestUntrustedPeer_SpoofedHeadersIgnored(t *testing.T) {
	s := startWSTest(t, func(o *Options) { o.MaxConnsPerAddr = 1; o.TrustedProxies = []string{"10.0.0.0/8"} })
	c := proxied(t, s.Addr(), v1From("203.0.113.1:1"))
	h, body, err := c.tryNext(waitFor)
	if err != nil || h.Type != wire.TypeError {
		t.Fatalf("a PROXY header from an untrusted peer: %v %s", err, describe(h, body))
	}
	c.expectClosed()
	eventually(t, waitFor, "the refused connection to be forgotten", func() bool { return s.addrs.count("127.0.0.1") == 0 })

	first := dialWSRaw(t, s, upgradeReq+"X-Forwarded-For: 203.0.113.1\r\n\r\n")
	if r := first.response(); r.StatusCode != 101 {
		t.Fatalf("first upgrade: %s", r.Status)
	}
	for _, hdr := range []string{"X-Forwarded-For: 203.0.113.2\r\n", "Forwarded: for=203.0.113.3\r\n"} {
		c := dialWSRaw(t, s, upgradeReq+hdr+"\r\n")
		if r := c.response(); r.StatusCode != 503 {
			t.Fatalf("spoofed %q: %s, want 503 (counted as 127.0.0.1)", hdr, r.Status)
		}
	}
}

// TestTrustedProxy_ForwardedHeadersCountEachClient: behind a trusted
// reverse proxy, WebSocket clients are counted by X-Forwarded-For or
// Forwarded; a client cannot escape its count by writing a forged
// address to the left of what the proxy appended.
func TestTrustedProxy_ForwardedHeadersCountEachClient(t *testing.T) {
	s := startWSTest(t, func(o *Options) { o.MaxConnsPerAddr = 1; o.TrustedProxies = []string{"127.0.0.1/32"} })
	for i, hdr := range []string{
		"X-Forwarded-For: 203.0.113.1\r\n",
		"X-Forwarded-For: 9.9.9.9, 203.0.113.2\r\n",
		"Forwarded: for=\"[2001:db8::5]:443\";proto=https\r\n",
	} {
		c := dialWSRaw(t, s, upgradeReq+hdr+"\r\n")
		if r := c.response(); r.StatusCode != 101 {
			t.Fatalf("client %d: %s", i, r.Status)
		}
		c.hello()
	}
	// Forged left parts do not help 203.0.113.2 to a second place.
	c := dialWSRaw(t, s, upgradeReq+"X-Forwarded-For: 8.8.8.8, 203.0.113.2\r\n\r\n")
	if r := c.response(); r.StatusCode != 503 {
		t.Fatalf("second connection of 203.0.113.2: %s, want 503", r.Status)
	}
	if n := s.addrs.count("203.0.113.2"); n != 1 {
		t.Fatalf("203.0.113.2 counted %d times", n)
	}
}

// TestTrustedProxy_PROXYThenForwarded: a TCP balancer (PROXY header) in
// front of a trusted HTTP proxy (X-Forwarded-For): the header walk goes
// on from the address the PROXY header gave, and stops at an untrusted
// one.
func TestTrustedProxy_PROXYThenForwarded(t *testing.T) {
	s := startWSTest(t, func(o *Options) { o.MaxConnsPerAddr = 1; o.TrustedProxies = []string{"127.0.0.1", "10.0.0.0/8"} })
	c := dialWSRaw(t, s, string(v2From("10.1.1.1:5000"))+upgradeReq+"X-Forwarded-For: 203.0.113.5\r\n\r\n")
	if r := c.response(); r.StatusCode != 101 {
		t.Fatalf("upgrade: %s", r.Status)
	}
	// The balancer names an untrusted client: its X-Forwarded-For is
	// that client's own words, ignored.
	d := dialWSRaw(t, s, string(v1From("198.51.100.1:5000"))+upgradeReq+"X-Forwarded-For: 203.0.113.6\r\n\r\n")
	if r := d.response(); r.StatusCode != 101 {
		t.Fatalf("upgrade: %s", r.Status)
	}
	eventually(t, waitFor, "both counted", func() bool {
		return s.addrs.count("203.0.113.5") == 1 && s.addrs.count("198.51.100.1") == 1 && s.addrs.count("203.0.113.6") == 0
	})
	// A malformed PROXY header from the trusted peer is refused.
	bad := dialWSRaw(t, s, "PROXY TCP4 1.2.3.4 nonsense\r\n"+upgradeReq+"\r\n")
	if r := bad.response(); r.StatusCode < 400 {
		t.Fatalf("malformed PROXY header: %s", r.Status)
	}
}

// TestTrustedProxy_PROXYBeforeTLS: a TLS passthrough balancer sends the
// PROXY header before the TLS handshake; the bridge reads it and the
// client is counted under the address it names.
func TestTrustedProxy_PROXYBeforeTLS(t *testing.T) {
	set := newCerts(t)
	s := startTLSTest(t, set, func(o *Options) { o.MaxConnsPerAddr = 1; o.TrustedProxies = []string{"127.0.0.1"} })
	dial := func(header []byte) (*rawConn, error) {
		nc, err := net.DialTimeout("tcp", s.TLSAddr(), waitFor)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { nc.Close() })
		if _, err := nc.Write(header); err != nil {
			return nil, err
		}
		tc := tls.Client(nc, set.ClientConfig())
		if err := tc.Handshake(); err != nil {
			return nil, err
		}
		return &rawConn{t: t, nc: tc, r: wire.NewReader(tc, 64<<20)}, nil
	}
	for i := range 3 {
		c, err := dial(v2From(fmt.Sprintf("203.0.113.%d:1", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.handshakeErr(); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	c, err := dial(v1From("203.0.113.1:9"))
	if err != nil {
		t.Fatal(err)
	}
	expectRefusedPerAddr(t, c)
}

// TestDefaultPerAddrLimit_2000FromLoopback: with the default options, a
// benchmark that opens 2,000 connections from 127.0.0.1 is not refused
// (the old default, 1,024, refused all the others).
func TestDefaultPerAddrLimit_2000FromLoopback(t *testing.T) {
	if DefaultOptions().MaxConnsPerAddr != DefaultMaxConnsPerAddr || DefaultMaxConnsPerAddr <= 65535 {
		t.Fatalf("default %d", DefaultOptions().MaxConnsPerAddr)
	}
	s := startTest(t, nil)
	conns := make([]net.Conn, 0, 2000)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	hello := wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "many"})
	for i := range 2000 {
		c, err := net.DialTimeout("tcp", s.Addr(), waitFor)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		if _, err := c.Write(hello); err != nil {
			t.Fatalf("hello %d: %v", i, err)
		}
	}
	for i, c := range conns {
		r := wire.NewReader(c, 1<<20)
		_ = c.SetReadDeadline(time.Now().Add(waitFor))
		h, body, err := r.Next()
		if err != nil || h.Type != wire.TypeWelcome {
			t.Fatalf("connection %d: %v %s", i, err, strings.TrimSpace(describe(h, body)))
		}
	}
}
