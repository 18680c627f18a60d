package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// Tokens of the test auth setups.
const (
	tokAlice = "alice-token-0123456789abcdef"
	tokBob   = "bob-token-0123456789abcdef"
	tokCarol = "carol-token-0123456789abcdef"
)

// testAuth: alice may publish to chat.* and subscribe to chat.* and
// metrics.>; bob may only subscribe to metrics.>.
func testAuth() *AuthConfig {
	return &AuthConfig{
		Roles: []Role{
			{Name: "chatter", Publish: []string{"chat.*"}, Subscribe: []string{"chat.*", "metrics.>"}},
			{Name: "reader", Subscribe: []string{"metrics.>"}},
		},
		Credentials: []Credential{
			{Name: "alice", Hash: HashToken([]byte(tokAlice)), Role: "chatter"},
			{Name: "bob", Hash: HashToken([]byte(tokBob)), Role: "reader"},
		},
	}
}

// helloToken dials and sends HELLO with token; it returns the answer.
func helloToken(t *testing.T, addr, token string) (*rawConn, wire.Header, []byte) {
	t.Helper()
	c := dialRaw(t, addr)
	c.write(wire.AppendHello(nil, 77, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "t", Token: []byte(token)}))
	h, body := c.next()
	return c, h, body
}

// login completes a handshake with token, failing the test otherwise.
func login(t *testing.T, addr, token string) *rawConn {
	t.Helper()
	c, h, body := helloToken(t, addr, token)
	if h.Type != wire.TypeWelcome {
		t.Fatalf("HELLO with token %q: got %s, want WELCOME", token, describe(h, body))
	}
	return c
}

// expectCode checks that a frame is an ERROR with code and id.
func expectCode(t *testing.T, h wire.Header, body []byte, code wire.Code, id uint32) wire.Error {
	t.Helper()
	if h.Type != wire.TypeError {
		t.Fatalf("got %s, want ERROR %v", describe(h, body), code)
	}
	e, err := wire.DecodeError(h, body)
	if err != nil {
		t.Fatal(err)
	}
	if e.Code != code || h.ID != id {
		t.Fatalf("got ERROR id=%d %v, want id=%d %v", h.ID, e, id, code)
	}
	return e
}

func TestUnauthenticatedClientIsRefused(t *testing.T) {
	s := startTest(t, func(o *Options) { o.Auth = testAuth() })
	for _, tc := range []struct{ name, token string }{
		{"no token", ""},
		{"wrong token", "not-a-token"},
		{"hash instead of token", HashToken([]byte(tokAlice))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, h, body := helloToken(t, s.Addr(), tc.token)
			e := expectCode(t, h, body, wire.CodeUnauthenticated, 77)
			if e.Retriable {
				t.Errorf("UNAUTHENTICATED is marked retriable")
			}
			c.expectClosed()
		})
	}
	// Frames after a refused HELLO are not served either.
	c := dialRaw(t, s.Addr())
	var out []byte
	out = wire.AppendHello(out, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "t", Token: []byte("bad")})
	out = wire.AppendPublish(out, 2, wire.FlagAck, "chat.eu", []byte("x"))
	c.write(out)
	h, body := c.next()
	expectCode(t, h, body, wire.CodeUnauthenticated, 1)
	c.expectClosed()
	if m := s.Metrics(context.Background()); m.Unauthorized != 4 || m.MessagesIn != 0 {
		t.Fatalf("metrics: unauthorized=%d messagesIn=%d, want 4 and 0", m.Unauthorized, m.MessagesIn)
	}
	probeAs(t, s, tokAlice)
}

// probeAs checks that an authorised client is still served.
func probeAs(t *testing.T, s *Server, token string) {
	t.Helper()
	sub := login(t, s.Addr(), token)
	sub.subscribe(1, "chat.probe", wire.StartLive, 0)
	pub := login(t, s.Addr(), token)
	p := pub.publish("chat.probe", []byte("still serving"))
	if ev := sub.events(1)[0]; ev.pos != p {
		t.Fatalf("probe got %v, want position %d", ev, p)
	}
}

