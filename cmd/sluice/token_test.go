package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/jwtauth"
)

// TestTokenJWTEndToEnd: `token --keygen` makes a key pair, `serve` takes
// its public half in [auth.jwt], `token --jwt` mints a token with the
// private half, and pub is allowed exactly what the token's caps say; an
// HS256 token from a secret file works too, and an expired one is
// refused.
func TestTokenJWTEndToEnd(t *testing.T) {
	ctx := ctxE2E(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "es")
	if code, out, errs := runCmd(ctx, "", "token", "--keygen", "ES256", "--key", key); code != exitOK || !strings.Contains(out, key+".pub") {
		t.Fatalf("keygen: %d %q %q", code, out, errs)
	}
	if code, _, errs := runCmd(ctx, "", "token", "--keygen", "ES256", "--key", key); code != exitFail || !strings.Contains(errs, "exists") {
		t.Fatalf("keygen over an existing file: %d %q", code, errs)
	}
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key file: %v %v", st, err)
	}
	secret := filepath.Join(dir, "secret")
	writeFile(t, secret, "0123456789abcdef0123456789abcdef\n")
	path := filepath.Join(dir, "sluice.toml")
	writeFile(t, path, authDoc("")+`
[auth.jwt]
leeway = "0s"
[[auth.jwt.keys]]
kid = "es"
alg = "ES256"
public-key-file = "`+key+`.pub"
[[auth.jwt.keys]]
kid = "hs"
alg = "HS256"
secret-file = "`+secret+`"
`)
	r := startServe(t, "--config", path)
	mint := func(args ...string) string {
		t.Helper()
		code, out, errs := runCmd(ctx, "", append([]string{"token", "--jwt"}, args...)...)
		if code != exitOK {
			t.Fatalf("token --jwt %q: %d %s", args, code, errs)
		}
		return strings.TrimSpace(out)
	}
	es := mint("--key", key, "--alg", "ES256", "--kid", "es", "--sub", "alice", "--publish", "chat.*", "--subscribe", "chat.>", "--info", `{"n":"Alice"}`)
	hs := mint("--key", secret, "--kid", "hs", "--sub", "bob", "--publish", "news.>")
	expired := mint("--key", secret, "--kid", "hs", "--sub", "bob", "--publish", "news.>", "--ttl", "1ns")
	for _, tc := range []struct {
		tok, ch string
		code    int
		err     string
	}{
		{es, "chat.a", exitOK, ""},
		{es, "news.a", exitFail, "FORBIDDEN"},
		{hs, "news.eu.x", exitOK, ""},
		{hs, "chat.a", exitFail, "FORBIDDEN"},
		{expired, "news.a", exitFail, "UNAUTHENTICATED: token expired"},
	} {
		code, _, errs := runCmd(ctx, "", "pub", "--server", r.addr, "--token", tc.tok, tc.ch, "x")
		if code != tc.code || !strings.Contains(errs, tc.err) {
			t.Errorf("pub %s with %.20s...: %d %q, want %d %q", tc.ch, tc.tok, code, errs, tc.code, tc.err)
		}
	}
	// The minted token says what the flags said.
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	pk, err := jwtauth.ParsePublicKey("ES256", pub)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jwtauth.NewVerifier([]jwtauth.Key{{ID: "es", Alg: "ES256", Key: pk}}, jwtauth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify([]byte(es), time.Now())
	if err != nil || c.Subject != "alice" || string(c.Info) != `{"n":"Alice"}` || c.Caps.History != nil ||
		len(c.Caps.Publish) != 1 || time.Until(c.Expires) > time.Hour {
		t.Fatalf("minted claims %+v %+v, %v", c, c.Caps, err)
	}
	for _, args := range [][]string{{"--jwt"}, {"--jwt", "--key", secret, "--info", "{"}, {"--jwt", "--key", key, "--alg", "RS256"}, {"--keygen", "HS256", "--key", filepath.Join(dir, "x")}} {
		if code, _, _ := runCmd(context.Background(), "", append([]string{"token"}, args...)...); code == exitOK {
			t.Errorf("token %q succeeded", args)
		}
	}
}
