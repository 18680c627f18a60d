// Package config reads the TOML configuration file of `sluice serve`.
//
// The file mirrors the serve command line: every top-level key has the
// name of a flag (without the dashes) and the same meaning and syntax
// (sizes like "2MiB", durations like "4s"). Tables add what a command line
// cannot say well: [auth] (tokens, roles, permissions), [[channel-rules]]
// (limits per channel prefix) and [cluster] (cluster mode: gossip address,
// seeds, shared secret; its keys are the --cluster-* flags without the
// prefix, plus join and client-advertise). Unknown keys are
// errors, and every error names the key and the problem. Defaults are
// engine.DefaultOptions; a flag given on the command line wins over the
// file. See sluice.example.toml at the repository root.
//
// Everything here is pure apart from reading the file; it is safe for
// concurrent use.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/sluice-rtm/sluice/engine"
)

// ErrInvalid is wrapped by every error about the content of a file.
var ErrInvalid = errors.New("invalid setting")

// Serve is everything `sluice serve` is configured with.
type Serve struct {
	Options         engine.Options
	LogLevel        slog.Level
	ShutdownTimeout time.Duration
	// DrainTimeout bounds the graceful drain of a cluster node on SIGTERM
	// or `sluice cluster drain` (engine.Server.Drain) before its shutdown.
	DrainTimeout time.Duration
	// Cluster is the [cluster] table. Cluster mode is on when
	// Cluster.Listen is set; Options.Cluster stays nil here and
	// EngineOptions fills it in. Cluster.Secret may be set without
	// Listen (it is then unused).
	Cluster engine.ClusterOptions
	// NameSet reports that the file set the node name (key name), as
	// opposed to keeping the default.
	NameSet bool
}

// ClusterOn reports whether the configuration runs a cluster node.
func (s *Serve) ClusterOn() bool { return s.Cluster.Listen != "" }

// EngineOptions returns the engine options of s: Options with
// Options.Cluster pointing to a copy of Cluster when cluster mode is on,
// and nil otherwise. The Join slice is copied too.
func (s *Serve) EngineOptions() engine.Options {
	o := s.Options
	o.Cluster = nil
	if s.ClusterOn() {
		c := s.Cluster
		c.Join = append([]string(nil), c.Join...)
		if c.DataDir == "" {
			c.DataDir = DefaultDataDir(o.ServerName)
		}
		o.Cluster = &c
	}
	return o
}

// DefaultDataDir is a cluster node's data directory when none is given:
// sluice-data/NAME in the working directory (the node's name with path
// separators and colons replaced), so that nodes started from one
// directory keep apart.
func DefaultDataDir(node string) string {
	safe := strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == ':' || r == 0 {
			return '_'
		}
		return r
	}, node)
	if safe == "" || safe == "." || safe == ".." {
		safe = "node"
	}
	return filepath.Join("sluice-data", safe)
}

// Default returns the serve defaults: engine.DefaultOptions, log level
// info, shutdown timeout 10s, drain timeout 20s.
func Default() Serve {
	return Serve{Options: engine.DefaultOptions(), LogLevel: slog.LevelInfo, ShutdownTimeout: 10 * time.Second,
		DrainTimeout: DefaultDrainTimeout}
}

// DefaultDrainTimeout bounds a cluster node's drain. With the shutdown
// timeout's 10 s it makes 30 s, the termination grace period Kubernetes
// gives a pod before SIGKILL by default; a drain needs about half a
// second to start (gossip, a manager tick), the SDK's 2 s GOAWAY grace
// for the clients to move, and the copies of what the node holds, about
// 50 MB/s on a loaded 2-core machine (BENCHMARKS.md, "Drain"): 20 s moves
// most of a 1 GiB retention budget. Nodes that hold more need more.
const DefaultDrainTimeout = 20 * time.Second

