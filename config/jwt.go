package config

import (
	"fmt"
	"os"
	"time"

	"github.com/sluice-rtm/sluice/engine"
)

// jwtTable is [auth.jwt] (docs/auth.md): the keys that verify JSON Web
// Tokens and the rules for them. Files are read when the configuration
// is loaded, and again on every reload (SIGHUP).
type jwtTable struct {
	Leeway   *Duration `toml:"leeway"`
	Grace    *Duration `toml:"grace"`
	Issuer   string    `toml:"issuer"`
	Audience string    `toml:"audience"`
	MaxInfo  int       `toml:"max-info"`
	Role     string    `toml:"role"`
	JWKSFile string    `toml:"jwks-file"`
	Keys     []jwtKey  `toml:"keys"`
}

// jwtKey is one [[auth.jwt.keys]]: an HS256 secret (secret or
// secret-file) or a PEM public key (public-key-file) of RS256, ES256 or
// EdDSA.
type jwtKey struct {
	KID           string `toml:"kid"`
	Alg           string `toml:"alg"`
	Secret        string `toml:"secret"`
	SecretFile    string `toml:"secret-file"`
	PublicKeyFile string `toml:"public-key-file"`
}

// engine converts the table, reading the files it names.
func (t *jwtTable) engine() (*engine.JWTConfig, error) {
	j := &engine.JWTConfig{Issuer: t.Issuer, Audience: t.Audience, MaxInfo: t.MaxInfo, Role: t.Role}
	if t.Leeway != nil {
		j.Leeway = max(time.Duration(*t.Leeway), time.Nanosecond) // "0s" means none, not the default
	}
	if t.Grace != nil {
		j.Grace = max(time.Duration(*t.Grace), time.Nanosecond)
	}
	if t.JWKSFile != "" {
		b, err := os.ReadFile(t.JWKSFile)
		if err != nil {
			return nil, keyErr("auth.jwt.jwks-file", "%v", err)
		}
		j.JWKS = b
	}
	for i, k := range t.Keys {
		key := fmt.Sprintf("auth.jwt.keys[%d]", i)
		ek := engine.JWTKey{ID: k.KID, Alg: k.Alg}
		given := 0
		for _, s := range []string{k.Secret, k.SecretFile, k.PublicKeyFile} {
			if s != "" {
				given++
			}
		}
		if given != 1 {
			return nil, keyErr(key, "give exactly one of secret, secret-file (HS256) and public-key-file (RS256, ES256, EdDSA)")
		}
		switch {
		case k.Secret != "":
			ek.Secret = []byte(k.Secret)
		case k.SecretFile != "":
			b, err := os.ReadFile(k.SecretFile)
			if err != nil {
				return nil, keyErr(key+".secret-file", "%v", err)
			}
			ek.Secret = trimNewline(b)
		default:
			b, err := os.ReadFile(k.PublicKeyFile)
			if err != nil {
				return nil, keyErr(key+".public-key-file", "%v", err)
			}
			ek.PublicKey = b
		}
		if (ek.Secret != nil) != (k.Alg == "HS256") {
			return nil, keyErr(key, "alg %q takes %s", k.Alg, map[bool]string{true: "a secret", false: "a public-key-file"}[k.Alg == "HS256"])
		}
		j.Keys = append(j.Keys, ek)
	}
	return j, nil
}

// trimNewline drops one trailing line end of a secret file.
func trimNewline(b []byte) []byte {
	n := len(b)
	if n > 0 && b[n-1] == '\n' {
		n--
		if n > 0 && b[n-1] == '\r' {
			n--
		}
	}
	return b[:n]
}
