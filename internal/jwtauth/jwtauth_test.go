package jwtauth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

// testKeys are one signing key per algorithm, made once.
type testKeys struct {
	hs, rs, es, ed SigningKey
	pubs           []Key
	rsaPubPEM      []byte
}

var (
	keysOnce sync.Once
	keys     testKeys
)

func getKeys(t testing.TB) *testKeys {
	keysOnce.Do(func() {
		secret := []byte("0123456789abcdef0123456789abcdef")
		keys.hs = SigningKey{ID: "hs", Alg: HS256, Key: secret}
		keys.pubs = append(keys.pubs, Key{ID: "hs", Alg: HS256, Key: secret})
		for _, k := range []struct {
			id, alg string
			dst     *SigningKey
		}{{"rs", RS256, &keys.rs}, {"es", ES256, &keys.es}, {"ed", EdDSA, &keys.ed}} {
			priv, _, pubPEM, err := GenerateKey(k.alg)
			if err != nil {
				panic(err)
			}
			*k.dst = SigningKey{ID: k.id, Alg: k.alg, Key: priv}
			pub, err := ParsePublicKey(k.alg, pubPEM)
			if err != nil {
				panic(err)
			}
			keys.pubs = append(keys.pubs, Key{ID: k.id, Alg: k.alg, Key: pub})
			if k.alg == RS256 {
				keys.rsaPubPEM = pubPEM
			}
		}
	})
	return &keys
}