// file is the layout of the TOML document. Pointers tell a key that is
// absent (keep the value) from one set to its zero value.
type file struct {
	Listen          *string      `toml:"listen"`
	Loops           *int         `toml:"loops"`
	Name            *string      `toml:"name"`
	LimitMsgs       *int         `toml:"limit-msgs"`
	Replicas        *int         `toml:"replicas"`
	LimitSize       *Size        `toml:"limit-size"`
	LimitLife       *Duration    `toml:"limit-life"`
	TTL             *Duration    `toml:"ttl"`
	MaxRetained     *Size        `toml:"max-retained"`
	DedupWindow     *Duration    `toml:"dedup-window"`
	DedupIDs        *int         `toml:"dedup-ids"`
	MaxPayload      *Size        `toml:"max-payload"`
	MaxConns        *int         `toml:"max-conns"`
	MaxSubs         *int         `toml:"max-subs"`
	OutboundLimit   *Size        `toml:"outbound-limit"`
	SlowPolicy      *string      `toml:"slow-policy"`
	PingInterval    *Duration    `toml:"ping-interval"`
	HandshakeTO     *Duration    `toml:"handshake-timeout"`
	IdleTimeout     *Duration    `toml:"idle-timeout"`
	FrameTimeout    *Duration    `toml:"frame-timeout"`
	PublishRate     *float64     `toml:"publish-rate"`
	PublishBurst    *int         `toml:"publish-burst"`
	MaxConnsPerAddr *int         `toml:"max-conns-per-addr"`
	TrustedProxies  []string     `toml:"trusted-proxies"`
	TLSListen       *string      `toml:"tls-listen"`
	TLSCert         *string      `toml:"tls-cert"`
	TLSKey          *string      `toml:"tls-key"`
	MetricsListen   *string      `toml:"metrics-listen"`
	HTTPListen      *string      `toml:"http-listen"`
	WSListen        *string      `toml:"ws-listen"`
	WSOrigins       []string     `toml:"ws-origins"`
	LogLevel        *string      `toml:"log-level"`
	ShutdownTimeout *Duration    `toml:"shutdown-timeout"`
	DrainTimeout    *Duration    `toml:"drain-timeout"`
	ChannelRules    []rule       `toml:"channel-rules"`
	Auth            *authTable   `toml:"auth"`
	Cluster         *clusterTab  `toml:"cluster"`
	Presence        *presenceTab `toml:"presence"`
}

// presenceTab is the [presence] table: the --presence-* flags without
// the prefix.
type presenceTab struct {
	MaxMembers        *int      `toml:"max-members"`
	MaxBytes          *Size     `toml:"max-bytes"`
	EventsMax         *int      `toml:"events-max"`
	OccupancyInterval *Duration `toml:"occupancy-interval"`
	PublisherWindow   *Duration `toml:"publisher-window"`
}

type rule struct {
	Prefix    string   `toml:"prefix"`
	LimitMsgs int      `toml:"limit-msgs"`
	Replicas  int      `toml:"replicas"`
	LimitSize Size     `toml:"limit-size"`
	LimitLife Duration `toml:"limit-life"`
	TTL       Duration `toml:"ttl"`
}

type authTable struct {
	Anonymous string      `toml:"anonymous"`
	Roles     []roleTable `toml:"roles"`
	Tokens    []tokenTab  `toml:"tokens"`
	JWT       *jwtTable   `toml:"jwt"`
}

type roleTable struct {
	Name      string   `toml:"name"`
	Publish   []string `toml:"publish"`
	Subscribe []string `toml:"subscribe"`
	History   []string `toml:"history"`  // absent: subscribe's
	Presence  []string `toml:"presence"` // absent: subscribe's
}

type tokenTab struct {
	Name string `toml:"name"`
	Hash string `toml:"hash"`
	Role string `toml:"role"`
}

type clusterTab struct {
	Listen          *string   `toml:"listen"`
	Advertise       *string   `toml:"advertise"`
	ClientAdvertise *string   `toml:"client-advertise"`
	Join            []string  `toml:"join"`
	Secret          *string   `toml:"secret"`
	Capacity        *float64  `toml:"capacity"`
	RPCTimeout      *Duration `toml:"rpc-timeout"`
	ReportInterval  *Duration `toml:"report-interval"`
	S2              *bool     `toml:"s2"`
	DataDir         *string   `toml:"data-dir"`
	RaftListen      *string   `toml:"raft-listen"`
	RaftAdvertise   *string   `toml:"raft-advertise"`
	BootstrapExpect *int      `toml:"bootstrap-expect"`
	RaftTimeout     *Duration `toml:"raft-timeout"`
	NodeGoneAfter   *Duration `toml:"node-gone-after"`
}

// MinClusterSecret is the shortest accepted cluster.secret, in bytes.
const MinClusterSecret = 32

