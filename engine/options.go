package engine

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/sluice-rtm/sluice/cluster"
	"github.com/sluice-rtm/sluice/membership"
	"github.com/sluice-rtm/sluice/role"
)

// ClusterOptions makes a Server one node of a cluster (package cluster);
// the node's name is Options.ServerName.
type ClusterOptions = cluster.Options

// Status is a node's view of the cluster (`sluice cluster status`).
type Status = cluster.Status

// MemberStatus is one member in a Status.
type MemberStatus = cluster.MemberStatus

// CopyStatus is the streamlet copies of a node's manager in a Status.
type CopyStatus = cluster.CopyStatus

// SlowPolicy says what happens to a subscriber whose connection has more
// than Options.OutboundLimit bytes waiting to be written.
type SlowPolicy string

const (
	// SlowLag (the default) lets the subscriber lag behind: it leaves the
	// channel's shared live stream and reads on from retained history with
	// a cursor of its own, at the pace its connection drains, and rejoins
	// the live stream when it has caught up. It loses only what expires
	// from retention (TTL or MaxRetained) before it reads it, and gets GAP
	// expired for exactly that range. Publishers never wait for it; it
	// holds no copy of the history, only its connection's outbound bytes.
	SlowLag SlowPolicy = "lag"
	// SlowSkip drops the subscriber's backlog, sends GAP reason slow with
	// the skipped range and continues at the live edge.
	SlowSkip SlowPolicy = "skip"
	// SlowDisconnect sends ERROR SLOW_CONSUMER and closes the connection.
	SlowDisconnect SlowPolicy = "disconnect"
)

// ChannelRule overrides streamlet limits for channels whose name starts with
// Prefix. The longest matching prefix wins; zero fields inherit the server's
// value.
type ChannelRule struct {
	Prefix    string
	LimitMsgs int
	LimitSize int
	LimitLife time.Duration
	TTL       time.Duration
	// Replicas overrides Options.Replicas (0 inherits it).
	Replicas int
}