func TestForbiddenPublishAndSubscribe(t *testing.T) {
	s := startTest(t, func(o *Options) { o.Auth = testAuth() })
	alice := login(t, s.Addr(), tokAlice)
	bob := login(t, s.Addr(), tokBob)

	// Allowed: alice publishes to chat.eu, bob reads metrics.cpu.host1.
	alice.publish("chat.eu", []byte("hi"))
	bob.subscribe(1, "metrics.cpu.host1", wire.StartLive, 0)

	check := func(c *rawConn, frame []byte, id uint32) {
		t.Helper()
		c.write(frame)
		h, body := c.next()
		e := expectCode(t, h, body, wire.CodeForbidden, id)
		// The text names no pattern, role or other channel.
		for _, leak := range []string{"chat", "metrics", "chatter", "reader", "*", ">"} {
			if strings.Contains(e.Text, leak) {
				t.Errorf("FORBIDDEN text %q reveals %q", e.Text, leak)
			}
		}
		c.expectUsable() // FORBIDDEN is not fatal
	}
	check(alice, wire.AppendPublish(nil, 10, wire.FlagAck, "chat.eu.fr", []byte("x")), 10) // * is one token
	check(alice, wire.AppendPublish(nil, 11, 0, "metrics.cpu", []byte("x")), 11)           // subscribe-only
	check(alice, subscribeFrame(12, 5, wire.StartLive, 0, "secret"), 12)
	check(bob, wire.AppendPublish(nil, 13, wire.FlagAck, "metrics.cpu", []byte("x")), 13)
	check(bob, subscribeFrame(14, 6, wire.StartEarliest, 0, "chat.eu"), 14)
	check(bob, subscribeFrame(15, 7, wire.StartLive, 0, "metrics"), 15) // > needs a token

	// A refused publish stored nothing: the next one is the channel's second.
	info, _ := stateInfo(s, "chat.eu")
	if got := info.Next - info.Earliest; got != 1 {
		t.Fatalf("chat.eu holds %d messages, want 1", got)
	}
	// The decision is cached per connection and channel: asking again
	// gives the same answer.
	check(alice, wire.AppendPublish(nil, 16, wire.FlagAck, "chat.eu.fr", []byte("x")), 16)
	if m := s.Metrics(context.Background()); m.Forbidden != 7 {
		t.Fatalf("forbidden count %d, want 7", m.Forbidden)
	}
}

func TestAnonymousRole(t *testing.T) {
	s := startTest(t, func(o *Options) {
		o.Auth = testAuth()
		o.Auth.Anonymous = "reader"
	})
	anon := login(t, s.Addr(), "")
	anon.subscribe(1, "metrics.x", wire.StartLive, 0)
	anon.write(wire.AppendPublish(nil, 9, wire.FlagAck, "metrics.x", []byte("x")))
	h, body := anon.next()
	expectCode(t, h, body, wire.CodeForbidden, 9)
	// A wrong token is not silently downgraded to anonymous.
	c, h, body := helloToken(t, s.Addr(), "wrong")
	expectCode(t, h, body, wire.CodeUnauthenticated, 77)
	c.expectClosed()
}

