package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strings"

	"github.com/sluice-rtm/sluice/wire"
)

// Role grants rights on channels. Each pattern is a channel name whose
// dot-separated tokens may be "*" (exactly one token) or, as the last
// token, ">" (one or more tokens): "chat.*" matches "chat.eu" but not
// "chat.eu.fr"; "metrics.>" matches both "metrics.cpu" and
// "metrics.cpu.host1"; ">" matches every channel.
type Role struct {
	Name      string
	Publish   []string // channels the role may publish to
	Subscribe []string // channels the role may subscribe to
}

// Credential maps a token, known only by its hash (see HashToken), to a
// role.
type Credential struct {
	// Name identifies the credential in logs; it is never sent to clients.
	Name string
	// Hash is HashToken(token): "sha256:" and 64 lower-case hex digits.
	Hash string
	// Role is the Name of one of AuthConfig.Roles.
	Role string
}

// AuthConfig is the authentication and permission setup of a server: which
// tokens are accepted and what each may do. Tokens must be random secrets
// of at least 128 bits (e.g. from `sluice token`): they are stored as
// unsalted SHA-256 hashes, which protects a high-entropy token but not a
// guessable password.
type AuthConfig struct {
	Roles       []Role
	Credentials []Credential
	// Anonymous is the role of clients that send no token ("" = they are
	// refused with ERROR UNAUTHENTICATED).
	Anonymous string
}

// hashPrefix starts every token hash.
const hashPrefix = "sha256:"

// HashToken returns the form in which a token is stored in
// Credential.Hash. It is safe for concurrent use.
func HashToken(token []byte) string {
	sum := sha256.Sum256(token)
	return hashPrefix + hex.EncodeToString(sum[:])
}

// parseHash decodes a Credential.Hash.
func parseHash(s string) ([32]byte, error) {
	var h [32]byte
	hexPart, ok := strings.CutPrefix(s, hashPrefix)
	if !ok {
		return h, fmt.Errorf("%q does not start with %q (use HashToken or `sluice token`)", s, hashPrefix)
	}
	if len(hexPart) != 64 {
		return h, fmt.Errorf("want 64 hex digits after %q, got %d characters", hashPrefix, len(hexPart))
	}
	if _, err := hex.Decode(h[:], []byte(hexPart)); err != nil {
		return h, fmt.Errorf("not hex: %v", err)
	}
	return h, nil
}

// pattern is a compiled channel pattern.
type pattern struct {
	toks []string // literal tokens or "*"
	tail bool     // ends with ">": one or more further tokens
}

func compilePattern(s string) (pattern, error) {
	if s == "" {
		return pattern{}, fmt.Errorf("empty pattern")
	}
	if len(s) > wire.MaxChannelLen {
		return pattern{}, fmt.Errorf("pattern longer than %d bytes", wire.MaxChannelLen)
	}
	parts := strings.Split(s, ".")
	var p pattern
	for i, t := range parts {
		switch {
		case t == "":
			return pattern{}, fmt.Errorf("pattern %q has an empty token", s)
		case t == ">":
			if i != len(parts)-1 {
				return pattern{}, fmt.Errorf("pattern %q: \">\" must be the last token", s)
			}
			p.tail = true
			continue
		case t != "*" && strings.ContainsAny(t, "*>"):
			return pattern{}, fmt.Errorf("pattern %q: \"*\" and \">\" must be whole tokens", s)
		}
		p.toks = append(p.toks, t)
	}
	if err := wire.ValidChannel([]byte(strings.NewReplacer("*", "x", ">", "x").Replace(s))); err != nil {
		return pattern{}, fmt.Errorf("pattern %q: %v", s, err)
	}
	return p, nil
}

// match reports whether channel name matches p. It does not allocate.
// A wildcard never matches an empty token: "*" is exactly one non-empty
// token and ">" one or more non-empty tokens, so "a.*" does not match
// "a." and "a.>" does not match "a." or "a.b." (channel names may have
// empty tokens; a permission on a prefix's children is not one on those).
func (p *pattern) match(name []byte) bool {
	pos := 0 // start of the next token; len(name)+1 once none is left
	for _, t := range p.toks {
		if pos > len(name) {
			return false
		}
		var tok []byte
		if i := bytes.IndexByte(name[pos:], '.'); i >= 0 {
			tok, pos = name[pos:pos+i], pos+i+1
		} else {
			tok, pos = name[pos:], len(name)+1
		}
		if t == "*" {
			if len(tok) == 0 {
				return false
			}
		} else if string(tok) != t {
			return false
		}
	}
	if p.tail {
		if pos > len(name) {
			return false
		}
		// Every remaining token is non-empty: no leading, trailing or
		// doubled dot in name[pos:].
		rest := name[pos:]
		return len(rest) > 0 && rest[0] != '.' && rest[len(rest)-1] != '.' && !bytes.Contains(rest, []byte(".."))
	}
	return pos == len(name)+1
}

// compiledRole is a compiled Role.
type compiledRole struct {
	name     string
	pub, sub []pattern
}

