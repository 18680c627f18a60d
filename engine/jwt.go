package engine

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-rtm/sluice/internal/jwtauth"
	"github.com/sluice-rtm/sluice/wire"
)

// JWTConfig makes a server accept JSON Web Tokens as connection
// credentials, beside the static tokens (docs/auth.md). A token is signed
// by the application's backend with one of the keys; its claims say who
// the client is ("sub", "info") and what it may do ("caps"), and it
// expires ("exp", required). A client that negotiated FeatureRefresh
// sends a fresh token in REFRESH before "exp"; a connection whose token
// expired and was not refreshed within Grace is closed with ERROR
// TOKEN_EXPIRED.
type JWTConfig struct {
	// Keys verify tokens; each is pinned to its algorithm.
	Keys []JWTKey
	// JWKS is a JWK Set document (RFC 7517) whose signature keys are
	// added to Keys (kid required when there is more than one key).
	JWKS []byte
	// Leeway is the clock skew allowed on exp and nbf (0: 5 s; a negative
	// value is refused).
	Leeway time.Duration
	// Grace is how long a connection whose token expired may still send a
	// REFRESH before it is closed (0: 10 s).
	Grace time.Duration
	// Issuer and Audience, when set, must match the token's "iss" and be
	// among its "aud".
	Issuer, Audience string
	// MaxInfo bounds the "info" claim, in bytes of compact JSON (0:
	// 1,024). A token with a larger one is refused.
	MaxInfo int
	// Role is the role whose patterns apply to a token without a "caps"
	// claim ("" = such a token may do nothing).
	Role string
}

// JWTKey is one verification key.
type JWTKey struct {
	// ID is the "kid" a token names to select this key ("" only for a
	// single key).
	ID string
	// Alg is HS256, RS256, ES256 or EdDSA: the only algorithm accepted
	// with this key.
	Alg string
	// Secret is the HS256 secret (at least 32 bytes); PublicKey the PEM
	// public key or certificate of the other algorithms.
	Secret, PublicKey []byte
}

// Defaults of JWTConfig.
const (
	defaultJWTLeeway = 5 * time.Second
	defaultJWTGrace  = 10 * time.Second
)

// jwtState is a compiled JWTConfig (part of authState, immutable).
type jwtState struct {
	v     *jwtauth.Verifier
	role  *capSet // of tokens without caps; nil = none
	grace time.Duration
}