// TestTokenRotation replaces the auth setup on a running server: bob's
// token is revoked, alice's role changes, carol's token is added.
func TestTokenRotation(t *testing.T) {
	s := startTest(t, func(o *Options) { o.Auth = testAuth() })
	alice := login(t, s.Addr(), tokAlice)
	aliceSub := login(t, s.Addr(), tokAlice)
	aliceSub.subscribe(1, "chat.room", wire.StartLive, 0)
	aliceSub.subscribe(2, "metrics.cpu", wire.StartLive, 0) // not allowed after the rotation
	bob := login(t, s.Addr(), tokBob)
	if c, h, body := helloToken(t, s.Addr(), tokCarol); h.Type != wire.TypeError {
		t.Fatalf("carol before rotation: %s", describe(h, body))
	} else {
		c.expectClosed()
	}

	next := &AuthConfig{
		Roles: []Role{
			{Name: "chatter", Publish: []string{"chat.room"}, Subscribe: []string{"chat.*"}},
			{Name: "admin", Publish: []string{">"}, Subscribe: []string{">"}},
		},
		Credentials: []Credential{
			{Name: "alice", Hash: HashToken([]byte(tokAlice)), Role: "chatter"},
			{Name: "carol", Hash: HashToken([]byte(tokCarol)), Role: "admin"},
		},
	}
	if err := s.SetAuth(next); err != nil {
		t.Fatal(err)
	}
	// bob is closed at once, although he is idle.
	h, body := bob.next()
	expectCode(t, h, body, wire.CodeUnauthenticated, 0)
	bob.expectClosed()
	if c, h, body := helloToken(t, s.Addr(), tokBob); h.Type != wire.TypeError {
		t.Fatalf("bob after rotation: %s", describe(h, body))
	} else {
		c.expectClosed()
	}
	// alice's subscription to a channel her new role may not read is ended
	// by the server (UNSUBSCRIBED with id 0), the other one stays.
	h, body = aliceSub.next()
	if sid, err := wire.DecodeUnsubscribed(body); h.Type != wire.TypeUnsubscribed || h.ID != 0 || err != nil || sid != 2 {
		t.Fatalf("after the rotation alice's subscriber got %s, want UNSUBSCRIBED id 0 for sub 2", describe(h, body))
	}
	// alice keeps her connection; her new permissions apply to new requests.
	alice.write(wire.AppendPublish(nil, 50, wire.FlagAck, "chat.eu", []byte("x")))
	h, body = alice.next()
	expectCode(t, h, body, wire.CodeForbidden, 50)
	p := alice.publish("chat.room", []byte("after rotation"))
	// Her existing subscription was not cut.
	if ev := aliceSub.events(1)[0]; ev.pos != p {
		t.Fatalf("subscriber got %v, want position %d", ev, p)
	}
	carol := login(t, s.Addr(), tokCarol)
	carol.publish("anything.at.all", []byte("x"))
	carol.publish("metrics.cpu", []byte("not for alice"))
	p2 := carol.publish("chat.room", []byte("for alice"))
	evs, err := aliceSub.eventsUntil(1, p2)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.sub != 1 {
			t.Fatalf("ended subscription got %v", ev)
		}
	}

	// An invalid setup is refused and the current one stays.
	bad := &AuthConfig{Credentials: []Credential{{Hash: HashToken([]byte("x")), Role: "nope"}}}
	err = s.SetAuth(bad)
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Field != "Auth.Credentials[0].Role" {
		t.Fatalf("SetAuth(bad) = %v, want an OptionError naming Auth.Credentials[0].Role", err)
	}
	login(t, s.Addr(), tokCarol)

	// Turning auth off lets anyone in.
	if err := s.SetAuth(nil); err != nil {
		t.Fatal(err)
	}
	anon := login(t, s.Addr(), "")
	anon.publish("whatever", []byte("x"))
	if m := s.Metrics(context.Background()); m.AuthReloads != 2 {
		t.Fatalf("auth reloads %d, want 2", m.AuthReloads)
	}
}

func TestPublishRateLimit(t *testing.T) {
	// 1 publish per second with a burst of 5: of 40 publishes sent at once,
	// about 5 pass (one more if a second elapses meanwhile).
	s := startTest(t, func(o *Options) { o.PublishRate = 1; o.PublishBurst = 5 })
	c, _ := helloRaw(t, s.Addr())
	other, _ := helloRaw(t, s.Addr())
	var out []byte
	const n = 40
	for i := 1; i <= n; i++ {
		out = wire.AppendPublish(out, uint32(i), wire.FlagAck, "rl", []byte("x"))
	}
	c.write(out)
	acked, limited := 0, 0
	for acked+limited < n {
		h, body := c.next()
		switch h.Type {
		case wire.TypePubAck:
			acks, err := wire.DecodePubAck(body, nil)
			if err != nil {
				t.Fatal(err)
			}
			acked += len(acks)
		case wire.TypeError:
			e, _ := wire.DecodeError(h, body)
			if e.Code != wire.CodeRateLimited || !e.Retriable || h.ID == 0 {
				t.Fatalf("got %s, want a retriable RATE_LIMITED for a request", describe(h, body))
			}
			limited++
		default:
			t.Fatalf("unexpected %s", describe(h, body))
		}
	}
	if acked < 5 || acked > 7 {
		t.Fatalf("%d publishes passed, want the burst of 5 (+ at most 2 for elapsed time)", acked)
	}
	c.expectUsable()
	// The limit is per connection: another one is not affected.
	other.publish("rl", []byte("y"))
	m := s.Metrics(context.Background())
	if m.Violations["publish_rate"] != int64(limited) || m.MessagesIn != int64(acked)+1 {
		t.Fatalf("metrics: violations %v, messages in %d; want %d and %d", m.Violations, m.MessagesIn, limited, acked+1)
	}
}