func matchAny(ps []pattern, name []byte) bool {
	for i := range ps {
		if ps[i].match(name) {
			return true
		}
	}
	return false
}

// principal is who a connection authenticated as.
type principal struct {
	name string // credential name, "anonymous" for the anonymous role
	role *compiledRole
}

// authState is a compiled, immutable AuthConfig. A server holds the
// current one in an atomic pointer; replacing it (SetAuth) is how a reload
// happens, and a connection notices by comparing pointers.
type authState struct {
	byHash map[[32]byte]*principal
	anon   *principal
}

// validate checks the configuration; errors name the field (relative to
// Options) and say what is wrong.
func (a *AuthConfig) validate() error {
	_, err := compileAuth(a)
	return err
}

// Validate checks every role pattern, credential hash and role reference;
// its errors are *OptionError naming the field (e.g.
// "Auth.Credentials[1].Hash").
func (a *AuthConfig) Validate() error { return a.validate() }

func compileAuth(a *AuthConfig) (*authState, error) {
	if a == nil {
		return nil, nil
	}
	roles := make(map[string]*compiledRole, len(a.Roles))
	for i, r := range a.Roles {
		f := fmt.Sprintf("Auth.Roles[%d]", i)
		if r.Name == "" {
			return nil, optErr(f+".Name", "empty")
		}
		if roles[r.Name] != nil {
			return nil, optErr(f+".Name", "role %q is defined twice", r.Name)
		}
		cr := &compiledRole{name: r.Name}
		for j, s := range r.Publish {
			p, err := compilePattern(s)
			if err != nil {
				return nil, optErr(fmt.Sprintf("%s.Publish[%d]", f, j), "%v", err)
			}
			cr.pub = append(cr.pub, p)
		}
		for j, s := range r.Subscribe {
			p, err := compilePattern(s)
			if err != nil {
				return nil, optErr(fmt.Sprintf("%s.Subscribe[%d]", f, j), "%v", err)
			}
			cr.sub = append(cr.sub, p)
		}
		roles[r.Name] = cr
	}
	st := &authState{byHash: make(map[[32]byte]*principal, len(a.Credentials))}
	for i, c := range a.Credentials {
		f := fmt.Sprintf("Auth.Credentials[%d]", i)
		h, err := parseHash(c.Hash)
		if err != nil {
			return nil, optErr(f+".Hash", "%v", err)
		}
		if st.byHash[h] != nil {
			return nil, optErr(f+".Hash", "the same token hash is listed twice")
		}
		r := roles[c.Role]
		if r == nil {
			return nil, optErr(f+".Role", "no role named %q", c.Role)
		}
		name := c.Name
		if name == "" {
			name = fmt.Sprintf("credential-%d", i)
		}
		st.byHash[h] = &principal{name: name, role: r}
	}
	if a.Anonymous != "" {
		r := roles[a.Anonymous]
		if r == nil {
			return nil, optErr("Auth.Anonymous", "no role named %q", a.Anonymous)
		}
		st.anon = &principal{name: "anonymous", role: r}
	}
	return st, nil
}

// lookup finds the principal of a token hash (or the anonymous one when
// the connection sent no token); nil when it is not accepted.
func (st *authState) lookup(hasToken bool, h *[32]byte) *principal {
	if !hasToken {
		return st.anon
	}
	return st.byHash[*h]
}

// Permission bits cached per connection and channel.
const (
	permPubKnown uint8 = 1 << iota
	permPub
	permSubKnown
	permSub
)

// maxPermCache bounds a connection's decision cache; when it is full it
// starts again empty.
const maxPermCache = 256

// connSec is a connection's security state: identity, permission cache,
// rate limiter and activity. It lives inside conn and is owned by the
// connection's loop like the rest of conn.
type connSec struct {
	ip     string // remote IP counted for the per-address limit ("" = not counted)
	remote string // client IP (behind a trusted proxy, the one it reported), for logs
	// addr: how far the client address is known (clientaddr.go); until
	// addrKnown the connection is neither counted nor refused by address.
	addr     addrStage
	tls      bool
	hasToken bool
	token    [32]byte // SHA-256 of the HELLO token

	who   *principal
	state *authState // the snapshot who was resolved in
	perms map[string]uint8

	bucket gcra
	lastIn int64 // unix ns of the last input
	pinged bool  // a PING was sent since lastIn
}

// SetAuth replaces the authentication setup of a running server (nil
// turns authentication off). Connections keep their identity (the token
// they presented): from their next request on, the permissions of their
// role in the new setup apply; a connection whose token is no longer
// accepted gets ERROR UNAUTHENTICATED and is closed. Subscriptions made
// before the change stay. Safe for concurrent use.
func (s *Server) SetAuth(a *AuthConfig) error {
	st, err := compileAuth(a)
	if err != nil {
		return err
	}
	s.authMu.Lock()
	defer s.authMu.Unlock()
	s.auth.Store(st)
	s.reloads.Add(1)
	for _, l := range s.loopList() {
		l.execute(l.recheckAuth)
	}
	s.log.Info("auth reloaded", "enabled", st != nil, "credentials", credCount(st))
	return nil
}