// Options configures a Server. Start a value with DefaultOptions; every
// field is checked by Validate.
type Options struct {
	// Listen is the TCP address for clients. Port 0 picks a free port;
	// Server.Addr reports the one chosen.
	Listen string
	// Loops is the number of event loops (0 = one per CPU).
	Loops int
	// ServerName is sent to clients in WELCOME.
	ServerName string

	// MaxConns caps concurrent client connections; past it a new
	// connection gets ERROR TOO_MANY_CONNECTIONS and is closed.
	MaxConns int
	// MaxSubsPerConn caps subscriptions on one connection.
	MaxSubsPerConn int
	// MaxFilters caps the distinct filter expressions (per channel) the
	// node holds compiled at once (docs/filters.md); past it a filtered
	// SUBSCRIBE gets ERROR UNAVAILABLE. A compiled filter takes about
	// 50 KB.
	MaxFilters int
	// FilterCPU is the share of one CPU each filter worker may use
	// (0 < FilterCPU <= 1; default 0.25): filters are evaluated off the
	// event loops by GOMAXPROCS/2 workers (at least one), each resting
	// after a batch so as to stay within its share. A filter that needs
	// more makes its own subscribers lag, never the others.
	FilterCPU float64
	// MaxPayload is the largest message payload accepted, in bytes.
	MaxPayload int

	// LimitMsgs, LimitSize and LimitLife close a streamlet for writes when
	// it holds LimitMsgs messages, when the next message would take it over
	// LimitSize stored bytes, or when its write lease of LimitLife ends.
	LimitMsgs int
	LimitSize int
	LimitLife time.Duration
	// TTL is how long a closed streamlet keeps serving reads before it is
	// freed (the channel's retention).
	TTL time.Duration
	// MaxRetained bounds the bytes of message history this node keeps in
	// memory: its hosted streamlets plus its gateway copies of streamlets
	// hosted elsewhere. Past it the oldest closed streamlets are expired
	// before their TTL (readers get GAP expired); open streamlets are never
	// expired, so the bound is exceeded by at most the open streamlets. 0
	// disables the bound (history is then bounded only by TTL and rate).
	MaxRetained int
	// MemoryLimit, if positive, bounds the process's memory in bytes: the
	// Go runtime's soft limit (runtime/debug.SetMemoryLimit) is kept at it
	// minus the message history resident off the Go heap (memory.go). 0
	// leaves the runtime's limit alone. sluice serve sets 1.25 x
	// MaxRetained plus a fixed overhead.
	MemoryLimit int64
	// Replicas is how many distinct nodes hold each streamlet in memory
	// (1..16, default 1; a single node holds one copy whatever the count). A publish is acknowledged once
	// every replica holds it, so a streamlet survives the death of
	// Replicas-1 of its nodes. With fewer live nodes than Replicas a new
	// streamlet gets as many replicas as there are live nodes, counted by
	// the metric sluice_streamlets_degraded_total and logged.
	Replicas int
	// ChannelRules override the limits above (and Replicas) per
	// channel-name prefix.
	ChannelRules []ChannelRule

	// DedupWindow is how long a message id is remembered (PROTOCOL.md
	// 2.14): a publish repeating an id stored in the channel less than
	// this long ago is answered with the first position and not stored.
	// It is bounded by retention: the effective window is the smaller of
	// DedupWindow and TTL (the ids live in the retained records).
	DedupWindow time.Duration
	// DedupIDs bounds the ids remembered per channel (about 40 bytes
	// each); every id of the window is kept while fewer than DedupIDs/2
	// arrive within it, past that the older half is forgotten.
	DedupIDs int

	// OutboundLimit bounds the bytes waiting to be written to one
	// connection. Past it SlowPolicy applies to live subscribers, replays
	// and lagging subscribers wait until the socket takes bytes again, and
	// a connection that still does not read is closed at twice the limit.
	// While the node's output waiting to be written exceeds half of
	// MaxRetained, the limit of every client connection is 64 KiB instead
	// (output counts against the budget and cannot be expired).
	OutboundLimit int
	SlowPolicy    SlowPolicy

	// PingInterval is advertised to clients in WELCOME. The SDK declares
	// a connection dead after two unanswered PINGs, so it also bounds how
	// long a subscriber of a paused or cut-off node waits before it moves
	// to another node: 2-3 intervals (default 5 s: 10-15 s; it was 30 s,
	// which left such subscribers waiting a minute).
	PingInterval time.Duration
	// HandshakeTimeout closes a connection that has not completed HELLO in
	// this time (for TLS clients: the TLS handshake and HELLO, each).
	HandshakeTimeout time.Duration
	// IdleTimeout closes (ERROR IDLE_TIMEOUT) a connection that sent
	// nothing for this long; after PingInterval of silence the server sends
	// it a PING, which a live client answers. 0 disables it.
	IdleTimeout time.Duration
	// FrameTimeout closes (ERROR IDLE_TIMEOUT) a connection that began a
	// frame and has not sent the rest of it this long after its first
	// byte: a client dripping a frame a byte at a time (slowloris) holds a
	// connection and a partial frame for at most this long, although every
	// byte resets the idle timer. On a WebSocket connection it bounds a
	// message (all its fragments); on a node connection a sealed record.
	// 0 disables it.
	FrameTimeout time.Duration

	// Auth enables authentication and per-channel permissions; nil accepts
	// every client and allows everything (then Listen should stay on
	// loopback: Start warns otherwise). Server.SetAuth replaces it on a
	// running server (see auth.go).
	Auth *AuthConfig
	// PublishRate limits each connection to this many publishes per second
	// on average (0 = unlimited); PublishBurst more may arrive at once. A
	// publish over the limit gets ERROR RATE_LIMITED and is dropped.
	PublishRate  float64
	PublishBurst int
	// MaxConnsPerAddr caps concurrent connections from one client IP
	// address (0 = unlimited); past it ERROR TOO_MANY_CONNECTIONS (an
	// HTTP 503 to a WebSocket upgrade). The default, DefaultMaxConnsPerAddr,
	// is above what one address can open to one port, so a proxy, a load
	// balancer or a NAT in front of the server is never refused for
	// carrying many clients, nor a load generator on loopback. Behind the
	// proxies of TrustedProxies the client address is the one they report,
	// so the limit counts real clients and may be set much lower.
	MaxConnsPerAddr int
	// TrustedProxies lists the proxies (CIDR prefixes or addresses) whose
	// word on the client address is believed (clientaddr.go): a
	// connection from one of them may start with a PROXY protocol v1 or
	// v2 header (TCP, TLS and WebSocket listeners), and its WebSocket
	// upgrade's Forwarded or X-Forwarded-For header names the client.
	// That address is the one counted by MaxConnsPerAddr and logged.
	// Headers from any other peer are ignored. Empty: none.
	TrustedProxies []string

	// TLSListen is a second client address served with TLS ("" = none).
	// The certificate comes from TLSConfig if set, else from TLSCertFile
	// and TLSKeyFile (PEM).
	TLSListen   string
	TLSCertFile string
	TLSKeyFile  string
	TLSConfig   *tls.Config

	// WSListen serves WebSocket clients on this address ("" = none): the
	// same protocol, one frame per binary message (PROTOCOL.md 10); wss://
	// when a TLS certificate is configured. WSOrigins is the Origin
	// allow-list of browser pages: exact origins or "*"; empty admits
	// pages from the host the client connects to (any port).
	WSListen  string
	WSOrigins []string

	// MetricsListen serves /metrics (Prometheus text format), /healthz
	// and /readyz over HTTP on this address ("" = none).
	MetricsListen string

	// Presence configures presence and occupancy (presence.go).
	Presence PresenceOptions

	// Cluster makes the server a node of a cluster; nil runs
	// every role for every channel in this process alone.
	Cluster *ClusterOptions

	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger

	// now replaces the clock in tests (nil = time.Now).
	now func() time.Time
	// cutPeer, in tests, cuts this node off from peers one way
	// (cluster.Config.Cut; nil = never).
	cutPeer func(peer string) bool
}