// TestSlowlorisHandshakeIsClosed: a client that dribbles its HELLO one
// byte at a time, and one that sends nothing, are closed at the handshake
// deadline while other clients are served.
func TestSlowlorisHandshakeIsClosed(t *testing.T) {
	s := startTest(t, func(o *Options) { o.HandshakeTimeout = 300 * time.Millisecond })
	silent := dialRaw(t, s.Addr())
	slow := dialRaw(t, s.Addr())
	hello := wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "slowloris"})
	done := make(chan error, 1)
	go func() {
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for i := 0; i < len(hello)-1; i++ { // never the last byte
			<-tk.C
			if _, err := slow.nc.Write(hello[i : i+1]); err != nil {
				done <- nil // closed by the server: expected
				return
			}
		}
		done <- nil
	}()
	start := time.Now()
	probe(t, s) // served meanwhile
	for _, c := range []*rawConn{silent, slow} {
		h, body := c.next()
		expectCode(t, h, body, wire.CodeHandshakeTimeout, 0)
		c.expectClosed()
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("closed after %v, want about 300ms", el)
	}
	<-done
	probe(t, s)
	if v := s.Metrics(context.Background()).Violations["handshake_timeout"]; v != 2 {
		t.Fatalf("handshake_timeout violations %d, want 2", v)
	}
}

func TestIdleTimeoutWithPing(t *testing.T) {
	s := startTest(t, func(o *Options) {
		o.PingInterval = 100 * time.Millisecond
		o.IdleTimeout = 800 * time.Millisecond
	})
	idle, _ := helloRaw(t, s.Addr())
	// The idle client reads but never answers: it gets a PING, then
	// IDLE_TIMEOUT.
	h, body := idle.next()
	if h.Type != wire.TypePing {
		t.Fatalf("got %s, want PING", describe(h, body))
	}
	h, body = idle.next()
	expectCode(t, h, body, wire.CodeIdleTimeout, 0)
	idle.expectClosed()
	// A live client answers every PING and outlives the timeout: PINGs
	// come at most every PingInterval (100ms), so 10 of them take longer
	// than IdleTimeout (800ms).
	live, _ := helloRaw(t, s.Addr())
	start := time.Now()
	for range 10 {
		h, body := live.next()
		if h.Type != wire.TypePing {
			t.Fatalf("live client got %s", describe(h, body))
		}
		live.write(wire.AppendPong(nil, h.ID))
	}
	if el := time.Since(start); el < 800*time.Millisecond {
		t.Fatalf("10 PINGs in %v, faster than one per PingInterval", el)
	}
	live.expectUsable()
	if v := s.Metrics(context.Background()).Violations["idle_timeout"]; v != 1 {
		t.Fatalf("idle_timeout violations %d, want 1", v)
	}
}

func TestMaxConnsPerAddr(t *testing.T) {
	s := startTest(t, func(o *Options) { o.MaxConnsPerAddr = 2 })
	a, _ := helloRaw(t, s.Addr())
	helloRaw(t, s.Addr())
	c := dialRaw(t, s.Addr())
	h, body := c.next()
	expectCode(t, h, body, wire.CodeTooManyConnections, 0)
	c.expectClosed()
	a.nc.Close()
	// The slot is freed when the server has cleaned up a's connection.
	eventually(t, waitFor, "a connection slot to free up", func() bool {
		c, err := dialErr(t, s.Addr(), 0)
		if err != nil {
			return false
		}
		_, err = c.handshakeErr()
		c.nc.Close()
		return err == nil
	})
	if v := s.Metrics(context.Background()).Violations["max_conns_per_addr"]; v < 1 {
		t.Fatalf("max_conns_per_addr violations %d, want at least 1", v)
	}
}