func credCount(st *authState) int {
	if st == nil {
		return 0
	}
	return len(st.byHash)
}

// recheckAuth runs on the loop after SetAuth: every connection is resolved
// against the new setup at once, so that revoked ones are closed even if
// they are idle.
func (l *loop) recheckAuth() {
	st := l.srv.auth.Load()
	for c := range l.conns {
		if c.hello && !c.closing && !c.closed && l.refreshAuth(c, st) {
			l.recheckSubs(c)
		}
	}
}

// recheckSubs ends c's subscriptions to channels it may no longer
// subscribe to: each gets an UNSUBSCRIBED with id 0 (PROTOCOL.md 2.7) and
// no frame after it. A subscription whose SUBSCRIBE is still being looked
// up ends the same way right after its SUBSCRIBED.
func (l *loop) recheckSubs(c *conn) {
	for id, su := range c.subs {
		if l.permitted(c, []byte(su.lc.name), false) {
			continue
		}
		l.srv.log.Info("ending a subscription: permission revoked", "remote", c.sec.remote,
			"credential", c.sec.who.nameOr(), "channel", su.lc.name, "sub", id)
		if su.pending {
			if !su.cancel {
				su.cancel, su.cancelReq = true, 0
			}
			continue
		}
		l.unsubscribe(c, 0, id)
	}
}

// refreshAuth resolves c's identity in st; false (after ERROR
// UNAUTHENTICATED) if its token is no longer accepted.
func (l *loop) refreshAuth(c *conn, st *authState) bool {
	c.sec.state = st
	clear(c.sec.perms)
	if st == nil {
		c.sec.who = nil
		return true
	}
	who := st.lookup(c.sec.hasToken, &c.sec.token)
	if who == nil {
		l.srv.log.Info("closing connection: credentials revoked", "remote", c.sec.remote, "credential", c.sec.who.nameOr())
		c.sec.who = nil
		c.sendError(0, wire.CodeUnauthenticated, "credentials revoked")
		return false
	}
	c.sec.who = who
	return true
}

// nameOr returns the principal's name, or "none" for nil.
func (p *principal) nameOr() string {
	if p == nil {
		return "none"
	}
	return p.name
}

// authenticate checks the HELLO token; false (after ERROR
// UNAUTHENTICATED, which closes) when it is not accepted.
func (l *loop) authenticate(c *conn, id uint32, token []byte) bool {
	if len(token) > 0 {
		c.sec.hasToken = true
		c.sec.token = sha256.Sum256(token)
	}
	st := l.srv.auth.Load()
	c.sec.state = st
	if st == nil {
		return true
	}
	c.sec.who = st.lookup(c.sec.hasToken, &c.sec.token)
	if c.sec.who == nil {
		text := "token not accepted"
		if !c.sec.hasToken {
			text = "a token is required"
		}
		l.srv.log.Info("authentication failed", "remote", c.sec.remote, "tls", c.sec.tls, "reason", text)
		c.sendError(id, wire.CodeUnauthenticated, text)
		return false
	}
	return true
}

// permitted decides whether c may publish (pub) or subscribe to channel
// name under the current setup, caching the decision. It allocates only
// when a channel is decided for the first time on the connection.
func (l *loop) permitted(c *conn, name []byte, pub bool) bool {
	st := l.srv.auth.Load()
	if st != c.sec.state && !l.refreshAuth(c, st) {
		return false
	}
	if st == nil {
		return true
	}
	known, allow := permSubKnown, permSub
	if pub {
		known, allow = permPubKnown, permPub
	}
	bits := c.sec.perms[string(name)]
	if bits&known == 0 {
		ps := c.sec.who.role.sub
		if pub {
			ps = c.sec.who.role.pub
		}
		bits |= known
		if matchAny(ps, name) {
			bits |= allow
		}
		if c.sec.perms == nil || len(c.sec.perms) >= maxPermCache {
			c.sec.perms = make(map[string]uint8)
		}
		c.sec.perms[string(name)] = bits
	}
	return bits&allow != 0
}

// allowPublish applies the rate limit and the publish permission to a
// PUBLISH of channel name; when it returns false the publish was answered
// with an ERROR and must be dropped.
func (l *loop) allowPublish(c *conn, id uint32, name []byte) bool {
	if l.srv.rateInterval > 0 && !c.sec.bucket.allow(l.now, l.srv.rateInterval, l.srv.rateTolerance) {
		c.sendError(id, wire.CodeRateLimited, "publish rate limit exceeded")
		return false
	}
	if !l.permitted(c, name, true) {
		if !c.closing {
			c.sendError(id, wire.CodeForbidden, "not allowed to publish to this channel")
		}
		return false
	}
	return true
}

// allowSubscribe applies the subscribe permission; false after an ERROR.
func (l *loop) allowSubscribe(c *conn, id uint32, name []byte) bool {
	if !l.permitted(c, name, false) {
		if !c.closing {
			c.sendError(id, wire.CodeForbidden, "not allowed to subscribe to this channel")
		}
		return false
	}
	return true
}

// isLoopback reports whether a listen address only accepts local clients.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