func compileJWT(j *JWTConfig, roles map[string]*capSet) (*jwtState, error) {
	if j == nil {
		return nil, nil
	}
	if j.Leeway < 0 || j.Grace < 0 {
		return nil, optErr("Auth.JWT.Leeway", "leeway and grace must not be negative")
	}
	if j.MaxInfo < 0 {
		return nil, optErr("Auth.JWT.MaxInfo", "must not be negative")
	}
	var keys []jwtauth.Key
	for i, k := range j.Keys {
		f := fmt.Sprintf("Auth.JWT.Keys[%d]", i)
		material := k.PublicKey
		if k.Alg == jwtauth.HS256 {
			material = k.Secret
		}
		key, err := jwtauth.ParsePublicKey(k.Alg, material)
		if err != nil {
			return nil, optErr(f, "%v", err)
		}
		keys = append(keys, jwtauth.Key{ID: k.ID, Alg: k.Alg, Key: key})
	}
	if len(j.JWKS) > 0 {
		more, _, err := jwtauth.ParseJWKS(j.JWKS)
		if err != nil {
			return nil, optErr("Auth.JWT.JWKS", "%v", err)
		}
		keys = append(keys, more...)
	}
	v, err := jwtauth.NewVerifier(keys, jwtauth.Options{Leeway: cmpOr(j.Leeway, defaultJWTLeeway),
		Issuer: j.Issuer, Audience: j.Audience, MaxInfo: j.MaxInfo})
	if err != nil {
		return nil, optErr("Auth.JWT.Keys", "%v", err)
	}
	js := &jwtState{v: v, grace: cmpOr(j.Grace, defaultJWTGrace)}
	if j.Role != "" {
		if js.role = roles[j.Role]; js.role == nil {
			return nil, optErr("Auth.JWT.Role", "no role named %q", j.Role)
		}
	}
	return js, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// connJWT is what a connection keeps of the JWT it presented last.
type connJWT struct {
	fp   [32]byte // the verifying key's, to find it again after a reload
	sub  string
	info []byte
	caps *capSet // from the token's caps claim; nil: JWTConfig.Role's
	exp  int64   // unix ns
}

// looksLikeJWT tells a JWT (three dot-separated base64url parts) from a
// static token (`sluice token` makes them without dots).
func looksLikeJWT(tok []byte) bool { return bytes.Count(tok, []byte(".")) == 2 }

// verifyJWT checks token under js at now; on failure it returns the text
// for the client's ERROR (which never says more than whether the token
// expired) and the detailed error for the log.
func verifyJWT(js *jwtState, token []byte, now time.Time) (*connJWT, string, error) {
	cl, err := js.v.Verify(token, now)
	if err != nil {
		switch {
		case errors.Is(err, jwtauth.ErrExpired):
			return nil, "token expired", err
		case errors.Is(err, jwtauth.ErrNotYetValid):
			return nil, "token not valid yet", err
		}
		return nil, "token not accepted", err
	}
	if len(cl.Subject) > wire.MaxNameLen {
		return nil, "token not accepted", fmt.Errorf("sub of %d bytes, at most %d", len(cl.Subject), wire.MaxNameLen)
	}
	cj := &connJWT{fp: cl.Key.Fingerprint(), sub: cl.Subject, info: cl.Info, exp: cl.Expires.UnixNano()}
	if c := cl.Caps; c != nil {
		cj.caps, err = compileCaps([numCaps][]string{c.Publish, c.Subscribe, c.History, c.Presence},
			func(cp capability, j int) string { return fmt.Sprintf("caps.%v[%d]", cp, j) })
		if err != nil {
			return nil, "token not accepted", err
		}
	}
	return cj, "", nil
}

// principal returns the identity of a connection holding cj under js.
func (cj *connJWT) principal(js *jwtState) *principal {
	caps := cj.caps
	if caps == nil {
		caps = js.role
	}
	if caps == nil {
		caps = &capSet{}
	}
	return &principal{name: "jwt:" + cj.sub, clientID: cj.sub, info: cj.info, caps: caps}
}

// resolve is refreshAuth for a connection that authenticated with a
// JWT: it keeps its token's identity while the key that verified it is
// still configured.
func (cj *connJWT) resolve(st *authState) *principal {
	if st.jwt == nil || !st.jwt.v.Has(cj.fp) {
		return nil
	}
	return cj.principal(st.jwt)
}

// authenticateJWT is authenticate for a JWT; false after ERROR
// UNAUTHENTICATED.
func (l *loop) authenticateJWT(c *conn, id uint32, st *authState, token []byte) bool {
	cj, text, err := verifyJWT(st.jwt, token, time.Unix(0, l.now))
	if err != nil {
		l.srv.log.Info("authentication failed", "remote", c.sec.remote, "tls", c.sec.tls, "reason", err.Error())
		l.srv.jwtRefused.Add(1)
		c.sendError(id, wire.CodeUnauthenticated, text)
		return false
	}
	c.sec.jwt = cj
	c.setPrincipal(cj.principal(st.jwt))
	return true
}

// refreshToken handles a REFRESH: the token replaces the connection's
// (same sub required), its capabilities apply at once (subscriptions it
// no longer allows end with UNSUBSCRIBED), and AUTHED answers it. A token
// that is not accepted is answered ERROR UNAUTHENTICATED, which closes
// the connection.
func (l *loop) refreshToken(c *conn, id uint32, token []byte) {
	st := l.srv.auth.Load()
	if st != c.sec.state && !l.refreshAuth(c, st) {
		return
	}
	if st == nil {
		l.sendAuthed(c, id) // authentication is off: nothing expires
		return
	}
	if c.sec.jwt == nil {
		c.sendError(id, wire.CodeForbidden, "this connection's credentials are not a JWT and do not expire")
		return
	}
	if st.jwt == nil || !looksLikeJWT(token) || len(token) > wire.MaxTokenLen {
		l.srv.jwtRefused.Add(1)
		c.sendError(id, wire.CodeUnauthenticated, "token not accepted")
		return
	}
	cj, text, err := verifyJWT(st.jwt, token, time.Unix(0, l.now))
	if err == nil && cj.sub != c.sec.jwt.sub {
		text, err = "the token is for another client", fmt.Errorf("sub %q, the connection's is %q", cj.sub, c.sec.jwt.sub)
	}
	if err != nil {
		l.srv.log.Info("refresh refused", "remote", c.sec.remote, "credential", c.sec.who.nameOr(), "reason", err.Error())
		l.srv.jwtRefused.Add(1)
		c.sendError(id, wire.CodeUnauthenticated, text)
		return
	}
	c.sec.jwt = cj
	c.setPrincipal(cj.principal(st.jwt))
	l.srv.jwtRefreshes.Add(1)
	l.recheckSubs(c)
	l.sendAuthed(c, id)
}

// sendAuthed queues AUTHED: when c's token expires (0: it does not), the
// grace after it, and c's client id.
func (l *loop) sendAuthed(c *conn, id uint32) {
	a := wire.Authed{ClientID: c.clientID}
	if cj := c.sec.jwt; cj != nil {
		if st := c.sec.state; st != nil && st.jwt != nil {
			a.Grace = st.jwt.grace
			a.ExpiresIn = max(time.Duration(cj.exp-l.now), time.Millisecond)
		}
	}
	s, k := c.ownStart()
	c.scratch = wire.AppendAuthed(c.scratch, id, a)
	c.ownEnd(s, k)
}

// checkExpiry closes c (ERROR TOKEN_EXPIRED) when its JWT expired more
// than the grace period ago and no REFRESH replaced it. Called by sweep.
func (l *loop) checkExpiry(c *conn) {
	cj := c.sec.jwt
	if cj == nil || !c.hello || c.closing || c.closed {
		return
	}
	st := c.sec.state
	if st == nil || st.jwt == nil || l.now <= cj.exp+int64(st.jwt.grace) {
		return
	}
	l.srv.log.Info("closing connection: token expired", "remote", c.sec.remote, "credential", c.sec.who.nameOr())
	l.srv.jwtExpired.Add(1)
	c.sendError(0, wire.CodeTokenExpired, fmt.Sprintf("the token expired at %s and no REFRESH came within %v",
		time.Unix(0, cj.exp).UTC().Format(time.RFC3339), st.jwt.grace))
}
