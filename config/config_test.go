package config

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/engine"
)

func TestExampleFileIsValid(t *testing.T) {
	s := Default()
	if err := Load("../sluice.example.toml", &s); err != nil {
		t.Fatal(err)
	}
	o := s.Options
	if o.MaxConnsPerAddr != 64 || o.PublishRate != 10000 || o.MetricsListen != "127.0.0.1:9740" ||
		o.LimitSize != 2<<20 || o.TTL != time.Minute || o.MaxRetained != 1<<30 || len(o.ChannelRules) != 2 ||
		o.ChannelRules[1].TTL != 5*time.Minute || o.Auth == nil || len(o.Auth.Credentials) != 2 ||
		o.Auth.Roles[0].Publish[1] != "events.>" {
		t.Fatalf("example file parsed to %+v", o)
	}
}

func TestEveryKeyIsApplied(t *testing.T) {
	doc := `
listen = "0.0.0.0:1"
loops = 3
name = "n1"
limit-msgs = 10
replicas = 3
limit-size = "3MiB"
limit-life = "2s"
ttl = "30s"
max-retained = "64MiB"
max-payload = 2048
max-conns = 7
max-subs = 8
outbound-limit = "1MB"
slow-policy = "disconnect"
ping-interval = "1s"
handshake-timeout = "2s"
idle-timeout = "3s"
publish-rate = 2.5
publish-burst = 4
max-conns-per-addr = 5
trusted-proxies = ["10.0.0.0/8", "192.0.2.7"]
tls-listen = "127.0.0.1:2"
tls-cert = "c.pem"
tls-key = "k.pem"
metrics-listen = "127.0.0.1:3"
log-level = "debug"
shutdown-timeout = "4s"
[cluster]
secret = "0123456789abcdef0123456789abcdef"
`
	s := Default()
	if err := Parse([]byte(doc), &s); err != nil {
		t.Fatal(err)
	}
	want := engine.DefaultOptions()
	want.Listen, want.Loops, want.ServerName = "0.0.0.0:1", 3, "n1"
	want.LimitMsgs, want.LimitSize, want.LimitLife, want.TTL = 10, 3<<20, 2*time.Second, 30*time.Second
	want.Replicas = 3
	want.MaxRetained = 64 << 20
	want.MaxPayload, want.MaxConns, want.MaxSubsPerConn, want.OutboundLimit = 2048, 7, 8, 1e6
	want.SlowPolicy, want.PingInterval, want.HandshakeTimeout, want.IdleTimeout = engine.SlowDisconnect, time.Second, 2*time.Second, 3*time.Second
	want.PublishRate, want.PublishBurst, want.MaxConnsPerAddr = 2.5, 4, 5
	want.TrustedProxies = []string{"10.0.0.0/8", "192.0.2.7"}
	want.TLSListen, want.TLSCertFile, want.TLSKeyFile, want.MetricsListen = "127.0.0.1:2", "c.pem", "k.pem", "127.0.0.1:3"
	got := s.Options
	if got.Auth != nil || got.ChannelRules != nil {
		t.Fatalf("auth or rules set: %+v", got)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	if s.LogLevel != slog.LevelDebug || s.ShutdownTimeout != 4*time.Second || s.Cluster.Secret == "" || s.ClusterOn() || !s.NameSet {
		t.Fatalf("serve settings %+v", s)
	}
}

func TestFileKeepsUnsetValues(t *testing.T) {
	s := Default()
	s.Options.Listen = "127.0.0.1:9"
	if err := Parse([]byte(`ttl = "5s"`), &s); err != nil {
		t.Fatal(err)
	}
	if s.Options.Listen != "127.0.0.1:9" || s.Options.TTL != 5*time.Second || s.Options.LimitMsgs != 5000 {
		t.Fatalf("got %+v", s.Options)
	}
}

func TestErrorsNameKeyAndProblem(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want []string // substrings of the error
	}{
		{`lisen = "x:1"`, []string{"unknown key", "lisen"}},
		{"[auth]\nanonymus = \"r\"", []string{"unknown key", "auth.anonymus"}},
		{"[[auth.roles]]\nname = \"r\"\npublsh = [\"a\"]", []string{"unknown key", "auth.roles.publsh"}},
		{`max-conns = 0`, []string{"max-conns", "at least 1"}},
		{`max-conns = "many"`, []string{"max-conns"}},
		{`ttl = 5`, []string{"ttl", "invalid duration"}},
		{`limit-size = "2 parsecs"`, []string{"limit-size", "invalid size"}},
		{`max-retained = "-1MiB"`, []string{"max-retained"}},
		{`slow-policy = "drop"`, []string{"slow-policy", "drop"}},
		{`trusted-proxies = ["10.0.0.0/33"]`, []string{"trusted-proxies[0]", "CIDR"}},
		{`log-level = "loud"`, []string{"log-level", "loud"}},
		{`shutdown-timeout = "0s"`, []string{"shutdown-timeout", "positive"}},
		{`drain-timeout = "-1s"`, []string{"drain-timeout", "positive"}},
		{`idle-timeout = "3s"`, []string{"idle-timeout", "ping-interval"}},
		{`tls-listen = "127.0.0.1:0"`, []string{"tls-cert"}},
		{"[[channel-rules]]\nprefix = \"\"", []string{"channel-rules[0].prefix", "empty"}},
		{"[[channel-rules]]\nprefix = \"a\"\nttl = \"-1s\"", []string{"channel-rules[0].ttl", "negative"}},
		{"[auth]\nanonymous = \"ghost\"", []string{"auth.anonymous", "ghost"}},
		{"[[auth.roles]]\nname = \"r\"\npublish = [\"a.>.b\"]", []string{"auth.roles[0].publish[0]", "last token"}},
		{"[[auth.roles]]\nname = \"r\"\n[[auth.tokens]]\nhash = \"secret\"\nrole = \"r\"", []string{"auth.tokens[0].hash", "sha256:"}},
		{"[[auth.tokens]]\nhash = \"" + engine.HashToken([]byte("x")) + "\"\nrole = \"nope\"", []string{"auth.tokens[0].role", "nope"}},
		{"[cluster]\nsecret = \"short\"", []string{"cluster.secret", "at least 32"}},
		{"listen = ", []string{"line 1"}},
	} {
		s := Default()
		err := Parse([]byte(tc.doc), &s)
		if err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: err = %v, want an ErrInvalid", tc.doc, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not mention %q", tc.doc, err, w)
			}
		}
		if s.Options.MaxConns != engine.DefaultOptions().MaxConns {
			t.Errorf("%q: a failed Parse changed dst", tc.doc)
		}
	}
}

