package engine

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client"
	"github.com/sluice-rtm/sluice/internal/jwtauth"
	"github.com/sluice-rtm/sluice/wire"
)

// jwtSecret is the HS256 key "hs" of the JWT tests.
var jwtSecret = []byte("jwt-test-secret-0123456789abcdef")

// jwtES is the ES256 key "es" of the JWT tests, made once.
var jwtES = sync.OnceValues(func() (jwtauth.SigningKey, []byte) {
	priv, _, pub, err := jwtauth.GenerateKey(jwtauth.ES256)
	if err != nil {
		panic(err)
	}
	return jwtauth.SigningKey{ID: "es", Alg: jwtauth.ES256, Key: priv}, pub
})

// jwtAuth accepts JWTs signed with "hs" or "es" (grace 10 s, leeway 1 s),
// tokens without caps get role "reader", and alice's static token still
// works.
func jwtAuth() *AuthConfig {
	_, esPub := jwtES()
	a := testAuth()
	a.JWT = &JWTConfig{
		Keys: []JWTKey{
			{ID: "hs", Alg: "HS256", Secret: jwtSecret},
			{ID: "es", Alg: "ES256", PublicKey: esPub},
		},
		Leeway: time.Second, Grace: 10 * time.Second, Role: "reader",
	}
	return a
}