// DefaultOptions returns the defaults of BRIEF.md: limit-msgs 5,000,
// limit-size 2 MiB, limit-life 4 s, TTL 60 s, max payload 1 MiB; and a
// retention budget (MaxRetained) of 1 GiB per node.
func DefaultOptions() Options {
	return Options{
		Listen:           "127.0.0.1:7400",
		ServerName:       "sluice",
		MaxConns:         100_000,
		MaxSubsPerConn:   1024,
		MaxFilters:       1000,
		FilterCPU:        0.25,
		MaxPayload:       1 << 20,
		LimitMsgs:        5000,
		Replicas:         1,
		LimitSize:        2 << 20,
		LimitLife:        4 * time.Second,
		TTL:              60 * time.Second,
		MaxRetained:      1 << 30,
		DedupWindow:      2 * time.Minute,
		DedupIDs:         100_000,
		OutboundLimit:    8 << 20,
		SlowPolicy:       SlowLag,
		PingInterval:     5 * time.Second,
		HandshakeTimeout: 5 * time.Second,
		IdleTimeout:      90 * time.Second,
		FrameTimeout:     10 * time.Second,
		MaxConnsPerAddr:  DefaultMaxConnsPerAddr,
		PublishBurst:     1000,
		Presence:         DefaultPresenceOptions(),
	}
}

// DefaultMaxConnsPerAddr is the default per-address connection limit:
// 65,536 is more connections than one source address can open to one
// listening port (the kernel gives it at most the 64,512 source ports
// 1024-65535 towards one destination, 28,232 with Linux's default
// ip_local_port_range), so
// one proxy or NAT address in front of a listener is never refused, and
// one address still cannot take all of MaxConns' 100,000 places.
const DefaultMaxConnsPerAddr = 65536