func TestKeyFor(t *testing.T) {
	for field, key := range map[string]string{
		"MaxConnsPerAddr":               "max-conns-per-addr",
		"TrustedProxies[1]":             "trusted-proxies[1]",
		"ChannelRules[3].LimitLife":     "channel-rules[3].limit-life",
		"Auth.Credentials[1].Hash":      "auth.tokens[1].hash",
		"Auth.Roles[0].Subscribe[2]":    "auth.roles[0].subscribe[2]",
		"SomethingNew":                  "SomethingNew",
		"TLSCertFile":                   "tls-cert",
		"Auth.Roles[0].Name":            "auth.roles[0].name",
		"ChannelRules[0].TTL":           "channel-rules[0].ttl",
		"ChannelRules[0].Prefix":        "channel-rules[0].prefix",
		"Auth.Anonymous":                "auth.anonymous",
		"HandshakeTimeout":              "handshake-timeout",
		"Auth.Credentials[12].Role":     "auth.tokens[12].role",
		"ChannelRules[0].LimitSize":     "channel-rules[0].limit-size",
		"Auth.Roles[1].Publish[0]":      "auth.roles[1].publish[0]",
		"MetricsListen":                 "http-listen",
		"WSListen":                      "ws-listen",
		"Auth.Credentials[0].Name":      "auth.tokens[0].name",
		"ChannelRules[10].LimitMsgs":    "channel-rules[10].limit-msgs",
		"PublishBurst":                  "publish-burst",
		"ServerName":                    "name",
		"MaxSubsPerConn":                "max-subs",
		"Auth.Roles[0].Subscribe[0]":    "auth.roles[0].subscribe[0]",
		"ChannelRules[0].Unknown":       "ChannelRules[0].Unknown",
		"Auth.Credentials[0].Hash.Deep": "auth.tokens[0].hash.Deep",
	} {
		if field == "Auth.Credentials[0].Hash.Deep" {
			key = field // an unknown part keeps the field as it is
		}
		if got := KeyFor(field); got != key {
			t.Errorf("KeyFor(%q) = %q, want %q", field, got, key)
		}
	}
}