func verifier(t testing.TB, opts Options) *Verifier {
	t.Helper()
	v, err := NewVerifier(getKeys(t).pubs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mint(t testing.TB, k SigningKey, c MintClaims) string {
	t.Helper()
	if c.TTL == 0 {
		c.TTL = time.Hour
	}
	s, err := Mint(k, c, t0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// b64 is base64url without padding, as JWS uses.
func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// handMade builds a JWS by hand (not with golang-jwt): header and claims
// as given, signed by sign over "header.payload".
func handMade(header, claims string, sign func(in []byte) []byte) string {
	in := b64([]byte(header)) + "." + b64([]byte(claims))
	return in + "." + b64(sign([]byte(in)))
}

func hs256(key []byte) func([]byte) []byte {
	return func(in []byte) []byte { m := hmac.New(sha256.New, key); m.Write(in); return m.Sum(nil) }
}

// TestVerifyEachAlgorithm: a token signed with each algorithm's key
// verifies, and its claims come back.
func TestVerifyEachAlgorithm(t *testing.T) {
	k := getKeys(t)
	v := verifier(t, Options{})
	caps := &Caps{Publish: []string{"chat.*"}, Subscribe: []string{"chat.>"}, History: []string{}}
	for _, sk := range []SigningKey{k.hs, k.rs, k.es, k.ed} {
		tok := mint(t, sk, MintClaims{Subject: "alice", Info: json.RawMessage(`{ "name": "Alice" }`), Caps: caps})
		c, err := v.Verify([]byte(tok), t0.Add(time.Minute))
		if err != nil {
			t.Fatalf("%s: %v", sk.Alg, err)
		}
		if c.Subject != "alice" || string(c.Info) != `{"name":"Alice"}` || c.Key.ID != sk.ID || !c.Expires.Equal(t0.Add(time.Hour)) {
			t.Fatalf("%s: claims %+v", sk.Alg, c)
		}
		if c.Caps == nil || c.Caps.History == nil || len(c.Caps.History) != 0 || c.Caps.Presence != nil {
			t.Fatalf("%s: caps %+v (history must be empty, presence absent)", sk.Alg, c.Caps)
		}
	}
}

// TestHandMadeTokenVerifies: a token built without golang-jwt (the JWS
// compact form by hand) verifies: the check is of the standard, not of
// the library's own output.
func TestHandMadeTokenVerifies(t *testing.T) {
	v := verifier(t, Options{})
	tok := handMade(`{"alg":"HS256","typ":"JWT","kid":"hs"}`,
		fmt.Sprintf(`{"sub":"bob","exp":%d}`, t0.Add(time.Hour).Unix()), hs256(getKeys(t).hs.Key.([]byte)))
	c, err := v.Verify([]byte(tok), t0)
	if err != nil || c.Subject != "bob" || c.Caps != nil || c.Info != nil {
		t.Fatalf("hand-made token: %+v, %v", c, err)
	}
}

// TestBadTokensAreRefused covers every way a token is refused, each with
// its own sentinel.
func TestBadTokensAreRefused(t *testing.T) {
	k := getKeys(t)
	v := verifier(t, Options{Leeway: 5 * time.Second, MaxInfo: 64})
	exp := t0.Add(time.Hour).Unix()
	good := mint(t, k.hs, MintClaims{Subject: "a"})
	parts := strings.Split(good, ".")
	other := SigningKey{ID: "hs", Alg: HS256, Key: []byte("another-secret-of-32-bytes-00000")}
	for _, tc := range []struct {
		name string
		tok  string
		now  time.Time
		want error
	}{
		{"bad signature", mint(t, other, MintClaims{Subject: "a"}), t0, ErrSignature},
		{"signature of another token", parts[0] + "." + parts[1] + "." + strings.Split(mint(t, k.hs, MintClaims{Subject: "b"}), ".")[2], t0, ErrSignature},
		{"none", handMade(`{"alg":"none","kid":"hs"}`, fmt.Sprintf(`{"sub":"a","exp":%d}`, exp), func([]byte) []byte { return nil }), t0, ErrAlgorithm},
		{"none without kid", b64([]byte(`{"alg":"none"}`)) + "." + b64([]byte(fmt.Sprintf(`{"exp":%d}`, exp))) + ".", t0, ErrAlgorithm},
		{"HS256 with the RSA public key as secret (confusion)", handMade(`{"alg":"HS256","kid":"rs"}`,
			fmt.Sprintf(`{"sub":"a","exp":%d}`, exp), hs256(k.rsaPubPEM)), t0, ErrAlgorithm},
		{"RS256 token naming the ES256 key", handMade(`{"alg":"RS256","kid":"es"}`, fmt.Sprintf(`{"exp":%d}`, exp),
			func([]byte) []byte { return make([]byte, 256) }), t0, ErrAlgorithm},
		{"HS512", handMade(`{"alg":"HS512","kid":"hs"}`, fmt.Sprintf(`{"exp":%d}`, exp), hs256(k.hs.Key.([]byte))), t0, ErrAlgorithm},
		{"unknown kid", handMade(`{"alg":"HS256","kid":"nope"}`, fmt.Sprintf(`{"exp":%d}`, exp), hs256(k.hs.Key.([]byte))), t0, ErrUnknownKey},
		{"no kid among several keys", handMade(`{"alg":"HS256"}`, fmt.Sprintf(`{"exp":%d}`, exp), hs256(k.hs.Key.([]byte))), t0, ErrUnknownKey},
		{"kid not a string", handMade(`{"alg":"HS256","kid":7}`, fmt.Sprintf(`{"exp":%d}`, exp), hs256(k.hs.Key.([]byte))), t0, ErrMalformed},
		{"expired", good, t0.Add(time.Hour + 6*time.Second), ErrExpired},
		{"not yet valid", mint(t, k.hs, MintClaims{NotBefore: t0.Add(time.Minute)}), t0, ErrNotYetValid},
		{"no exp", handMade(`{"alg":"HS256","kid":"hs"}`, `{"sub":"a"}`, hs256(k.hs.Key.([]byte))), t0, ErrClaims},
		{"info too large", mint(t, k.hs, MintClaims{Info: json.RawMessage(`"` + strings.Repeat("x", 64) + `"`)}), t0, ErrClaims},
		{"caps not an object", handMade(`{"alg":"HS256","kid":"hs"}`, fmt.Sprintf(`{"exp":%d,"caps":[1]}`, exp), hs256(k.hs.Key.([]byte))), t0, ErrMalformed},
		{"two parts", parts[0] + "." + parts[1], t0, ErrMalformed},
		{"four parts", good + ".x", t0, ErrMalformed},
		{"bad base64", parts[0] + ".!!!." + parts[2], t0, ErrMalformed},
		{"header not JSON", b64([]byte("{")) + "." + parts[1] + "." + parts[2], t0, ErrMalformed},
		{"oversized", strings.Repeat("a", MaxToken-1) + "..", t0, ErrTooLarge},
		{"empty", "", t0, ErrMalformed},
	} {
		c, err := v.Verify([]byte(tc.tok), tc.now)
		t.Logf("%s: %v", tc.name, err)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %+v, %v; want %v", tc.name, c, err, tc.want)
		}
	}
	// Within the leeway an expired token still passes.
	if _, err := v.Verify([]byte(good), t0.Add(time.Hour+4*time.Second)); err != nil {
		t.Fatalf("within leeway: %v", err)
	}
}

// TestIssuerAndAudience: when configured they are required.
func TestIssuerAndAudience(t *testing.T) {
	k := getKeys(t)
	v := verifier(t, Options{Issuer: "https://app", Audience: "sluice"})
	ok := mint(t, k.es, MintClaims{Issuer: "https://app", Audience: "sluice"})
	if _, err := v.Verify([]byte(ok), t0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []MintClaims{{Issuer: "https://evil", Audience: "sluice"}, {Issuer: "https://app"}, {Audience: "sluice"}} {
		if _, err := v.Verify([]byte(mint(t, k.es, c)), t0); !errors.Is(err, ErrClaims) {
			t.Errorf("%+v: %v, want ErrClaims", c, err)
		}
	}
}

// TestSingleKeyWithoutKID: one key needs no kid.
func TestSingleKeyWithoutKID(t *testing.T) {
	sk := SigningKey{Alg: HS256, Key: []byte("0123456789abcdef0123456789abcdef")}
	v, err := NewVerifier([]Key{{Alg: HS256, Key: sk.Key}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify([]byte(mint(t, sk, MintClaims{})), t0); err != nil {
		t.Fatal(err)
	}
}

// TestKeysAreChecked: weak or mismatched key material is refused.
func TestKeysAreChecked(t *testing.T) {
	k := getKeys(t)
	ecPub := &k.es.Key.(*ecdsa.PrivateKey).PublicKey
	smallRSA, err := rsa.GenerateKey(randReader{}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		keys []Key
	}{
		{"none", nil},
		{"short secret", []Key{{ID: "a", Alg: HS256, Key: []byte("short")}}},
		{"RS256 with an EC key", []Key{{ID: "a", Alg: RS256, Key: ecPub}}},
		{"small RSA", []Key{{ID: "a", Alg: RS256, Key: &smallRSA.PublicKey}}},
		{"HS512", []Key{{ID: "a", Alg: "HS512", Key: []byte("0123456789abcdef0123456789abcdef")}}},
		{"none alg", []Key{{ID: "a", Alg: "none", Key: []byte("0123456789abcdef0123456789abcdef")}}},
		{"two without kid", []Key{{Alg: ES256, Key: ecPub}, {ID: "b", Alg: ES256, Key: ecPub}}},
		{"kid twice", []Key{{ID: "b", Alg: ES256, Key: ecPub}, {ID: "b", Alg: ES256, Key: ecPub}}},
	} {
		if _, err := NewVerifier(tc.keys, Options{}); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// randReader is a deterministic byte source for a throwaway weak key.
type randReader struct{}

func (randReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i*7 + 3)
	}
	return len(p), nil
}

// TestFingerprintSurvivesReload: the same key parsed again has the same
// fingerprint; another key does not.
func TestFingerprintSurvivesReload(t *testing.T) {
	k := getKeys(t)
	v1, v2 := verifier(t, Options{}), verifier(t, Options{})
	for _, key := range k.pubs {
		if !v2.Has(key.Fingerprint()) || !v1.Has(key.Fingerprint()) {
			t.Fatalf("key %s not found again", key.ID)
		}
	}
	moved := k.pubs[1]
	moved.ID = "renamed"
	if v1.Has(moved.Fingerprint()) {
		t.Fatal("a renamed key matched")
	}
}

// TestParseJWKS reads a JWK Set of the four kinds (private parts dropped,
// algorithms inferred or pinned) and leaves out what it cannot use.
func TestParseJWKS(t *testing.T) {
	k := getKeys(t)
	rsPub := &k.rs.Key.(*rsa.PrivateKey).PublicKey
	esPub := &k.es.Key.(*ecdsa.PrivateKey).PublicKey
	edPriv := k.ed.Key.(ed25519.PrivateKey)
	big := func(b []byte) string { return b64(b) }
	xy, err := esPub.Bytes() // 0x04, X, Y
	if err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(`{"keys":[
 {"kty":"RSA","kid":"rs","n":"%s","e":"AQAB"},
 {"kty":"EC","kid":"es","crv":"P-256","x":"%s","y":"%s","alg":"ES256"},
 {"kty":"OKP","kid":"ed","crv":"Ed25519","x":"%s","d":"%s"},
 {"kty":"oct","kid":"hs","k":"%s","alg":"HS256"},
 {"kty":"RSA","kid":"enc","use":"enc","n":"%s","e":"AQAB"},
 {"kty":"RSA","kid":"ps","alg":"PS256","n":"%s","e":"AQAB"}
]}`, big(rsPub.N.Bytes()), big(xy[1:33]), big(xy[33:65]),
		big(edPriv.Public().(ed25519.PublicKey)), big(edPriv.Seed()), big(k.hs.Key.([]byte)),
		big(rsPub.N.Bytes()), big(rsPub.N.Bytes()))
	got, skipped, err := ParseJWKS([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || len(skipped) != 2 {
		t.Fatalf("keys %d, skipped %q", len(got), skipped)
	}
	v, err := NewVerifier(got, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sk := range []SigningKey{k.hs, k.rs, k.es, k.ed} {
		if _, err := v.Verify([]byte(mint(t, sk, MintClaims{})), t0); err != nil {
			t.Errorf("%s from the JWK Set: %v", sk.Alg, err)
		}
	}
	if _, ok := got[2].Key.(ed25519.PublicKey); !ok {
		t.Fatalf("the OKP private key was not reduced to its public half: %T", got[2].Key)
	}
	for _, bad := range []string{`{`, `{"keys":[{"kty":"RSA","kid":"x","n":"AQAB"}]}`, `{"keys":[{"kty":"oct","kid":"x","k":"c2hvcnQ"}]}`} {
		if _, _, err := ParseJWKS([]byte(bad)); err == nil {
			t.Errorf("JWK Set %s accepted", bad)
		}
	}
}

// TestPEMKeys: public keys in PKIX or certificate PEM, private keys in
// PKCS #8, PKCS #1 and SEC 1.
func TestPEMKeys(t *testing.T) {
	k := getKeys(t)
	rsPriv := k.rs.Key.(*rsa.PrivateKey)
	esPriv := k.es.Key.(*ecdsa.PrivateKey)
	ecDER, err := x509.MarshalECPrivateKey(esPriv)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		alg string
		pem []byte
	}{
		{RS256, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsPriv)})},
		{ES256, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER})},
	} {
		if _, err := ParsePrivateKey(tc.alg, tc.pem); err != nil {
			t.Errorf("%s: %v", tc.alg, err)
		}
	}
	if _, err := ParsePrivateKey(ES256, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsPriv)})); err == nil {
		t.Error("an RSA key accepted for ES256")
	}
	if _, err := ParsePublicKey(RS256, []byte("not pem")); err == nil {
		t.Error("non-PEM public key accepted")
	}
	if _, err := ParsePrivateKey(HS256, []byte("short")); err == nil {
		t.Error("short secret accepted")
	}
}