// Size is a byte count written as an integer or a string with a unit
// (see ParseSize).
type Size int

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Size) UnmarshalText(b []byte) error {
	n, err := ParseSize(string(b))
	*s = Size(n)
	return err
}

// Duration is a time.Duration written as a Go duration string ("500ms",
// "4s", "1m30s"); a bare number is refused, so that "4" cannot silently
// mean four nanoseconds.
type Duration time.Duration

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q (want e.g. 500ms, 4s, 1m30s)", b)
	}
	*d = Duration(v)
	return nil
}

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
}

// ParseSize parses a size in bytes: "123", "512K", "2MiB" (x1024 units K,
// M, G, KiB, MiB, GiB), "1.5MB" (x1000 units KB, MB, GB).
func ParseSize(s string) (int, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || math.IsNaN(v) {
		return 0, fmt.Errorf("invalid size %q (want e.g. 1048576, 512KiB, 2MB)", s)
	}
	total := v * float64(mult)
	if total > math.MaxInt32*1024.0 || total != math.Trunc(total) {
		return 0, fmt.Errorf("invalid size %q: not a whole number of bytes in range", s)
	}
	return int(total), nil
}

// ParseLevel parses a log level: debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

// Load reads the file at path and applies it to dst (whose values are
// kept for keys the file does not set), then validates the result. Errors
// name the file, the key and the problem.
func Load(path string, dst *Serve) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := Parse(b, dst); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Parse is Load for a document in memory.
func Parse(doc []byte, dst *Serve) error {
	out := *dst
	if err := decode(doc, &out); err != nil {
		return err
	}
	if err := Validate(&out); err != nil {
		return err
	}
	*dst = out
	return nil
}

// decode parses doc, refuses unknown keys and applies it to dst.
func decode(doc []byte, dst *Serve) error {
	var f file
	md, err := toml.Decode(string(doc), &f)
	if err != nil {
		return decodeError(err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return fmt.Errorf("%w: unknown key %s", ErrInvalid, strings.Join(keys, ", "))
	}
	return f.apply(dst)
}

// keyErr is an error about one key.
func keyErr(key, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, key, fmt.Sprintf(format, args...))
}

// typeErrRe extracts the key from BurntSushi/toml's type errors.
var typeErrRe = regexp.MustCompile(`toml: (?:line \d+ \(last key "([^"]*)"\): )?(.*)`)

// decodeError turns a TOML syntax or type error into one that names the
// key (when the parser knows it) and the line.
func decodeError(err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		key := pe.LastKey
		if key == "" {
			key = "document"
		}
		return fmt.Errorf("%w: line %d: %s: %s", ErrInvalid, pe.Position.Line, key, pe.Message)
	}
	if m := typeErrRe.FindStringSubmatch(err.Error()); m != nil && m[1] != "" {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, m[1], m[2])
	}
	return fmt.Errorf("%w: %v", ErrInvalid, err)
}

// setKey copies *v into *p when the key is set (v not nil); setd and
// sets do the same for durations and sizes.
func setKey[T any](p *T, v *T) {
	if v != nil {
		*p = *v
	}
}

func setd(p *time.Duration, v *Duration) {
	if v != nil {
		*p = time.Duration(*v)
	}
}

func sets(p *int, v *Size) {
	if v != nil {
		*p = int(*v)
	}
}