func TestLoadAuth(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.toml")
	write := func(doc string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Only [auth] is validated: a tls-listen completed by a flag at start
	// does not break a reload.
	write("tls-listen = \"127.0.0.1:0\"\n[[auth.roles]]\nname = \"r\"\nsubscribe = [\">\"]\n[[auth.tokens]]\nhash = \"" +
		engine.HashToken([]byte("tok")) + "\"\nrole = \"r\"\n")
	a, err := LoadAuth(path)
	if err != nil || a == nil || len(a.Credentials) != 1 {
		t.Fatalf("LoadAuth = %+v, %v", a, err)
	}
	write("ttl = \"5s\"\n")
	if a, err := LoadAuth(path); err != nil || a != nil {
		t.Fatalf("file without [auth]: %+v, %v; want nil (auth off)", a, err)
	}
	write("[auth]\nanonymous = \"ghost\"\n")
	if _, err := LoadAuth(path); err == nil || !strings.Contains(err.Error(), "auth.anonymous") || !strings.Contains(err.Error(), path) {
		t.Fatalf("bad auth: %v", err)
	}
	write("bogus = 1\n")
	if _, err := LoadAuth(path); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := LoadAuth(filepath.Join(dir, "missing.toml")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"0": 0, "123": 123, "1K": 1024, "2MiB": 2 << 20, "1.5MB": 1500000, "3 G": 3 << 30, "7B": 7} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "x", "1.5", "NaN", "1e30"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

// FuzzParse: no document makes Parse panic; a failure wraps ErrInvalid and
// leaves dst alone; a success gives options that validate.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("../sluice.example.toml"); err == nil {
		f.Add(string(b))
	}
	f.Add("ttl = \"5s\"\n[[auth.roles]]\nname = \"r\"\n")
	f.Add("max-payload = \"1MiB\"\n[[channel-rules]]\nprefix = \"a\"\n")
	f.Add("name = \"n\"\n[cluster]\nlisten = \"127.0.0.1:0\"\njoin = [\"127.0.0.1:1\"]\ncapacity = 2\n")
	f.Fuzz(func(t *testing.T, doc string) {
		s := Default()
		err := Parse([]byte(doc), &s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			if !reflect.DeepEqual(s, Default()) {
				t.Fatal("a failed Parse changed dst")
			}
			return
		}
		if err := Validate(&s); err != nil {
			t.Fatalf("Parse accepted options that do not validate: %v", err)
		}
	})
}

// TestRoleHistoryAndPresenceKeys: a role's history and presence keys
// reach engine.Role; an absent key stays nil (the subscribe patterns
// apply), an empty list stays empty (no channel).
func TestRoleHistoryAndPresenceKeys(t *testing.T) {
	doc := `
[[auth.roles]]
name = "a"
subscribe = ["x.>"]
history = []
presence = ["x.y"]
[[auth.roles]]
name = "b"
subscribe = ["x.>"]
`
	s := Default()
	if err := Parse([]byte(doc), &s); err != nil {
		t.Fatal(err)
	}
	r := s.Options.Auth.Roles
	if r[0].History == nil || len(r[0].History) != 0 || !reflect.DeepEqual(r[0].Presence, []string{"x.y"}) {
		t.Fatalf("role a: history %#v presence %#v", r[0].History, r[0].Presence)
	}
	if r[1].History != nil || r[1].Presence != nil {
		t.Fatalf("role b: history %#v presence %#v, want nil", r[1].History, r[1].Presence)
	}
	if err := Parse([]byte("[[auth.roles]]\nname = \"c\"\npresence = [\"a.>.b\"]\n"), &s); err == nil ||
		!strings.Contains(err.Error(), "auth.roles[0].presence[0]") {
		t.Fatalf("bad presence pattern: %v", err)
	}
}
