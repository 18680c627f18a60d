package engine

import (
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
	// History: channels whose retained messages the role may read, i.e.
	// subscribe with a start other than live (earliest, a position, last
	// N, since T; a resume after a reconnect is a start at a position).
	// nil: the Subscribe patterns; empty but not nil: none.
	History []string
	// Presence: channels whose presence and occupancy the role may read.
	// nil: the Subscribe patterns; empty but not nil: none.
	Presence []string
}

// Credential maps a token, known only by its hash (see HashToken), to a
// role.
type Credential struct {
	// Name identifies the credential in logs, and is the client id of
	// the connections that present this token (the id presence reports to
	// other clients; "" = none).
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
	// JWT accepts signed, expiring tokens (JSON Web Tokens) besides the
	// static ones (jwt.go, docs/auth.md); nil: none.
	JWT *JWTConfig
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

// capability is a right a connection may have on a channel
// (docs/auth.md). Each is granted by a list of channel patterns: a role's,
// or a JWT's caps claim.
type capability uint8

const (
	capPublish   capability = iota // PUBLISH to the channel
	capSubscribe                   // SUBSCRIBE to it (and keep the subscription)
	capHistory                     // SUBSCRIBE with a start other than live
	capPresence                    // read the channel's presence and occupancy
	numCaps
)

var capNames = [numCaps]string{"publish", "subscribe", "history", "presence"}

func (cp capability) String() string { return capNames[cp] }

// capSet holds the compiled channel patterns of each capability.
type capSet [numCaps][]pattern

// compileCaps compiles the pattern lists of a role or token; a nil
// history or presence list takes subscribe's patterns. field names the
// source in errors ("Auth.Roles[0]"); its lists are named by fieldOf.
func compileCaps(lists [numCaps][]string, field func(capability, int) string) (*capSet, error) {
	cs := new(capSet)
	for cp := range numCaps {
		for j, s := range lists[cp] {
			p, err := compilePattern(s)
			if err != nil {
				return nil, optErr(field(cp, j), "%v", err)
			}
			cs[cp] = append(cs[cp], p)
		}
	}
	for _, cp := range []capability{capHistory, capPresence} {
		if lists[cp] == nil {
			cs[cp] = cs[capSubscribe]
		}
	}
	return cs, nil
}

// principal is who a connection authenticated as: a static credential's
// (shared by its connections), the anonymous role's, or one verified JWT's.
type principal struct {
	name     string // for logs: the credential name, "anonymous", or "jwt:" and the sub
	clientID string // conn.clientID (docs/auth.md)
	info     []byte // conn.clientInfo
	caps     *capSet
}

// authState is a compiled, immutable AuthConfig. A server holds the
// current one in an atomic pointer; replacing it (SetAuth) is how a reload
// happens, and a connection notices by comparing pointers.
type authState struct {
	byHash map[[32]byte]*principal
	anon   *principal
	jwt    *jwtState // nil: JWTs are not accepted
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

// roleFields names Role's pattern lists in errors, by capability.
var roleFields = [numCaps]string{"Publish", "Subscribe", "History", "Presence"}

func compileAuth(a *AuthConfig) (*authState, error) {
	if a == nil {
		return nil, nil
	}
	var err error
	roles := make(map[string]*capSet, len(a.Roles))
	for i, r := range a.Roles {
		f := fmt.Sprintf("Auth.Roles[%d]", i)
		if r.Name == "" {
			return nil, optErr(f+".Name", "empty")
		}
		if roles[r.Name] != nil {
			return nil, optErr(f+".Name", "role %q is defined twice", r.Name)
		}
		cs, err := compileCaps([numCaps][]string{r.Publish, r.Subscribe, r.History, r.Presence},
			func(cp capability, j int) string { return fmt.Sprintf("%s.%s[%d]", f, roleFields[cp], j) })
		if err != nil {
			return nil, err
		}
		roles[r.Name] = cs
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
		if len(c.Name) > wire.MaxNameLen {
			return nil, optErr(f+".Name", "longer than %d bytes", wire.MaxNameLen)
		}
		name := c.Name
		if name == "" {
			name = fmt.Sprintf("credential-%d", i)
		}
		st.byHash[h] = &principal{name: name, clientID: c.Name, caps: r}
	}
	if a.Anonymous != "" {
		r := roles[a.Anonymous]
		if r == nil {
			return nil, optErr("Auth.Anonymous", "no role named %q", a.Anonymous)
		}
		st.anon = &principal{name: "anonymous", caps: r}
	}
	if st.jwt, err = compileJWT(a.JWT, roles); err != nil {
		return nil, err
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

// A connection caches its decisions per channel in one byte: for
// capability cp, bit 2cp says "decided" and bit 2cp+1 "allowed".
func permKnown(cp capability) uint8 { return 1 << (2 * cp) }
func permAllow(cp capability) uint8 { return 2 << (2 * cp) }

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
	jwt   *connJWT // the JWT presented last (jwt.go); nil for a static token or none

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
		if c.may(capSubscribe, []byte(su.lc.name)) && su.presenceAllowed() {
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
	if st == nil {
		c.setPrincipal(nil)
		return true
	}
	var who *principal
	if c.sec.jwt != nil {
		who = c.sec.jwt.resolve(st)
	} else {
		who = st.lookup(c.sec.hasToken, &c.sec.token)
	}
	if who == nil {
		l.srv.log.Info("closing connection: credentials revoked", "remote", c.sec.remote, "credential", c.sec.who.nameOr())
		c.setPrincipal(nil)
		c.sendError(0, wire.CodeUnauthenticated, "credentials revoked")
		return false
	}
	c.setPrincipal(who)
	return true
}

// setPrincipal makes who c's identity (nil: none, as when authentication
// is off): its client id and info, and its capabilities from now on (the
// decision cache is emptied).
func (c *conn) setPrincipal(who *principal) {
	c.sec.who = who
	clear(c.sec.perms)
	if who == nil {
		c.clientID, c.clientInfo = "", nil
		return
	}
	c.clientID, c.clientInfo = who.clientID, who.info
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
	if len(token) > wire.MaxTokenLen {
		l.srv.log.Info("authentication failed", "remote", c.sec.remote, "reason", "token too large", "bytes", len(token))
		c.sendError(id, wire.CodeUnauthenticated, fmt.Sprintf("token too large: at most %d bytes", wire.MaxTokenLen))
		return false
	}
	if len(token) > 0 {
		c.sec.hasToken = true
		c.sec.token = sha256.Sum256(token)
	}
	st := l.srv.auth.Load()
	c.sec.state = st
	if st == nil {
		return true
	}
	if st.jwt != nil && looksLikeJWT(token) {
		return l.authenticateJWT(c, id, st, token)
	}
	c.setPrincipal(st.lookup(c.sec.hasToken, &c.sec.token))
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

// may reports whether c may use capability cp on channel name under the
// server's current authentication setup (every right when authentication
// is off), caching the decision per channel. When the setup was replaced
// since c last looked (a reload) c is resolved in the new one first: if
// its credentials were revoked it gets ERROR UNAUTHENTICATED (which
// closes it) and may returns false. It allocates only when a channel is
// decided for the first time on the connection. Loop-owned, like c.
func (c *conn) may(cp capability, name []byte) bool {
	l := c.l
	st := l.srv.auth.Load()
	if st != c.sec.state && !l.refreshAuth(c, st) {
		return false
	}
	if st == nil {
		return true
	}
	if c.sec.who == nil {
		return false
	}
	bits := c.sec.perms[string(name)]
	if bits&permKnown(cp) == 0 {
		bits |= permKnown(cp)
		if matchAny(c.sec.who.caps[cp], name) {
			bits |= permAllow(cp)
		}
		if c.sec.perms == nil || len(c.sec.perms) >= maxPermCache {
			c.sec.perms = make(map[string]uint8)
		}
		c.sec.perms[string(name)] = bits
	}
	return bits&permAllow(cp) != 0
}

// allowPublish applies the rate limit and the publish permission to a
// PUBLISH of channel name; when it returns false the publish was answered
// with an ERROR and must be dropped.
func (l *loop) allowPublish(c *conn, id uint32, name []byte) bool {
	if l.srv.rateInterval > 0 && !c.sec.bucket.allow(l.now, l.srv.rateInterval, l.srv.rateTolerance) {
		c.sendError(id, wire.CodeRateLimited, "publish rate limit exceeded")
		return false
	}
	if !c.may(capPublish, name) {
		if !c.closing {
			c.sendError(id, wire.CodeForbidden, "not allowed to publish to this channel")
		}
		return false
	}
	return true
}

// allowSubscribe applies the subscribe permission, and the history one to
// a start other than live; false after an ERROR.
func (l *loop) allowSubscribe(c *conn, id uint32, name []byte, start wire.StartKind) bool {
	cp, text := capSubscribe, "not allowed to subscribe to this channel"
	if c.may(capSubscribe, name) && start != wire.StartLive {
		cp, text = capHistory, "not allowed to read this channel's history (subscribe from live)"
	}
	if !c.may(cp, name) {
		if !c.closing {
			c.sendError(id, wire.CodeForbidden, text)
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
