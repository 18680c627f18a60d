package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/jwtauth"
)

// TestJWTTable: [auth.jwt] reaches engine.JWTConfig with its files read
// (secret file without its line end, PEM public key, JWK Set), and is
// validated like the rest of [auth]; a reload (LoadAuth) reads the files
// again.
func TestJWTTable(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, _, pub, err := jwtauth.GenerateKey(jwtauth.EdDSA)
	if err != nil {
		t.Fatal(err)
	}
	secret := write("secret", "0123456789abcdef0123456789abcdef\n")
	pem := write("ed.pem", string(pub))
	jwks := write("jwks.json", `{"keys":[{"kty":"oct","kid":"j1","k":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"}]}`)
	doc := `
[[auth.roles]]
name = "r"
subscribe = [">"]
[auth.jwt]
leeway = "0s"
grace = "30s"
issuer = "https://app"
role = "r"
max-info = 256
jwks-file = "` + jwks + `"
[[auth.jwt.keys]]
kid = "a"
alg = "HS256"
secret-file = "` + secret + `"
[[auth.jwt.keys]]
kid = "b"
alg = "EdDSA"
public-key-file = "` + pem + `"
`
	path := write("s.toml", doc)
	a, err := LoadAuth(path)
	if err != nil {
		t.Fatal(err)
	}
	j := a.JWT
	if j == nil || len(j.Keys) != 2 || string(j.Keys[0].Secret) != "0123456789abcdef0123456789abcdef" ||
		string(j.Keys[1].PublicKey) != string(pub) || len(j.JWKS) == 0 || j.Leeway != time.Nanosecond ||
		j.Grace != 30*time.Second || j.Issuer != "https://app" || j.Role != "r" || j.MaxInfo != 256 {
		t.Fatalf("JWT config %+v", j)
	}
	// A reload reads the JWK Set again: a broken one is refused.
	write("jwks.json", `{"keys":[{"kty":"oct","kid":"j1","k":"c2hvcnQ"}]}`)
	if _, err := LoadAuth(path); err == nil || !strings.Contains(err.Error(), "auth.jwt.jwks-file") {
		t.Fatalf("broken JWK Set on reload: %v", err)
	}
	for _, tc := range []struct{ doc, want string }{
		{"[auth.jwt]\n[[auth.jwt.keys]]\nalg = \"HS256\"\n", "auth.jwt.keys[0]: give exactly one"},
		{"[auth.jwt]\n[[auth.jwt.keys]]\nalg = \"ES256\"\nsecret = \"0123456789abcdef0123456789abcdef\"\n", "takes a public-key-file"},
		{"[auth.jwt]\n[[auth.jwt.keys]]\nalg = \"HS256\"\nsecret = \"short\"\n", "auth.jwt.keys"},
		{"[auth.jwt]\nrole = \"ghost\"\n[[auth.jwt.keys]]\nalg = \"HS256\"\nsecret = \"0123456789abcdef0123456789abcdef\"\n", "auth.jwt.role"},
		{"[auth.jwt]\njwks-file = \"" + filepath.Join(dir, "missing") + "\"\n", "auth.jwt.jwks-file"},
		{"[auth.jwt]\n", "auth.jwt.keys"},
	} {
		write("bad.toml", tc.doc)
		if _, err := LoadAuth(filepath.Join(dir, "bad.toml")); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to mention %q", tc.doc, err, tc.want)
		}
	}
}