// apply copies the keys that are set into dst.
func (f *file) apply(dst *Serve) error {
	o := &dst.Options
	setKey(&o.Listen, f.Listen)
	setKey(&o.Loops, f.Loops)
	setKey(&o.ServerName, f.Name)
	if f.Name != nil {
		dst.NameSet = true
	}
	setKey(&o.LimitMsgs, f.LimitMsgs)
	setKey(&o.Replicas, f.Replicas)
	sets(&o.LimitSize, f.LimitSize)
	setd(&o.LimitLife, f.LimitLife)
	setd(&o.TTL, f.TTL)
	sets(&o.MaxRetained, f.MaxRetained)
	setd(&o.DedupWindow, f.DedupWindow)
	setKey(&o.DedupIDs, f.DedupIDs)
	sets(&o.MaxPayload, f.MaxPayload)
	setKey(&o.MaxConns, f.MaxConns)
	setKey(&o.MaxSubsPerConn, f.MaxSubs)
	sets(&o.OutboundLimit, f.OutboundLimit)
	if f.SlowPolicy != nil {
		o.SlowPolicy = engine.SlowPolicy(*f.SlowPolicy)
	}
	setd(&o.PingInterval, f.PingInterval)
	setd(&o.HandshakeTimeout, f.HandshakeTO)
	setd(&o.IdleTimeout, f.IdleTimeout)
	setd(&o.FrameTimeout, f.FrameTimeout)
	setKey(&o.PublishRate, f.PublishRate)
	setKey(&o.PublishBurst, f.PublishBurst)
	setKey(&o.MaxConnsPerAddr, f.MaxConnsPerAddr)
	if f.TrustedProxies != nil {
		o.TrustedProxies = append([]string(nil), f.TrustedProxies...)
	}
	setKey(&o.TLSListen, f.TLSListen)
	setKey(&o.TLSCertFile, f.TLSCert)
	setKey(&o.TLSKeyFile, f.TLSKey)
	setKey(&o.MetricsListen, f.MetricsListen)
	setKey(&o.MetricsListen, f.HTTPListen) // the new name wins
	setKey(&o.WSListen, f.WSListen)
	if f.WSOrigins != nil {
		o.WSOrigins = append([]string(nil), f.WSOrigins...)
	}
	if f.LogLevel != nil {
		l, err := ParseLevel(*f.LogLevel)
		if err != nil {
			return keyErr("log-level", "%q is not debug, info, warn or error", *f.LogLevel)
		}
		dst.LogLevel = l
	}
	setd(&dst.ShutdownTimeout, f.ShutdownTimeout)
	setd(&dst.DrainTimeout, f.DrainTimeout)
	if f.ChannelRules != nil {
		o.ChannelRules = nil
		for _, r := range f.ChannelRules {
			o.ChannelRules = append(o.ChannelRules, engine.ChannelRule{
				Prefix: r.Prefix, LimitMsgs: r.LimitMsgs, LimitSize: int(r.LimitSize),
				LimitLife: time.Duration(r.LimitLife), TTL: time.Duration(r.TTL), Replicas: r.Replicas,
			})
		}
	}
	if f.Auth != nil {
		a, err := f.Auth.engine()
		if err != nil {
			return err
		}
		o.Auth = a
	}
	if p := f.Presence; p != nil {
		setKey(&o.Presence.MaxMembers, p.MaxMembers)
		sets(&o.Presence.MaxBytes, p.MaxBytes)
		setKey(&o.Presence.EventsMax, p.EventsMax)
		setd(&o.Presence.OccupancyInterval, p.OccupancyInterval)
		setd(&o.Presence.PublisherWindow, p.PublisherWindow)
	}
	if f.Cluster != nil {
		f.Cluster.apply(&dst.Cluster)
	}
	return nil
}

// engine returns the [auth] table as the engine's configuration.
func (t *authTable) engine() (*engine.AuthConfig, error) {
	a := &engine.AuthConfig{Anonymous: t.Anonymous}
	for _, r := range t.Roles {
		a.Roles = append(a.Roles, engine.Role{Name: r.Name, Publish: r.Publish, Subscribe: r.Subscribe,
			History: r.History, Presence: r.Presence})
	}
	for _, tk := range t.Tokens {
		a.Credentials = append(a.Credentials, engine.Credential{Name: tk.Name, Hash: tk.Hash, Role: tk.Role})
	}
	if t.JWT != nil {
		j, err := t.JWT.engine()
		if err != nil {
			return nil, err
		}
		a.JWT = j
	}
	return a, nil
}

// apply copies the [cluster] keys that are set into d.
func (c *clusterTab) apply(d *engine.ClusterOptions) {
	setKey(&d.Listen, c.Listen)
	setKey(&d.Advertise, c.Advertise)
	setKey(&d.ClientAdvertise, c.ClientAdvertise)
	if c.Join != nil {
		d.Join = append([]string(nil), c.Join...)
	}
	setKey(&d.Secret, c.Secret)
	setKey(&d.Capacity, c.Capacity)
	setd(&d.RPCTimeout, c.RPCTimeout)
	setd(&d.ReportInterval, c.ReportInterval)
	setKey(&d.S2, c.S2)
	setKey(&d.DataDir, c.DataDir)
	setKey(&d.RaftListen, c.RaftListen)
	setKey(&d.RaftAdvertise, c.RaftAdvertise)
	setKey(&d.BootstrapExpect, c.BootstrapExpect)
	setd(&d.RaftTimeout, c.RaftTimeout)
	setd(&d.NodeGoneAfter, c.NodeGoneAfter)
}

