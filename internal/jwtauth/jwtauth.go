// Package jwtauth verifies and mints the JSON Web Tokens (RFC 7519) that
// Sluice accepts as connection credentials (docs/auth.md), with
// github.com/golang-jwt/jwt/v5 for the JOSE work and
// github.com/MicahParks/jwkset for JWK Sets. It is pure: keys and JWK
// Sets come in as bytes, time as an argument.
//
// Every key is pinned to one algorithm (HS256, RS256, ES256 or EdDSA): a
// token is verified only with the key its "kid" header names, and only if
// its "alg" header is that key's algorithm, so an RSA public key is never
// taken for an HMAC secret (algorithm confusion) and "none" is never
// accepted. A token without "kid" is verified only when exactly one key
// is configured.
package jwtauth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// The algorithms a key may be pinned to.
const (
	HS256 = "HS256"
	RS256 = "RS256"
	ES256 = "ES256"
	EdDSA = "EdDSA"
)

// Algs lists the accepted algorithms.
var Algs = []string{HS256, RS256, ES256, EdDSA}

// MaxToken bounds a token's size: longer ones are refused before any
// parsing (it is also the wire limit of HELLO's token, PROTOCOL.md 2.1).
const MaxToken = 4096

// MinSecret is the shortest HS256 secret accepted (256 bits, RFC 7518
// 3.2); MinRSABits the smallest RSA modulus.
const (
	MinSecret  = 32
	MinRSABits = 2048
)

// Errors of Verify; each wraps one of these sentinels. Their texts are
// for logs: a server tells a client only that its token was not accepted
// (and whether it expired).
var (
	ErrTooLarge     = errors.New("jwt: token too large")
	ErrMalformed    = errors.New("jwt: malformed token")
	ErrAlgorithm    = errors.New("jwt: algorithm not allowed for the key")
	ErrUnknownKey   = errors.New("jwt: unknown key id")
	ErrSignature    = errors.New("jwt: signature invalid")
	ErrExpired      = errors.New("jwt: token expired")
	ErrNotYetValid  = errors.New("jwt: token not valid yet")
	ErrClaims       = errors.New("jwt: claims not accepted")
	errKeyMaterial  = errors.New("jwt: bad key")
	errNoKeys       = errors.New("jwt: no keys")
	errDuplicateKID = errors.New("jwt: key id listed twice")
)

// Key is a verification key pinned to one algorithm.
type Key struct {
	// ID is the "kid" that selects the key ("" only when it is the only
	// key).
	ID string
	// Alg is one of Algs.
	Alg string
	// Key is []byte for HS256, *rsa.PublicKey for RS256,
	// *ecdsa.PublicKey (P-256) for ES256, ed25519.PublicKey for EdDSA.
	Key any
}

// Fingerprint identifies the key's id, algorithm and material: a server
// that reloads its keys keeps the connections whose key is still there.
func (k *Key) Fingerprint() [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q ", k.ID, k.Alg)
	switch m := k.Key.(type) {
	case []byte:
		h.Write(m)
	case ed25519.PublicKey:
		h.Write(m)
	default:
		der, _ := x509.MarshalPKIXPublicKey(m) // checked by check
		h.Write(der)
	}
	var fp [32]byte
	h.Sum(fp[:0])
	return fp
}