// ErrInvalidOptions is wrapped by every error Validate returns.
var ErrInvalidOptions = errors.New("engine: invalid options")

// OptionError is the error Validate returns: Field names the Options
// field (e.g. "ChannelRules[2].TTL", "Auth.Roles[0].Publish[1]"), Problem
// says what is wrong with it. It wraps ErrInvalidOptions.
type OptionError struct {
	Field   string
	Problem string
}

// Error returns "engine: invalid options: FIELD: PROBLEM".
func (e *OptionError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrInvalidOptions, e.Field, e.Problem)
}

// Unwrap returns ErrInvalidOptions.
func (e *OptionError) Unwrap() error { return ErrInvalidOptions }

func optErr(field, format string, args ...any) error {
	return &OptionError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Validate checks every field and names the first one that is wrong.
func (o *Options) Validate() error {
	if _, _, err := net.SplitHostPort(o.Listen); err != nil {
		return optErr("Listen", "%q is not HOST:PORT: %v", o.Listen, err)
	}
	switch {
	case o.Loops < 0 || o.Loops > 1024:
		return optErr("Loops", "%d is outside 0..1024", o.Loops)
	case len(o.ServerName) > 255:
		return optErr("ServerName", "longer than 255 bytes")
	case o.MaxConns < 1:
		return optErr("MaxConns", "%d must be at least 1", o.MaxConns)
	case o.MaxSubsPerConn < 1 || o.MaxSubsPerConn > 65535:
		return optErr("MaxSubsPerConn", "%d is outside 1..65535", o.MaxSubsPerConn)
	case o.MaxFilters < 0:
		return optErr("MaxFilters", "%d is negative", o.MaxFilters)
	case !(o.FilterCPU > 0 && o.FilterCPU <= 1):
		return optErr("FilterCPU", "%v is outside (0, 1]", o.FilterCPU)
	case o.MaxPayload < 1 || o.MaxPayload > 64<<20:
		return optErr("MaxPayload", "%d is outside 1..64 MiB", o.MaxPayload)
	case o.MaxRetained < 0:
		return optErr("MaxRetained", "negative")
	case o.DedupWindow < time.Millisecond:
		return optErr("DedupWindow", "%v is below 1ms", o.DedupWindow)
	case o.DedupIDs < 1 || o.DedupIDs > 10_000_000:
		return optErr("DedupIDs", "%d is outside 1..10000000", o.DedupIDs)
	case o.OutboundLimit < 64<<10:
		return optErr("OutboundLimit", "%d is below 64 KiB", o.OutboundLimit)
	case o.SlowPolicy != SlowLag && o.SlowPolicy != SlowSkip && o.SlowPolicy != SlowDisconnect:
		return optErr("SlowPolicy", "%q is none of %q, %q, %q", o.SlowPolicy, SlowLag, SlowSkip, SlowDisconnect)
	case o.PingInterval < 0:
		return optErr("PingInterval", "negative")
	case o.HandshakeTimeout <= 0:
		return optErr("HandshakeTimeout", "must be positive")
	}
	if err := o.Presence.validate(); err != nil {
		return err
	}
	if err := o.validateSecurity(); err != nil {
		return err
	}
	if err := o.validateCluster(); err != nil {
		return err
	}
	if err := checkLimits("", o.LimitMsgs, o.LimitSize, o.LimitLife, o.TTL, o.MaxPayload); err != nil {
		return err
	}
	if err := o.checkReplicas("Replicas", o.Replicas); err != nil {
		return err
	}
	for i, r := range o.ChannelRules {
		if r.Prefix == "" {
			return optErr(fmt.Sprintf("ChannelRules[%d].Prefix", i), "empty")
		}
		if r.Replicas != 0 {
			if err := o.checkReplicas(fmt.Sprintf("ChannelRules[%d].Replicas", i), r.Replicas); err != nil {
				return err
			}
		}
		l := o.limitsFor(r.Prefix)
		if err := checkLimits(fmt.Sprintf("ChannelRules[%d].", i), l.Msgs, l.Size, l.Life, l.TTL, o.MaxPayload); err != nil {
			return err
		}
	}
	return nil
}

// MaxReplicas bounds Options.Replicas.
const MaxReplicas = 16

// checkReplicas validates a replica count: 1..MaxReplicas. (A single
// node holds one copy whatever the count; the server logs that.)
func (o *Options) checkReplicas(field string, n int) error {
	if n < 1 || n > MaxReplicas {
		return optErr(field, "%d is outside 1..%d", n, MaxReplicas)
	}
	return nil
}

func checkLimits(prefix string, msgs, size int, life, ttl time.Duration, maxPayload int) error {
	switch {
	case msgs < 1 || msgs > 1<<24:
		return optErr(prefix+"LimitMsgs", "%d is outside 1..16777216", msgs)
	case size < maxPayload+4:
		return optErr(prefix+"LimitSize", "%d cannot hold one message of MaxPayload (%d) bytes", size, maxPayload)
	case size > 1<<30:
		return optErr(prefix+"LimitSize", "%d is over 1 GiB", size)
	case life < time.Millisecond:
		return optErr(prefix+"LimitLife", "%v is under 1ms", life)
	case ttl < 0:
		return optErr(prefix+"TTL", "negative")
	}
	return nil
}

// limitsFor resolves the limits for channel name: the server's values,
// overridden field by field by the longest matching ChannelRule.
func (o *Options) limitsFor(name string) role.Limits {
	l := role.Limits{Msgs: o.LimitMsgs, Size: o.LimitSize, Life: o.LimitLife, TTL: o.TTL, Replicas: max(o.Replicas, 1)}
	best := -1
	for i, r := range o.ChannelRules {
		if strings.HasPrefix(name, r.Prefix) && (best < 0 || len(r.Prefix) > len(o.ChannelRules[best].Prefix)) {
			best = i
		}
	}
	if best >= 0 {
		r := o.ChannelRules[best]
		if r.LimitMsgs != 0 {
			l.Msgs = r.LimitMsgs
		}
		if r.LimitSize != 0 {
			l.Size = r.LimitSize
		}
		if r.LimitLife != 0 {
			l.Life = r.LimitLife
		}
		if r.TTL != 0 {
			l.TTL = r.TTL
		}
		if r.Replicas != 0 {
			l.Replicas = r.Replicas
		}
	}
	return l
}

func (o *Options) validateCluster() error {
	c := o.Cluster
	if c == nil {
		return nil
	}
	if o.ServerName == "" || len(o.ServerName) > 64 {
		return optErr("ServerName", "a cluster node needs a unique name of 1..64 bytes, got %q", o.ServerName)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return optErr("Cluster.Listen", "%q is not HOST:PORT: %v", c.Listen, err)
	}
	for i, j := range c.Join {
		if err := membership.ValidSeed(j); err != nil {
			return optErr(fmt.Sprintf("Cluster.Join[%d]", i), "%q is neither HOST:PORT nor %sNAME: %v", j, membership.SRVPrefix, err)
		}
	}
	if c.ClientAdvertise != "" {
		if _, _, err := net.SplitHostPort(c.ClientAdvertise); err != nil {
			return optErr("Cluster.ClientAdvertise", "%q is not HOST:PORT: %v", c.ClientAdvertise, err)
		}
	}
	switch {
	case c.Capacity < 0:
		return optErr("Cluster.Capacity", "negative")
	case c.BootstrapExpect < 0:
		return optErr("Cluster.BootstrapExpect", "negative")
	case c.RPCTimeout < 0 || c.ReportInterval < 0 || c.RaftTimeout < 0 || c.NodeGoneAfter < 0:
		return optErr("Cluster", "negative duration")
	case c.Secret == "" && o.Auth != nil:
		return optErr("Cluster.Secret", "required when client authentication is on: node connections bypass client permissions")
	}
	return nil
}