// Validate checks a complete serve configuration; errors name the key (or
// flag: they have the same names) and the problem.
func Validate(s *Serve) error {
	if s.ShutdownTimeout <= 0 {
		return keyErr("shutdown-timeout", "must be positive, got %v", s.ShutdownTimeout)
	}
	if s.DrainTimeout <= 0 {
		return keyErr("drain-timeout", "must be positive, got %v", s.DrainTimeout)
	}
	c := &s.Cluster
	if err := checkSecret(c.Secret); err != nil {
		return err
	}
	if !s.ClusterOn() {
		for _, k := range []struct {
			key string
			set bool
		}{
			{"advertise", c.Advertise != ""}, {"client-advertise", c.ClientAdvertise != ""}, {"join", len(c.Join) > 0},
			{"capacity", c.Capacity != 0}, {"rpc-timeout", c.RPCTimeout != 0},
			{"report-interval", c.ReportInterval != 0}, {"s2", c.S2}, {"data-dir", c.DataDir != ""},
			{"raft-listen", c.RaftListen != ""}, {"raft-advertise", c.RaftAdvertise != ""},
			{"bootstrap-expect", c.BootstrapExpect != 0}, {"raft-timeout", c.RaftTimeout != 0},
			{"node-gone-after", c.NodeGoneAfter != 0},
		} {
			if k.set {
				return keyErr("cluster."+k.key, "set without cluster.listen (--cluster-listen), which turns cluster mode on")
			}
		}
	}
	o := s.EngineOptions()
	if err := o.Validate(); err != nil {
		return Describe(err)
	}
	if s.ClusterOn() {
		return checkGossipAddrs(c)
	}
	return nil
}

// checkGossipAddrs checks what membership needs of the gossip addresses
// beyond HOST:PORT (which engine.Options.Validate checks): listen binds to
// an IP literal or to all interfaces; advertise is an IP literal with a
// port.
func checkGossipAddrs(c *engine.ClusterOptions) error {
	if host, _, err := net.SplitHostPort(c.Listen); err == nil && host != "" && net.ParseIP(host) == nil {
		return keyErr("cluster.listen", "host %q is not an IP address (gossip binds to an IP, or to all interfaces with an empty host)", host)
	}
	if c.Advertise == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(c.Advertise)
	switch {
	case err != nil:
		return keyErr("cluster.advertise", "%q is not IP:PORT: %v", c.Advertise, err)
	case net.ParseIP(host) == nil:
		return keyErr("cluster.advertise", "host %q is not an IP address", host)
	case port == "0" || port == "":
		return keyErr("cluster.advertise", "%q needs a port other than 0", c.Advertise)
	}
	return nil
}