// check reports whether the key's material fits its algorithm.
func (k *Key) check() error {
	switch k.Alg {
	case HS256:
		s, ok := k.Key.([]byte)
		if !ok {
			return fmt.Errorf("%w: HS256 needs a secret", errKeyMaterial)
		}
		if len(s) < MinSecret {
			return fmt.Errorf("%w: HS256 secret of %d bytes, at least %d", errKeyMaterial, len(s), MinSecret)
		}
	case RS256:
		p, ok := k.Key.(*rsa.PublicKey)
		if !ok {
			return fmt.Errorf("%w: RS256 needs an RSA public key", errKeyMaterial)
		}
		if p.N.BitLen() < MinRSABits {
			return fmt.Errorf("%w: RSA key of %d bits, at least %d", errKeyMaterial, p.N.BitLen(), MinRSABits)
		}
	case ES256:
		p, ok := k.Key.(*ecdsa.PublicKey)
		if !ok || p.Curve != elliptic.P256() {
			return fmt.Errorf("%w: ES256 needs an ECDSA P-256 public key", errKeyMaterial)
		}
	case EdDSA:
		p, ok := k.Key.(ed25519.PublicKey)
		if !ok || len(p) != ed25519.PublicKeySize {
			return fmt.Errorf("%w: EdDSA needs an Ed25519 public key", errKeyMaterial)
		}
	default:
		return fmt.Errorf("%w: algorithm %q (want one of %v)", errKeyMaterial, k.Alg, Algs)
	}
	return nil
}

// ParsePublicKey reads the PEM-encoded public key (PKIX "PUBLIC KEY", or
// an X.509 "CERTIFICATE") of a key for alg, or, for HS256, takes pemOrSecret
// as the secret itself.
func ParsePublicKey(alg string, pemOrSecret []byte) (any, error) {
	if alg == HS256 {
		return bytes.Clone(pemOrSecret), nil
	}
	blk, _ := pem.Decode(pemOrSecret)
	if blk == nil {
		return nil, fmt.Errorf("%w: no PEM block", errKeyMaterial)
	}
	switch blk.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errKeyMaterial, err)
		}
		return k, nil
	case "CERTIFICATE":
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errKeyMaterial, err)
		}
		return c.PublicKey, nil
	}
	return nil, fmt.Errorf("%w: PEM block %q (want PUBLIC KEY or CERTIFICATE)", errKeyMaterial, blk.Type)
}

// Options are the checks of a Verifier beyond the signature.
type Options struct {
	// Leeway is the clock skew allowed on exp and nbf.
	Leeway time.Duration
	// Issuer, when set, must be the token's "iss"; Audience, when set,
	// must be among its "aud".
	Issuer, Audience string
	// MaxInfo bounds the "info" claim (compact JSON bytes); a token with
	// a larger one is refused. 0: 1,024.
	MaxInfo int
}

// Verifier checks tokens against a key set. Immutable, safe for
// concurrent use.
type Verifier struct {
	byID   map[string]*Key
	only   *Key // the single key, when there is exactly one
	opts   Options
	po     []jwt.ParserOption // a parser is made per Verify: its clock differs
	parser *jwt.Parser        // for ParseUnverified only
}

// NewVerifier returns a verifier of keys (at least one; ids unique, ""
// allowed only for a single key).
func NewVerifier(keys []Key, opts Options) (*Verifier, error) {
	if len(keys) == 0 {
		return nil, errNoKeys
	}
	if opts.MaxInfo <= 0 {
		opts.MaxInfo = 1024
	}
	v := &Verifier{byID: make(map[string]*Key, len(keys)), opts: opts}
	for i := range keys {
		k := keys[i]
		if err := k.check(); err != nil {
			return nil, fmt.Errorf("key %q: %w", k.ID, err)
		}
		if k.ID == "" && len(keys) > 1 {
			return nil, fmt.Errorf("%w: a key without id, among %d keys", errKeyMaterial, len(keys))
		}
		if v.byID[k.ID] != nil {
			return nil, fmt.Errorf("%w: %q", errDuplicateKID, k.ID)
		}
		v.byID[k.ID] = &k
		if len(keys) == 1 {
			v.only = &k
		}
	}
	po := []jwt.ParserOption{jwt.WithValidMethods(Algs), jwt.WithLeeway(opts.Leeway),
		jwt.WithExpirationRequired(), jwt.WithStrictDecoding()}
	if opts.Issuer != "" {
		po = append(po, jwt.WithIssuer(opts.Issuer))
	}
	if opts.Audience != "" {
		po = append(po, jwt.WithAudience(opts.Audience))
	}
	v.po, v.parser = po, jwt.NewParser(po...)
	return v, nil
}