func TestPatternMatch(t *testing.T) {
	cases := []struct {
		pat, name string
		want      bool
	}{
		{"chat.*", "chat.eu", true},
		{"chat.*", "chat.eu.fr", false},
		{"chat.*", "chat", false},
		{"chat.*", "chatter.eu", false},
		{"metrics.>", "metrics.cpu", true},
		{"metrics.>", "metrics.cpu.host1", true},
		{"metrics.>", "metrics", false},
		{">", "anything", true},
		{">", "a.b.c", true},
		{"*", "a", true},
		{"*", "a.b", false},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.b.d", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"a.b", "a", false},
		{"*.>", "x.y", true},
		{"*.>", "x", false},
		// A wildcard never takes an empty token (issue 14: "a.*"
		// matched "a.").
		{"a.*", "a.", false},
		{"a.*", "a.b", true},
		{"*.b", ".b", false},
		{"a.*.c", "a..c", false},
		{"a.>", "a.", false},
		{"a.>", "a.b.", false},
		{"a.>", "a..b", false},
		{"a.>", "a.b.c", true},
		{">", ".", false},
		{">", "a..b", false},
		{"a.b", "a.b.", false},
	}
	for _, tc := range cases {
		p, err := compilePattern(tc.pat)
		if err != nil {
			t.Fatalf("%q: %v", tc.pat, err)
		}
		if got := p.match([]byte(tc.name)); got != tc.want {
			t.Errorf("%q matches %q = %v, want %v", tc.pat, tc.name, got, tc.want)
		}
	}
	for _, bad := range []string{"", "a..b", "a.>.b", "a*", "a.b>", ".a", "a b"} {
		if _, err := compilePattern(bad); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
	p, _ := compilePattern("chat.*.>")
	name := []byte("chat.eu.fr.paris")
	if n := testing.AllocsPerRun(100, func() { p.match(name) }); n != 0 {
		t.Errorf("match allocates %v times", n)
	}
}

func TestGCRA(t *testing.T) {
	interval, tol := rateParams(10, 3) // 100ms apart, bursts of 3
	var g gcra
	now := int64(1e9)
	for i := 0; i < 3; i++ {
		if !g.allow(now, interval, tol) {
			t.Fatalf("burst request %d refused", i)
		}
	}
	if g.allow(now, interval, tol) {
		t.Fatal("4th request at the same instant allowed")
	}
	if !g.allow(now+int64(100*time.Millisecond), interval, tol) {
		t.Fatal("request one interval later refused")
	}
	if g.allow(now+int64(100*time.Millisecond), interval, tol) {
		t.Fatal("second request one interval later allowed")
	}
	// The wall clock going back an hour does not block the connection.
	back := now - int64(time.Hour)
	if !g.allow(back, interval, tol) {
		t.Fatal("request after the clock went back refused")
	}
	if i, _ := rateParams(0, 5); i != 0 {
		t.Fatal("rate 0 is not unlimited")
	}
}

func TestSecurityOptionsValidate(t *testing.T) {
	cases := []struct {
		field  string
		mutate func(*Options)
	}{
		{"IdleTimeout", func(o *Options) { o.IdleTimeout = o.PingInterval }},
		{"PublishRate", func(o *Options) { o.PublishRate = -1 }},
		{"PublishBurst", func(o *Options) { o.PublishRate = 5; o.PublishBurst = 0 }},
		{"MaxConnsPerAddr", func(o *Options) { o.MaxConnsPerAddr = -1 }},
		{"TLSListen", func(o *Options) { o.TLSListen = "nope" }},
		{"TLSCertFile", func(o *Options) { o.TLSListen = "127.0.0.1:0" }},
		{"TLSListen", func(o *Options) { o.TLSCertFile = "c.pem" }},
		{"MetricsListen", func(o *Options) { o.MetricsListen = "9090" }},
		{"Auth.Roles[0].Name", func(o *Options) { o.Auth = &AuthConfig{Roles: []Role{{}}} }},
		{"Auth.Roles[0].Publish[1]", func(o *Options) {
			o.Auth = &AuthConfig{Roles: []Role{{Name: "r", Publish: []string{"ok", "a.>.b"}}}}
		}},
		{"Auth.Credentials[0].Hash", func(o *Options) {
			o.Auth = &AuthConfig{Roles: []Role{{Name: "r"}}, Credentials: []Credential{{Hash: "plain", Role: "r"}}}
		}},
		{"Auth.Anonymous", func(o *Options) { o.Auth = &AuthConfig{Anonymous: "ghost"} }},
	}
	for _, tc := range cases {
		o := DefaultOptions()
		tc.mutate(&o)
		err := o.Validate()
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Field != tc.field || !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: Validate() = %v, want an OptionError for it", tc.field, err)
		}
	}
}