// testClock is a settable clock for Options.now.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.Unix(1_800_000_000, 0)} }

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *testClock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// mintHS mints a token with key "hs" at clock's time.
func mintHS(t *testing.T, clock *testClock, c jwtauth.MintClaims) string {
	t.Helper()
	if c.TTL == 0 {
		c.TTL = time.Minute
	}
	tok, err := jwtauth.Mint(jwtauth.SigningKey{ID: "hs", Alg: "HS256", Key: jwtSecret}, c, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// helloJWT dials and sends HELLO (id 77) with FeatureRefresh and token.
func helloJWT(t *testing.T, addr, token string) *rawConn {
	t.Helper()
	c := dialRaw(t, addr)
	c.write(wire.AppendHello(nil, 77, wire.Hello{MinVersion: 1, MaxVersion: 1, Features: wire.FeatureRefresh, Token: []byte(token)}))
	return c
}

// loginJWT completes a handshake with token and returns the AUTHED that
// follows WELCOME.
func loginJWT(t *testing.T, addr, token string) (*rawConn, wire.Authed) {
	t.Helper()
	c := helloJWT(t, addr, token)
	if h, body := c.next(); h.Type != wire.TypeWelcome {
		t.Fatalf("got %s, want WELCOME", describe(h, body))
	}
	return c, c.expectAuthed(77)
}

// expectAuthed reads the next frame, which must be AUTHED with id.
func (c *rawConn) expectAuthed(id uint32) wire.Authed {
	c.t.Helper()
	h, body := c.next()
	if h.Type != wire.TypeAuthed || h.ID != id {
		c.t.Fatalf("got %s, want AUTHED id=%d", describe(h, body), id)
	}
	a, err := wire.DecodeAuthed(body)
	if err != nil {
		c.t.Fatal(err)
	}
	return a
}

// sweepAll runs every loop's sweep and waits for them.
func sweepAll(s *Server) {
	var wg sync.WaitGroup
	for _, l := range s.loopList() {
		wg.Add(1)
		l.execute(func() { l.sweep(); wg.Done() })
	}
	wg.Wait()
}

// identities returns the client id and info of every connection that
// completed its handshake, read on the connections' loops.
func identities(s *Server) map[string]string {
	var mu sync.Mutex
	var wg sync.WaitGroup
	ids := map[string]string{}
	for _, l := range s.loopList() {
		wg.Add(1)
		l.execute(func() {
			defer wg.Done()
			for c := range l.conns {
				if c.hello && !c.closing {
					mu.Lock()
					ids[c.clientID] = string(c.clientInfo)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return ids
}

// TestJWTHelloIdentityAndCaps: a JWT in HELLO sets the connection's client
// id and info, its caps claim applies, and AUTHED tells the expiry.
func TestJWTHelloIdentityAndCaps(t *testing.T) {
	clock := newTestClock()
	s := startTest(t, func(o *Options) { o.Auth = jwtAuth(); o.now = clock.Now })
	tok := mintHS(t, clock, jwtauth.MintClaims{Subject: "alice", TTL: time.Hour, Info: json.RawMessage(`{"name": "Alice"}`),
		Caps: &jwtauth.Caps{Publish: []string{"chat.*"}, Subscribe: []string{"chat.>"}}})
	c, a := loginJWT(t, s.Addr(), tok)
	if a.ClientID != "alice" || a.ExpiresIn != time.Hour || a.Grace != 10*time.Second {
		t.Fatalf("AUTHED %+v, want alice, 1h, 10s", a)
	}
	if ids := identities(s); ids["alice"] != `{"name":"Alice"}` {
		t.Fatalf("identities %q", ids)
	}
	c.publish("chat.eu", []byte("hi"))
	c.write(wire.AppendPublish(nil, 5, wire.FlagAck, "metrics.cpu", []byte("x")))
	h, body := c.next()
	expectCode(t, h, body, wire.CodeForbidden, 5)

	// An ES256 token without caps gets the configured role (reader:
	// subscribe metrics.>); without FeatureRefresh no AUTHED comes.
	es, _ := jwtES()
	tok2, err := jwtauth.Mint(es, jwtauth.MintClaims{Subject: "bob", TTL: time.Hour}, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	bob := login(t, s.Addr(), tok2)
	bob.subscribe(1, "metrics.cpu", wire.StartLive, 0)
	bob.write(subscribeFrame(9, 2, wire.StartLive, 0, "chat.eu"))
	h, body = bob.next()
	expectCode(t, h, body, wire.CodeForbidden, 9)
	// A static token still works, and says it does not expire.
	carol, a := loginJWT(t, s.Addr(), tokAlice)
	if a.ExpiresIn != 0 || a.ClientID != "alice" {
		t.Fatalf("static token: AUTHED %+v", a)
	}
	carol.publish("chat.eu", []byte("static"))
}

// TestJWTBadTokensAreRefused: every bad token gets ERROR UNAUTHENTICATED
// answering the HELLO, then the connection closes: nothing else.
func TestJWTBadTokensAreRefused(t *testing.T) {
	clock := newTestClock()
	s := startTest(t, func(o *Options) { o.Auth = jwtAuth(); o.now = clock.Now })
	_, esPub := jwtES()
	exp := clock.Now().Add(time.Hour).Unix()
	claims := `{"sub":"x","exp":` + itoa(exp) + `}`
	good := mintHS(t, clock, jwtauth.MintClaims{Subject: "x"})
	parts := strings.Split(good, ".")
	for _, tc := range []struct{ name, tok, text string }{
		{"bad signature", parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2])), "token not accepted"},
		{"none", b64url(`{"alg":"none","kid":"hs"}`) + "." + b64url(claims) + ".", "token not accepted"},
		{"algorithm confusion", handSigned(`{"alg":"HS256","kid":"es"}`, claims, esPub), "token not accepted"},
		{"unknown kid", handSigned(`{"alg":"HS256","kid":"zz"}`, claims, jwtSecret), "token not accepted"},
		{"expired long ago", handSigned(`{"alg":"HS256","kid":"hs"}`, `{"exp":1}`, jwtSecret), "token expired"},
		{"not yet valid", mintHS(t, clock, jwtauth.MintClaims{NotBefore: clock.Now().Add(time.Minute)}), "token not valid yet"},
		{"malformed", "a.b.c", "token not accepted"},
		{"bad pattern in caps", mintHS(t, clock, jwtauth.MintClaims{Caps: &jwtauth.Caps{Publish: []string{"a.>.b"}}}), "token not accepted"},
		{"oversized", strings.Repeat("x.", 2500), "token too large: at most 4096 bytes"},
	} {
		c := helloJWT(t, s.Addr(), tc.tok)
		h, body := c.next()
		e := expectCode(t, h, body, wire.CodeUnauthenticated, 77)
		if e.Text != tc.text {
			t.Errorf("%s: text %q, want %q", tc.name, e.Text, tc.text)
		}
		c.expectClosed()
	}
}

// TestJWTExpiredConnectionClosesAfterGrace: a connection whose token
// expired stays open through the grace period, then gets ERROR
// TOKEN_EXPIRED (id 0) and is closed.
func TestJWTExpiredConnectionClosesAfterGrace(t *testing.T) {
	clock := newTestClock()
	s := startTest(t, func(o *Options) { o.Auth = jwtAuth(); o.now = clock.Now })
	c, _ := loginJWT(t, s.Addr(), mintHS(t, clock, jwtauth.MintClaims{Subject: "alice", TTL: time.Minute}))
	clock.Advance(time.Minute + 9*time.Second) // expired, within the grace
	sweepAll(s)
	c.ping()
	clock.Advance(2 * time.Second)
	sweepAll(s)
	h, e := c.expectErrorFrame() // the server may PING first: its clock jumped
	if e.Code != wire.CodeTokenExpired || h.ID != 0 {
		t.Fatalf("got ERROR id=%d %v, want TOKEN_EXPIRED id 0", h.ID, e)
	}
	if !strings.Contains(e.Text, "no REFRESH came within 10s") {
		t.Fatalf("text %q", e.Text)
	}
	c.expectClosed()
	if m := s.Metrics(t.Context()); m.TokensExpired != 1 {
		t.Fatalf("tokens expired %d, want 1", m.TokensExpired)
	}
}

// TestJWTRefreshOnLiveConnection: a REFRESH before the expiry replaces
// the token: the connection outlives the first token's expiry and grace,
// the new capabilities apply at once (a subscription they no longer allow
// ends with UNSUBSCRIBED id 0), the others go on, and AUTHED answers with
// the new expiry.
func TestJWTRefreshOnLiveConnection(t *testing.T) {
	clock := newTestClock()
	s := startTest(t, func(o *Options) { o.Auth = jwtAuth(); o.now = clock.Now })
	first := mintHS(t, clock, jwtauth.MintClaims{Subject: "alice", TTL: time.Minute,
		Caps: &jwtauth.Caps{Publish: []string{"chat.*"}, Subscribe: []string{"chat.>", "metrics.>"}}})
	c, _ := loginJWT(t, s.Addr(), first)
	c.subscribe(1, "chat.eu", wire.StartLive, 0)
	c.subscribe(2, "metrics.cpu", wire.StartLive, 0)
	clock.Advance(50 * time.Second)
	second := mintHS(t, clock, jwtauth.MintClaims{Subject: "alice", TTL: time.Minute, Info: json.RawMessage(`{"v":2}`),
		Caps: &jwtauth.Caps{Publish: []string{"chat.*"}, Subscribe: []string{"chat.>"}}})
	c.write(wire.AppendRefresh(nil, 40, []byte(second)))
	h, body := c.next()
	if h.Type != wire.TypeUnsubscribed || h.ID != 0 {
		t.Fatalf("got %s, want UNSUBSCRIBED id 0", describe(h, body))
	}
	if sub, _ := wire.DecodeUnsubscribed(body); sub != 2 {
		t.Fatalf("UNSUBSCRIBED for %d, want 2", sub)
	}
	if a := c.expectAuthed(40); a.ExpiresIn != time.Minute || a.ClientID != "alice" {
		t.Fatalf("AUTHED %+v", a)
	}
	if ids := identities(s); ids["alice"] != `{"v":2}` {
		t.Fatalf("identities %q: the new info must apply", ids)
	}
	clock.Advance(25 * time.Second) // past the first token's expiry and grace
	sweepAll(s)
	c.ping()
	pos := c.publish("chat.eu", []byte("still here"))
	ev := c.events(1)
	if ev[0].sub != 1 || ev[0].pos != pos {
		t.Fatalf("events %+v, want chat.eu's message at %d", ev, pos)
	}
	if m := s.Metrics(t.Context()); m.JWTRefreshes != 1 {
		t.Fatalf("refreshes %d, want 1", m.JWTRefreshes)
	}
	clock.Advance(time.Minute) // the second token is over too
	sweepAll(s)
	if h, e := c.expectErrorFrame(); e.Code != wire.CodeTokenExpired || h.ID != 0 {
		t.Fatalf("got ERROR id=%d %v, want TOKEN_EXPIRED id 0", h.ID, e)
	}
}

// TestJWTRefreshRefusals: a token for another sub or a bad token closes
// the connection with UNAUTHENTICATED; a static-token connection cannot
// refresh (FORBIDDEN, it carries on); without FeatureRefresh REFRESH is an
// unknown type.
func TestJWTRefreshRefusals(t *testing.T) {
	clock := newTestClock()
	s := startTest(t, func(o *Options) { o.Auth = jwtAuth(); o.now = clock.Now })
	for _, tc := range []struct{ name, tok, text string }{
		{"other sub", mintHS(t, clock, jwtauth.MintClaims{Subject: "mallory"}), "the token is for another client"},
		{"bad token", "x.y.z", "token not accepted"},
		{"static token", tokAlice, "token not accepted"},
	} {
		c, _ := loginJWT(t, s.Addr(), mintHS(t, clock, jwtauth.MintClaims{Subject: "alice"}))
		c.write(wire.AppendRefresh(nil, 41, []byte(tc.tok)))
		h, body := c.next()
		if e := expectCode(t, h, body, wire.CodeUnauthenticated, 41); e.Text != tc.text {
			t.Errorf("%s: %q, want %q", tc.name, e.Text, tc.text)
		}
		c.expectClosed()
	}
	static, _ := loginJWT(t, s.Addr(), tokAlice)
	static.write(wire.AppendRefresh(nil, 42, []byte(mintHS(t, clock, jwtauth.MintClaims{Subject: "alice"}))))
	h, body := static.next()
	expectCode(t, h, body, wire.CodeForbidden, 42)
	static.expectUsable()
	plain := login(t, s.Addr(), mintHS(t, clock, jwtauth.MintClaims{Subject: "alice"}))
	plain.write(wire.AppendRefresh(nil, 43, []byte("a.b.c")))
	h, body = plain.next()
	expectCode(t, h, body, wire.CodeUnknownType, 43)
}

// TestJWTReloadKeepsOrDropsConnections: after a reload a JWT connection
// stays while the key that verified its token is still configured, and
// is closed (UNAUTHENTICATED) once it is gone.
func TestJWTReloadKeepsOrDropsConnections(t *testing.T) {
	clock := newTestClock()
	s := startTest(t, func(o *Options) { o.Auth = jwtAuth(); o.now = clock.Now })
	hs, _ := loginJWT(t, s.Addr(), mintHS(t, clock, jwtauth.MintClaims{Subject: "a"}))
	es, _ := jwtES()
	esTok, err := jwtauth.Mint(es, jwtauth.MintClaims{Subject: "b", TTL: time.Hour}, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	ec, _ := loginJWT(t, s.Addr(), esTok)
	a := jwtAuth()
	a.JWT.Keys = a.JWT.Keys[1:] // "hs" removed
	if err := s.SetAuth(a); err != nil {
		t.Fatal(err)
	}
	h, body := hs.next()
	expectCode(t, h, body, wire.CodeUnauthenticated, 0)
	hs.expectClosed()
	ec.ping()
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func b64url(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// handSigned builds an HS256-signed JWS by hand (not with golang-jwt),
// whatever its header says, keyed with key.
func handSigned(header, claims string, key []byte) string {
	in := b64url(header) + "." + b64url(claims)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// ping sends a PING and waits for its PONG (the connection is open and
// served).
func (c *rawConn) ping() {
	c.t.Helper()
	id := c.nextID() + 1000
	c.write(wire.AppendPing(nil, id))
	for {
		h, body := c.next()
		if h.Type == wire.TypePong && h.ID == id {
			return
		}
		if h.Type == wire.TypeError {
			c.t.Fatalf("PING answered by %s", describe(h, body))
		}
	}
}

// TestConsoleAcceptsJWT: the console takes a JWT as the client port does,
// and shows the channels its caps let it subscribe to.
func TestConsoleAcceptsJWT(t *testing.T) {
	clock := newTestClock()
	s := startTest(t, func(o *Options) { o.Auth = jwtAuth(); o.now = clock.Now })
	src := s.consoleSource()
	tok := mintHS(t, clock, jwtauth.MintClaims{Subject: "ops", Caps: &jwtauth.Caps{Subscribe: []string{"chat.>"}}})
	allow, err := src.Authorize([]byte(tok), true)
	if err != nil || allow == nil || !allow("chat.eu") || allow("metrics.cpu") {
		t.Fatalf("Authorize(JWT) = %v, %v", allow != nil, err)
	}
	clock.Advance(2 * time.Minute)
	if _, err := src.Authorize([]byte(tok), true); err == nil {
		t.Fatal("an expired JWT was accepted")
	}
}

// TestJWTSDKRefreshKeepsConnection: the Go SDK with a token provider and
// 2-second tokens (real clock, no leeway, 1 s grace) refreshes on the open
// connection: across three token lifetimes its subscription keeps
// receiving, the provider is asked once per refresh plus the HELLO (no
// reconnect), and no connection is closed for an expired token.
func TestJWTSDKRefreshKeepsConnection(t *testing.T) {
	auth := jwtAuth()
	auth.JWT.Leeway, auth.JWT.Grace = time.Nanosecond, time.Second
	s := startTest(t, func(o *Options) { o.Auth = auth })
	var calls atomic.Int32
	called := make(chan int32, 16)
	provider := func(context.Context) ([]byte, error) {
		n := calls.Add(1)
		tok, err := jwtauth.Mint(jwtauth.SigningKey{ID: "hs", Alg: "HS256", Key: jwtSecret}, jwtauth.MintClaims{
			Subject: "sdk", TTL: 2 * time.Second, Caps: &jwtauth.Caps{Publish: []string{"chat.*"}, Subscribe: []string{"chat.*"}}}, time.Now())
		called <- n
		return []byte(tok), err
	}
	ctx := t.Context()
	c, err := client.Dial(ctx, s.Addr(), client.WithTokenProvider(provider))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "chat.sdk")
	if err != nil {
		t.Fatal(err)
	}
	for n := int32(0); n < 4; { // the HELLO's token and three refreshes: about 5 s
		select {
		case n = <-called:
		case <-time.After(waitFor):
			t.Fatalf("the provider was called %d times", calls.Load())
		}
	}
	pos, err := c.Publish(ctx, "chat.sdk", []byte("after three refreshes"))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	ev, err := sub.Next(rctx)
	if err != nil || ev.Position != pos {
		t.Fatalf("event %+v, %v; want the message at %d", ev, err, pos)
	}
	if r := c.TokenRefreshes(); r < 2 || uint64(calls.Load()) > r+2 {
		t.Fatalf("%d refreshes accepted, provider called %d times: a reconnect happened", r, calls.Load())
	}
	if m := s.Metrics(ctx); m.TokensExpired != 0 || m.JWTRefreshes < 2 {
		t.Fatalf("server: %d expired, %d refreshes", m.TokensExpired, m.JWTRefreshes)
	}
	if c.ClientID() != "sdk" {
		t.Fatalf("ClientID %q", c.ClientID())
	}
}

// TestJWTSDKExpiredWithoutProvider: with a fixed token that expires, the
// server closes the connection after the grace period (TOKEN_EXPIRED),
// and the SDK's reconnects are refused (the token is expired), so the
// Conn ends with UNAUTHENTICATED.
func TestJWTSDKExpiredWithoutProvider(t *testing.T) {
	auth := jwtAuth()
	auth.JWT.Leeway, auth.JWT.Grace = time.Nanosecond, 200*time.Millisecond
	s := startTest(t, func(o *Options) { o.Auth = auth })
	tok, err := jwtauth.Mint(jwtauth.SigningKey{ID: "hs", Alg: "HS256", Key: jwtSecret},
		jwtauth.MintClaims{Subject: "fixed", TTL: time.Second, Caps: &jwtauth.Caps{Subscribe: []string{"chat.*"}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	c, err := client.Dial(ctx, s.Addr(), client.WithToken([]byte(tok)), client.WithBackoff(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "chat.fixed")
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	_, err = sub.Next(rctx)
	var se *client.ServerError
	if !errors.As(err, &se) || se.Err.Code != wire.CodeUnauthenticated || !strings.Contains(se.Err.Text, "token expired") {
		t.Fatalf("subscription ended with %v, want UNAUTHENTICATED token expired", err)
	}
	if m := s.Metrics(ctx); m.TokensExpired != 1 {
		t.Fatalf("tokens expired %d, want 1", m.TokensExpired)
	}
}