// Has reports whether the verifier holds a key with this fingerprint.
func (v *Verifier) Has(fp [32]byte) bool {
	for _, k := range v.byID {
		if k.Fingerprint() == fp {
			return true
		}
	}
	return false
}

// Len returns the number of keys.
func (v *Verifier) Len() int { return len(v.byID) }

// Claims is what a verified token says.
type Claims struct {
	// Subject is "sub": the client id ("" when absent).
	Subject string
	// Expires is "exp" (always present); NotBefore "nbf" (zero if absent).
	Expires, NotBefore time.Time
	// Info is the "info" claim, compact JSON of at most Options.MaxInfo
	// bytes, nil when absent.
	Info []byte
	// Caps is the "caps" claim; nil when absent.
	Caps *Caps
	// Key is the key that verified the token.
	Key *Key
}

// Caps is the "caps" claim: channel patterns per capability. A nil list
// is one the token did not name (History and Presence then default to
// Subscribe's, as for roles); an empty one grants nothing.
type Caps struct {
	Publish   []string `json:"publish"`
	Subscribe []string `json:"subscribe"`
	History   []string `json:"history"`
	Presence  []string `json:"presence"`
}

// tokenClaims is the JSON shape of a token's claims.
type tokenClaims struct {
	jwt.RegisteredClaims
	Info json.RawMessage `json:"info,omitempty"`
	Caps *Caps           `json:"caps,omitempty"`
}

// Verify checks token's size, structure, algorithm, key, signature and
// time claims at now, and returns its claims. Errors wrap the sentinels
// above.
func (v *Verifier) Verify(token []byte, now time.Time) (*Claims, error) {
	if len(token) > MaxToken {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(token), MaxToken)
	}
	if bytes.Count(token, []byte(".")) != 2 {
		return nil, fmt.Errorf("%w: not three dot-separated parts", ErrMalformed)
	}
	var key *Key
	var tc tokenClaims
	p := jwt.NewParser(append(v.po[:len(v.po):len(v.po)], jwt.WithTimeFunc(func() time.Time { return now }))...)
	_, err := p.ParseWithClaims(string(token), &tc, func(t *jwt.Token) (any, error) {
		kid, hasKID := t.Header["kid"]
		switch {
		case !hasKID && v.only != nil:
			key = v.only
		case !hasKID:
			return nil, fmt.Errorf("%w: the token names no kid and there are %d keys", ErrUnknownKey, len(v.byID))
		default:
			s, ok := kid.(string)
			if !ok {
				return nil, fmt.Errorf("%w: kid is not a string", ErrMalformed)
			}
			if key = v.byID[s]; key == nil {
				return nil, fmt.Errorf("%w: %q", ErrUnknownKey, s)
			}
		}
		if t.Method.Alg() != key.Alg {
			return nil, fmt.Errorf("%w: token alg %q, key %q is %s", ErrAlgorithm, t.Method.Alg(), key.ID, key.Alg)
		}
		return key.Key, nil
	})
	if err != nil {
		return nil, v.classify(token, err)
	}
	c := &Claims{Subject: tc.Subject, Caps: tc.Caps, Key: key, Expires: tc.ExpiresAt.Time}
	if tc.NotBefore != nil {
		c.NotBefore = tc.NotBefore.Time
	}
	if len(tc.Info) > 0 && !bytes.Equal(tc.Info, []byte("null")) {
		var b bytes.Buffer
		if err := json.Compact(&b, tc.Info); err != nil {
			return nil, fmt.Errorf("%w: info: %v", ErrClaims, err)
		}
		if b.Len() > v.opts.MaxInfo {
			return nil, fmt.Errorf("%w: info of %d bytes, at most %d", ErrClaims, b.Len(), v.opts.MaxInfo)
		}
		c.Info = b.Bytes()
	}
	return c, nil
}

