package jwtauth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// SigningKey is a private key pinned to one algorithm, for minting tokens
// (`sluice token --jwt`, tests). Key is []byte for HS256,
// *rsa.PrivateKey, *ecdsa.PrivateKey or ed25519.PrivateKey.
type SigningKey struct {
	ID, Alg string
	Key     any
}

// ParsePrivateKey reads a PEM private key ("PRIVATE KEY" PKCS #8, "RSA
// PRIVATE KEY" PKCS #1 or "EC PRIVATE KEY") for alg, or, for HS256,
// takes pemOrSecret as the secret.
func ParsePrivateKey(alg string, pemOrSecret []byte) (any, error) {
	if alg == HS256 {
		if len(pemOrSecret) < MinSecret {
			return nil, fmt.Errorf("%w: HS256 secret of %d bytes, at least %d", errKeyMaterial, len(pemOrSecret), MinSecret)
		}
		return pemOrSecret, nil
	}
	blk, _ := pem.Decode(pemOrSecret)
	if blk == nil {
		return nil, fmt.Errorf("%w: no PEM block", errKeyMaterial)
	}
	var k any
	var err error
	switch blk.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		err = fmt.Errorf("PEM block %q is not a private key", blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errKeyMaterial, err)
	}
	pub := Key{Alg: alg, Key: publicOf(k)}
	if err := pub.check(); err != nil {
		return nil, err
	}
	return k, nil
}

// GenerateKey makes a new key pair for alg (not HS256) and returns the
// private key and both halves in PEM (PKCS #8 and PKIX).
func GenerateKey(alg string) (priv any, privPEM, pubPEM []byte, err error) {
	switch alg {
	case RS256:
		priv, err = rsa.GenerateKey(rand.Reader, MinRSABits)
	case ES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case EdDSA:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		return nil, nil, nil, fmt.Errorf("%w: cannot generate a key pair for %q", errKeyMaterial, alg)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(publicOf(priv))
	if err != nil {
		return nil, nil, nil, err
	}
	return priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), nil
}

// MintClaims are the claims of a minted token.
type MintClaims struct {
	Subject string
	// TTL sets exp to now + TTL (required, positive).
	TTL time.Duration
	// NotBefore sets nbf when not zero.
	NotBefore time.Time
	// Info becomes the "info" claim when not nil (valid JSON).
	Info json.RawMessage
	// Caps becomes the "caps" claim when not nil.
	Caps *Caps
	// Issuer and Audience set "iss" and "aud" when not empty.
	Issuer, Audience string
}

// Mint signs a token with k. It is for development and tests: an
// application's backend mints its users' tokens with its own JWT library.
func Mint(k SigningKey, c MintClaims, now time.Time) (string, error) {
	if c.TTL <= 0 {
		return "", fmt.Errorf("jwt: TTL must be positive, got %v", c.TTL)
	}
	m := jwt.GetSigningMethod(k.Alg)
	if m == nil || k.Alg == "none" {
		return "", fmt.Errorf("%w: %q", ErrAlgorithm, k.Alg)
	}
	tc := tokenClaims{Info: c.Info, Caps: c.Caps}
	tc.Subject, tc.Issuer = c.Subject, c.Issuer
	tc.IssuedAt = jwt.NewNumericDate(now)
	tc.ExpiresAt = jwt.NewNumericDate(now.Add(c.TTL))
	if !c.NotBefore.IsZero() {
		tc.NotBefore = jwt.NewNumericDate(c.NotBefore)
	}
	if c.Audience != "" {
		tc.Audience = jwt.ClaimStrings{c.Audience}
	}
	t := jwt.NewWithClaims(m, tc)
	if k.ID != "" {
		t.Header["kid"] = k.ID
	}
	s, err := t.SignedString(k.Key)
	if err != nil {
		return "", fmt.Errorf("jwt: signing: %w", err)
	}
	if len(s) > MaxToken {
		return "", fmt.Errorf("%w: the token would be %d bytes, at most %d", ErrTooLarge, len(s), MaxToken)
	}
	return s, nil
}