// BenchmarkPublishCheck measures the per-publish cost of the rate limit
// and the cached permission decision (auth on), and of the checks with
// auth and limits off.
func BenchmarkPublishCheck(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("auth=%v", on), func(b *testing.B) {
			srv := &Server{}
			if on {
				st, err := compileAuth(testAuth())
				if err != nil {
					b.Fatal(err)
				}
				srv.auth.Store(st)
				srv.rateInterval, srv.rateTolerance = rateParams(1e9, 1<<20)
			}
			l := &loop{srv: srv, now: 1}
			c := &conn{l: l, hello: true}
			if on && !l.authenticate(c, 1, []byte(tokAlice)) {
				b.Fatal("not authenticated")
			}
			name := []byte("chat.room42")
			b.ReportAllocs()
			for b.Loop() {
				l.now++
				if !l.allowPublish(c, 1, name) {
					b.Fatal("refused")
				}
			}
		})
	}
}

func TestWarnsWhenOpenServerIsExposed(t *testing.T) {
	for _, tc := range []struct {
		addr, tlsAddr string
		auth          *AuthConfig
		warn          bool
	}{
		{"127.0.0.1:7400", "", nil, false},
		{"[::1]:7400", "localhost:7443", nil, false},
		{"0.0.0.0:7400", "", nil, true},
		{"127.0.0.1:7400", "10.0.0.1:7443", nil, true},
		{"0.0.0.0:7400", "", testAuth(), false},
	} {
		var logs strings.Builder
		s := &Server{addr: tc.addr, log: slog.New(slog.NewTextHandler(&logs, nil))}
		s.opts.TLSListen, s.opts.Auth = tc.tlsAddr, tc.auth
		s.warnExposure()
		if got := strings.Contains(logs.String(), "level=WARN"); got != tc.warn {
			t.Errorf("%s/%s auth=%v: warned %v, want %v (%q)", tc.addr, tc.tlsAddr, tc.auth != nil, got, tc.warn, logs.String())
		}
	}
}

// TestPermissionCacheIsBounded: a client touching many channels cannot
// grow its decision cache without limit, and decisions stay right.
func TestPermissionCacheIsBounded(t *testing.T) {
	srv := &Server{}
	st, err := compileAuth(testAuth())
	if err != nil {
		t.Fatal(err)
	}
	srv.auth.Store(st)
	l := &loop{srv: srv}
	c := &conn{l: l, hello: true}
	if !l.authenticate(c, 1, []byte(tokAlice)) {
		t.Fatal("not authenticated")
	}
	for i := 0; i < 3*maxPermCache; i++ {
		ok := c.may(capPublish, []byte(fmt.Sprintf("chat.c%d", i)))
		no := c.may(capPublish, []byte(fmt.Sprintf("other.c%d", i)))
		if !ok || no {
			t.Fatalf("channel %d: allowed %v / %v, want true / false", i, ok, no)
		}
		if len(c.sec.perms) > maxPermCache {
			t.Fatalf("cache holds %d channels, over %d", len(c.sec.perms), maxPermCache)
		}
	}
}