// classify maps golang-jwt's errors to this package's sentinels, keeping
// the detail. The parser refuses an algorithm outside Algs ("none"
// included) as a bad signature; that is told as ErrAlgorithm.
func (v *Verifier) classify(token []byte, err error) error {
	if errors.Is(err, jwt.ErrTokenSignatureInvalid) {
		if t, _, perr := v.parser.ParseUnverified(string(token), &jwt.RegisteredClaims{}); perr == nil &&
			!slices.Contains(Algs, t.Method.Alg()) {
			return fmt.Errorf("%w: %q", ErrAlgorithm, t.Method.Alg())
		}
	}
	for _, m := range []struct{ ours, lib error }{
		{ErrAlgorithm, ErrAlgorithm},
		{ErrUnknownKey, ErrUnknownKey},
		{ErrMalformed, ErrMalformed},
		{ErrExpired, jwt.ErrTokenExpired},
		{ErrNotYetValid, jwt.ErrTokenNotValidYet},
		{ErrSignature, jwt.ErrTokenSignatureInvalid},
		{ErrMalformed, jwt.ErrTokenMalformed},
	} {
		if errors.Is(err, m.lib) {
			if m.ours == m.lib {
				return err
			}
			return fmt.Errorf("%w: %v", m.ours, err)
		}
	}
	if errors.Is(err, jwt.ErrTokenUnverifiable) {
		// An algorithm outside Algs ("none", HS512, ...) or none at all.
		return fmt.Errorf("%w: %v", ErrAlgorithm, err)
	}
	return fmt.Errorf("%w: %v", ErrClaims, err)
}

// MaxJWKS bounds a JWK Set document.
const MaxJWKS = 1 << 20

// ParseJWKS reads a JWK Set (RFC 7517) with jwkset and returns its
// signature keys, each pinned to its "alg", or when the key has none, to
// the one algorithm of its type (RSA: RS256, EC P-256: ES256, OKP
// Ed25519: EdDSA, oct: HS256). Private keys are reduced to their public
// part. Keys for encryption ("use": "enc") or of another algorithm or
// curve are left out and described in skipped.
func ParseJWKS(doc []byte) (keys []Key, skipped []string, err error) {
	if len(doc) > MaxJWKS {
		return nil, nil, fmt.Errorf("%w: JWK Set of %d bytes, at most %d", errKeyMaterial, len(doc), MaxJWKS)
	}
	var set jwkset.JWKSMarshal
	dec := json.NewDecoder(bytes.NewReader(doc))
	if err := dec.Decode(&set); err != nil {
		return nil, nil, fmt.Errorf("%w: JWK Set: %v", errKeyMaterial, err)
	}
	for i, m := range set.Keys {
		what := fmt.Sprintf("key %d (kid %q)", i, m.KID)
		if m.USE == jwkset.UseEnc {
			skipped = append(skipped, what+": for encryption")
			continue
		}
		alg := string(m.ALG)
		if alg == "" {
			alg = defaultAlg(m.KTY, m.CRV)
		}
		if !slices.Contains(Algs, alg) {
			skipped = append(skipped, fmt.Sprintf("%s: algorithm %q (%s %s) not supported", what, alg, m.KTY, m.CRV))
			continue
		}
		jwk, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{Private: true}, jwkset.JWKValidateOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %v", errKeyMaterial, what, err)
		}
		k := Key{ID: m.KID, Alg: alg, Key: publicOf(jwk.Key())}
		if err := k.check(); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", what, err)
		}
		keys = append(keys, k)
	}
	return keys, skipped, nil
}

func defaultAlg(kty jwkset.KTY, crv jwkset.CRV) string {
	switch {
	case kty == jwkset.KtyRSA:
		return RS256
	case kty == jwkset.KtyEC && crv == jwkset.CrvP256:
		return ES256
	case kty == jwkset.KtyOKP && crv == jwkset.CrvEd25519:
		return EdDSA
	case kty == jwkset.KtyOct:
		return HS256
	}
	return ""
}

// publicOf returns the verification half of a key.
func publicOf(k any) any {
	switch p := k.(type) {
	case *rsa.PrivateKey:
		return &p.PublicKey
	case *ecdsa.PrivateKey:
		return &p.PublicKey
	case ed25519.PrivateKey:
		return p.Public()
	}
	return k
}