// fieldKeys maps engine.Options fields to their keys (and flags).
var fieldKeys = map[string]string{
	"Listen": "listen", "Loops": "loops", "ServerName": "name",
	"MaxConns": "max-conns", "MaxSubsPerConn": "max-subs", "MaxPayload": "max-payload",
	"LimitMsgs": "limit-msgs", "Replicas": "replicas", "LimitSize": "limit-size", "LimitLife": "limit-life", "TTL": "ttl",
	"MaxRetained": "max-retained", "DedupWindow": "dedup-window", "DedupIDs": "dedup-ids", "OutboundLimit": "outbound-limit", "SlowPolicy": "slow-policy",
	"PingInterval": "ping-interval", "HandshakeTimeout": "handshake-timeout", "IdleTimeout": "idle-timeout",
	"FrameTimeout": "frame-timeout",
	"PublishRate":  "publish-rate", "PublishBurst": "publish-burst", "MaxConnsPerAddr": "max-conns-per-addr", "TrustedProxies": "trusted-proxies",
	"TLSListen": "tls-listen", "TLSCertFile": "tls-cert", "TLSKeyFile": "tls-key",
	"MetricsListen": "http-listen", "WSListen": "ws-listen", "WSOrigins": "ws-origins",
	"Prefix": "prefix", "Anonymous": "anonymous", "Roles": "roles", "Credentials": "tokens",
	"Name": "name", "Publish": "publish", "Subscribe": "subscribe", "Hash": "hash", "Role": "role",
	"History": "history", "Presence": "presence", "JWT": "jwt", "Keys": "keys", "JWKS": "jwks-file",
	"Leeway": "leeway", "Grace": "grace", "MaxInfo": "max-info",
	"ChannelRules": "channel-rules", "Auth": "auth",
	"Cluster": "cluster", "Advertise": "advertise", "ClientAdvertise": "client-advertise", "Join": "join",
	"Secret": "secret", "Capacity": "capacity", "RPCTimeout": "rpc-timeout",
	"ReportInterval": "report-interval", "S2": "s2", "DataDir": "data-dir", "RaftListen": "raft-listen",
	"RaftAdvertise": "raft-advertise", "BootstrapExpect": "bootstrap-expect", "RaftTimeout": "raft-timeout",
	"NodeGoneAfter": "node-gone-after",
	"MaxMembers":    "max-members", "MaxBytes": "max-bytes", "EventsMax": "events-max",
	"OccupancyInterval": "occupancy-interval", "PublisherWindow": "publisher-window",
}

// fieldPart matches one element of an engine field path: a name and an
// optional index.
var fieldPart = regexp.MustCompile(`^([A-Za-z]+)(\[\d+\])?$`)

// KeyFor translates an engine.Options field path ("ChannelRules[1].TTL",
// "Auth.Credentials[0].Hash") to the configuration key
// ("channel-rules[1].ttl", "auth.tokens[0].hash").
func KeyFor(field string) string {
	parts := strings.Split(field, ".")
	for i, p := range parts {
		m := fieldPart.FindStringSubmatch(p)
		if m == nil {
			return field
		}
		k, ok := fieldKeys[m[1]]
		if !ok {
			return field
		}
		parts[i] = k + m[2]
	}
	return strings.Join(parts, ".")
}

// Describe rewrites an engine.OptionError so that it names the key; other
// errors are returned as they are.
func Describe(err error) error {
	var oe *engine.OptionError
	if errors.As(err, &oe) {
		// The problem may mention other fields ("longer than
		// PingInterval"): name their keys instead.
		problem := fieldWord.ReplaceAllStringFunc(oe.Problem, func(w string) string {
			if k, ok := fieldKeys[w]; ok && w != "Name" && w != "Role" && w != "Hash" && w != "Prefix" {
				return k
			}
			return w
		})
		return keyErr(KeyFor(oe.Field), "%s", problem)
	}
	return err
}

var fieldWord = regexp.MustCompile(`\b[A-Z][A-Za-z]+\b`)

// LoadAuth reads the file at path and returns its [auth] setup (nil when
// the file has none: authentication off), validated. The whole document
// must parse and have no unknown key; the other keys are not checked
// again, because only [auth] is reloaded (command-line flags may have
// completed them at start). It is what a reload (SIGHUP) installs with
// engine.Server.SetAuth.
func LoadAuth(path string) (*engine.AuthConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	s := Default()
	if err := decode(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := s.Options.Auth.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, Describe(err))
	}
	return s.Options.Auth, nil
}

// LoadCluster reads the file at path and returns its [cluster] table
// (the zero value when it has none). Like LoadAuth, the whole document
// must parse and have no unknown key, and only the table itself is
// checked (its secret's length); it is what `sluice cluster status
// --config` uses to find the secret.
func LoadCluster(path string) (engine.ClusterOptions, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return engine.ClusterOptions{}, fmt.Errorf("config: %w", err)
	}
	s := Default()
	if err := decode(b, &s); err != nil {
		return engine.ClusterOptions{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkSecret(s.Cluster.Secret); err != nil {
		return engine.ClusterOptions{}, fmt.Errorf("%s: %w", path, err)
	}
	return s.Cluster, nil
}

// checkSecret checks the length of a cluster secret ("" = none). The
// error never contains the secret.
func checkSecret(secret string) error {
	if secret != "" && len(secret) < MinClusterSecret {
		return keyErr("cluster.secret", "%d bytes; a shared secret needs at least %d", len(secret), MinClusterSecret)
	}
	return nil
}