// FuzzVerify feeds arbitrary tokens to a verifier of every algorithm's
// key: it never panics, and whatever it accepts carries the claims of a
// token that a key holder signed (the payload of one of the seeds).
func FuzzVerify(f *testing.F) {
	k := getKeys(f)
	v := verifier(f, Options{})
	valid := map[string]bool{}
	for _, sk := range []SigningKey{k.hs, k.rs, k.es, k.ed} {
		tok := mint(f, sk, MintClaims{Subject: "fuzz", Caps: &Caps{Subscribe: []string{">"}}})
		valid[strings.Split(tok, ".")[1]] = true
		f.Add([]byte(tok))
	}
	f.Add([]byte(handMade(`{"alg":"none"}`, `{"exp":1}`, func([]byte) []byte { return nil })))
	f.Add([]byte("a.b.c"))
	f.Fuzz(func(t *testing.T, tok []byte) {
		c, err := v.Verify(tok, t0)
		if err != nil {
			return
		}
		payload := strings.Split(string(tok), ".")[1]
		if !valid[payload] || c.Subject != "fuzz" {
			t.Fatalf("accepted a token with claims no key holder signed: %q", tok)
		}
	})
}

// TestVerifyConcurrently: one Verifier serves many goroutines at once,
// each with its own clock (run with -race).
func TestVerifyConcurrently(t *testing.T) {
	k := getKeys(t)
	v := verifier(t, Options{})
	tok := []byte(mint(t, k.hs, MintClaims{TTL: time.Hour}))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			now := t0.Add(time.Duration(i%2) * 2 * time.Hour) // every other one after exp
			_, err := v.Verify(tok, now)
			if (i%2 == 1) != errors.Is(err, ErrExpired) {
				t.Errorf("goroutine %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
}

// BenchmarkVerify measures one token's verification per algorithm: the
// CPU a HELLO or REFRESH with a JWT costs the server.
func BenchmarkVerify(b *testing.B) {
	k := getKeys(b)
	v := verifier(b, Options{})
	for _, sk := range []SigningKey{k.hs, k.rs, k.es, k.ed} {
		tok := []byte(mint(b, sk, MintClaims{Subject: "alice", Caps: &Caps{Subscribe: []string{"chat.>"}}}))
		b.Run(sk.Alg, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(tok, t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
