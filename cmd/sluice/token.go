package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sluice-rtm/sluice/engine"
	"github.com/sluice-rtm/sluice/internal/jwtauth"
)

const tokenDescription = `
Prints a new random token (256 bits, URL-safe base64) on the first line
and its hash on the second. Give the token to the client (pub/sub --token,
or client.WithToken) and put only the hash in the server's configuration
file ([[auth.tokens]] hash = "sha256:..."). With --hash, reads a token
from the first line of standard input instead and prints only its hash.

With --jwt, mints a development JSON Web Token (docs/auth.md) signed with
--key (a PEM private key, or for HS256 a file holding the secret) for
--alg (HS256, RS256, ES256, EdDSA), valid for --ttl, for client --sub,
with the channel patterns of --publish, --subscribe, --history and
--presence (each may repeat; a list not given is left out of the token,
and history and presence then follow subscribe; --no-caps leaves the
whole "caps" claim out, so the server's [auth.jwt] role applies). Your
application's backend mints its users' tokens with its own JWT library;
this is for trying things out.

With --keygen ALG (RS256, ES256, EdDSA), writes a new key pair: the
private key to --key FILE (mode 0600) and the public key to FILE.pub,
which goes in the server's [[auth.jwt.keys]] public-key-file.`

// patterns is a repeatable flag of channel patterns; nil until set.
type patterns []string

func (p *patterns) String() string     { return strings.Join(*p, " ") }
func (p *patterns) Set(s string) error { *p = append(*p, s); return nil }

// jwtFlags are the flags of token --jwt and --keygen.
type jwtFlags struct {
	mint, noCaps                          bool
	keygen, alg, key, kid, sub            string
	info, issuer, audience                string
	ttl                                   time.Duration
	publish, subscribe, history, presence patterns
}

func (j *jwtFlags) bind(fs *flag.FlagSet) {
	fs.BoolVar(&j.mint, "jwt", false, "mint a JWT instead of a static token")
	fs.StringVar(&j.keygen, "keygen", "", "write a new key pair for `ALG` to --key FILE and FILE.pub")
	fs.StringVar(&j.alg, "alg", "HS256", "signing algorithm: `ALG` HS256, RS256, ES256 or EdDSA")
	fs.StringVar(&j.key, "key", "", "`FILE`: the PEM private key, or the HS256 secret")
	fs.StringVar(&j.kid, "kid", "", "key id written in the token's header (the server's kid for the key)")
	fs.StringVar(&j.sub, "sub", "", "the client id (sub claim)")
	fs.DurationVar(&j.ttl, "ttl", time.Hour, "how long the token is valid, `DUR`")
	fs.StringVar(&j.info, "info", "", "client info claim, a `JSON` value (shown by presence)")
	fs.StringVar(&j.issuer, "issuer", "", "iss claim")
	fs.StringVar(&j.audience, "audience", "", "aud claim")
	fs.Var(&j.publish, "publish", "channel `PATTERN` the client may publish to (repeat for more)")
	fs.Var(&j.subscribe, "subscribe", "channel `PATTERN` the client may subscribe to (repeat for more)")
	fs.Var(&j.history, "history", "channel `PATTERN` whose history the client may read (repeat for more)")
	fs.Var(&j.presence, "presence", "channel `PATTERN` whose presence the client may see (repeat for more)")
	fs.BoolVar(&j.noCaps, "no-caps", false, "leave the caps claim out (the server's [auth.jwt] role applies)")
}

func runToken(_ context.Context, std stdio, args []string) int {
	fs := newFlagSet("token", "[--hash] | --jwt --key FILE [--alg ALG] [--sub ID] [--ttl DUR] [--publish P]... | --keygen ALG --key FILE", tokenDescription)
	hashOnly := fs.Bool("hash", false, "hash the token read from standard input instead of making one")
	var j jwtFlags
	j.bind(fs)
	if code, done := parseOnly(fs, std, args); done {
		return code
	}
	switch {
	case j.keygen != "":
		return j.writeKeyPair(std)
	case j.mint:
		tok, err := j.mintToken(time.Now())
		if err != nil {
			fmt.Fprintf(std.err, "sluice token: %v\n", err)
			return exitFail
		}
		fmt.Fprintln(std.out, tok)
		return exitOK
	case *hashOnly:
		line, err := bufio.NewReader(std.in).ReadString('\n')
		tok := strings.TrimRight(line, "\r\n")
		if tok == "" {
			if err == nil {
				err = fmt.Errorf("empty token")
			}
			fmt.Fprintf(std.err, "sluice token: reading the token: %v\n", err)
			return exitFail
		}
		fmt.Fprintln(std.out, engine.HashToken([]byte(tok)))
		return exitOK
	}
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	fmt.Fprintln(std.out, tok)
	fmt.Fprintln(std.out, engine.HashToken([]byte(tok)))
	return exitOK
}

// mintToken signs the token the flags describe.
func (j *jwtFlags) mintToken(now time.Time) (string, error) {
	if j.key == "" {
		return "", errors.New("--jwt needs --key FILE")
	}
	raw, err := os.ReadFile(j.key)
	if err != nil {
		return "", err
	}
	if j.alg == jwtauth.HS256 {
		raw = []byte(strings.TrimRight(string(raw), "\r\n"))
	}
	priv, err := jwtauth.ParsePrivateKey(j.alg, raw)
	if err != nil {
		return "", fmt.Errorf("--key %s: %w", j.key, err)
	}
	c := jwtauth.MintClaims{Subject: j.sub, TTL: j.ttl, Issuer: j.issuer, Audience: j.audience}
	if j.info != "" {
		if !json.Valid([]byte(j.info)) {
			return "", fmt.Errorf("--info %q is not JSON", j.info)
		}
		c.Info = json.RawMessage(j.info)
	}
	if !j.noCaps {
		c.Caps = &jwtauth.Caps{Publish: j.publish, Subscribe: j.subscribe, History: j.history, Presence: j.presence}
	}
	return jwtauth.Mint(jwtauth.SigningKey{ID: j.kid, Alg: j.alg, Key: priv}, c, now)
}

// writeKeyPair is --keygen.
func (j *jwtFlags) writeKeyPair(std stdio) int {
	if j.key == "" {
		fmt.Fprintln(std.err, "sluice token: --keygen needs --key FILE")
		return exitUsage
	}
	_, priv, pub, err := jwtauth.GenerateKey(j.keygen)
	if err == nil {
		err = writeNew(j.key, priv, 0o600)
	}
	if err == nil {
		err = writeNew(j.key+".pub", pub, 0o644)
	}
	if err != nil {
		fmt.Fprintf(std.err, "sluice token: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(std.out, "%s\n%s.pub\n", j.key, j.key)
	return exitOK
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
