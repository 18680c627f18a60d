package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-rtm/sluice/config"
	"github.com/sluice-rtm/sluice/engine"
)

const serveDescription = `
Runs a Sluice server (all roles in one process) until SIGINT or SIGTERM,
then shuts it down gracefully: clients get GOAWAY SHUTTING_DOWN, pending
output is flushed (for at most --shutdown-timeout) and the command exits 0.
A cluster node first drains (also on 'sluice cluster drain'): it takes no
new streamlets or channels, sends its clients to other nodes, and waits
until what it holds is copied to other nodes, for at most --drain-timeout;
a second SIGINT or SIGTERM cuts the drain short.
It logs (to standard error) the address it listens on.

Streamlet limits: a channel's newest streamlet stops taking writes after
--limit-msgs messages, before exceeding --limit-size bytes, or when its
write lease --limit-life ends; a closed streamlet serves reads until --ttl.
Sizes take an optional suffix: K/KiB, M/MiB, G/GiB (x1024) or KB, MB, GB
(x1000). Durations use Go syntax: 500ms, 4s, 1m30s.

Configuration file: --config FILE reads a TOML file whose top-level keys
are these flags' names (see sluice.example.toml); flags given on the
command line win. Its [auth] table sets tokens (stored as hashes, see
'sluice token') and roles with publish/subscribe channel patterns; without
it every client may do anything, so keep --listen on loopback (a warning is
logged otherwise). SIGHUP re-reads the file and installs its [auth]:
connections keep their identity, new permissions apply to their next
requests, and connections whose token was removed get ERROR
UNAUTHENTICATED and are closed.

Cluster mode: --cluster-listen IP:PORT makes the server one node of a
cluster, gossiping (TCP and UDP) on that address; --join names existing
members' gossip addresses. Every node needs a unique --node-name (default
HOSTNAME:PORT) and the same streamlet limits and cluster secret
(--cluster-secret, $SLUICE_CLUSTER_SECRET or the file's [cluster] secret,
in that order; required with [auth]). The file's [cluster] table takes the
same settings: listen, advertise, client-advertise, join, secret, capacity,
rpc-timeout, report-interval, s2, data-dir, raft-listen, raft-advertise,
bootstrap-expect, raft-timeout. Every list of streamlets is committed to an
embedded Raft log (the metadata log) kept in --data-dir; a node restarted
with its data directory keeps its identity. 'sluice cluster status' shows
the members and the log's leader and voters. Without --cluster-listen the
server is single-node and needs no data directory.`

// serveConfig is the parsed serve command line (and configuration file).
type serveConfig struct {
	opts            engine.Options // Cluster stays nil: see cluster
	level           slog.Level
	shutdownTimeout time.Duration
	drainTimeout    time.Duration
	configPath      string
	// cluster is the [cluster] table and the --cluster-* flags; cluster
	// mode is on when cluster.Listen is set.
	cluster engine.ClusterOptions
	// nameSet: the node name was given (--name, --node-name or the
	// file's name key) rather than left at its default.
	nameSet bool
}

func fromConfig(c config.Serve) serveConfig {
	return serveConfig{opts: c.Options, level: c.LogLevel, shutdownTimeout: c.ShutdownTimeout, drainTimeout: c.DrainTimeout,
		cluster: c.Cluster, nameSet: c.NameSet}
}

func (c *serveConfig) toConfig() config.Serve {
	return config.Serve{Options: c.opts, LogLevel: c.level, ShutdownTimeout: c.shutdownTimeout, DrainTimeout: c.drainTimeout,
		Cluster: c.cluster, NameSet: c.nameSet}
}

// engineOptions returns the options to start the engine with.
func (c *serveConfig) engineOptions() engine.Options {
	s := c.toConfig()
	return s.EngineOptions()
}

// bindServeFlags defines serve's flags on fs, storing into cfg. Every flag
// except --config has a key of the same name in the configuration file.
func bindServeFlags(fs *flag.FlagSet, cfg *serveConfig) {
	o := &cfg.opts
	fs.StringVar(&cfg.configPath, "config", cfg.configPath, "read settings from TOML `FILE` (flags given here win); SIGHUP reloads its [auth]")
	fs.StringVar(&o.Listen, "listen", o.Listen, "`HOST:PORT` to listen on for clients (port 0 picks a free port)")
	fs.IntVar(&o.Loops, "loops", o.Loops, "number of event loops, `N` (0 = one per CPU)")
	fs.StringVar(&o.ServerName, "name", o.ServerName, "server `NAME` sent to clients; in a cluster, the node's name (see --node-name)")
	fs.Var(quietString{&o.ServerName}, "node-name", "the node's unique `NAME` in a cluster, same as --name (default in cluster mode: HOSTNAME:PORT, PORT being --listen's)")
	fs.IntVar(&o.LimitMsgs, "limit-msgs", o.LimitMsgs, "messages per streamlet, `N`")
	fs.Var(byteSize{&o.LimitSize}, "limit-size", "stored `BYTES` per streamlet")
	fs.DurationVar(&o.LimitLife, "limit-life", o.LimitLife, "write lease of a streamlet, `DUR`")
	fs.DurationVar(&o.TTL, "ttl", o.TTL, "retention of a streamlet, `DUR`")
	fs.IntVar(&o.Replicas, "replicas", o.Replicas, "in a cluster, distinct nodes holding each streamlet, `N` (a publish is acknowledged once all hold it)")
	fs.Var(byteSize{&o.MaxRetained}, "max-retained", "message history this node keeps in memory, `BYTES`; past it the oldest closed streamlets expire early (0 = no bound)")
	fs.DurationVar(&o.DedupWindow, "dedup-window", o.DedupWindow, "how long a message id is remembered for deduplication, `DUR` (at most --ttl is used)")
	fs.IntVar(&o.DedupIDs, "dedup-ids", o.DedupIDs, "message ids remembered per channel, `N` (about 40 bytes each; the newest N/2 at least are kept)")
	fs.Var(byteSize{&o.MaxPayload}, "max-payload", "largest message payload, `BYTES`")
	fs.IntVar(&o.MaxConns, "max-conns", o.MaxConns, "concurrent client connections, `N`")
	fs.IntVar(&o.MaxConnsPerAddr, "max-conns-per-addr", o.MaxConnsPerAddr, "concurrent connections from one client IP address, `N` (0 = unlimited; the default is more than one address can open to one port, so a proxy is never refused)")
	fs.Var(&addrList{p: &o.TrustedProxies}, "trusted-proxies", "proxies whose word on the client address is believed, `CIDRS` comma-separated (10.0.0.0/8,192.0.2.7): their connections may start with a PROXY protocol v1/v2 header, and their WebSocket upgrades' Forwarded or X-Forwarded-For name the client counted by --max-conns-per-addr")
	fs.IntVar(&o.MaxSubsPerConn, "max-subs", o.MaxSubsPerConn, "subscriptions per connection, `N`")
	fs.Var(byteSize{&o.OutboundLimit}, "outbound-limit", "pending output per connection before the slow-consumer policy applies, `BYTES`")
	fs.Var(slowPolicy{&o.SlowPolicy}, "slow-policy", "what a slow subscriber gets: `lag` (read on from history, GAP expired only for what expired first), skip (GAP slow, continue live) or disconnect")
	fs.DurationVar(&o.PingInterval, "ping-interval", o.PingInterval, "PING interval advertised to clients, `DUR` (0 = none); the server PINGs a client silent this long")
	fs.DurationVar(&o.HandshakeTimeout, "handshake-timeout", o.HandshakeTimeout, "close a client that has not completed HELLO (and TLS) in `DUR`")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", o.IdleTimeout, "close a client silent for `DUR` (0 = never)")
	fs.DurationVar(&o.FrameTimeout, "frame-timeout", o.FrameTimeout, "close a connection that takes longer than `DUR` to send one frame after its first byte (0 = never)")
	fs.Float64Var(&o.PublishRate, "publish-rate", o.PublishRate, "publishes per second per connection, `RATE` (0 = unlimited)")
	fs.IntVar(&o.PublishBurst, "publish-burst", o.PublishBurst, "publishes allowed at once above --publish-rate, `N`")
	fs.StringVar(&o.TLSListen, "tls-listen", o.TLSListen, "also listen for TLS clients on `HOST:PORT`")
	fs.StringVar(&o.TLSCertFile, "tls-cert", o.TLSCertFile, "TLS certificate chain, PEM `FILE`")
	fs.StringVar(&o.TLSKeyFile, "tls-key", o.TLSKeyFile, "TLS private key, PEM `FILE`")
	fs.StringVar(&o.MetricsListen, "http-listen", o.MetricsListen, "serve the web console (/console/), /metrics, /healthz and /readyz over HTTP on `HOST:PORT`")
	fs.Var(quietString{&o.MetricsListen}, "metrics-listen", "the old name of --http-listen")
	fs.StringVar(&o.WSListen, "ws-listen", o.WSListen, "also serve WebSocket clients on `HOST:PORT` (wss:// with --tls-cert and --tls-key)")
	fs.Var(&addrList{p: &o.WSOrigins}, "ws-origins", "`ORIGINS` of browser pages allowed to connect over WebSocket, comma-separated (https://app.example.com, or * for any; default: pages of the host connected to)")
	fs.Var(logLevel{&cfg.level}, "log-level", "`LEVEL`: debug, info, warn or error")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", cfg.shutdownTimeout, "how long a graceful shutdown may take, `DUR`")
	fs.DurationVar(&cfg.drainTimeout, "drain-timeout", cfg.drainTimeout, "how long a cluster node's drain may take before it shuts down, `DUR`")
	bindPresenceFlags(fs, &o.Presence)
	bindClusterFlags(fs, &cfg.cluster)
}

// parseServe turns serve's flags into engine options (defaults from
// config.Default, then the --config file, then $SLUICE_CLUSTER_SECRET for
// the cluster secret, then the other flags) and logging settings, fills
// in a cluster node's default name, and validates the result.
func parseServe(fs *flag.FlagSet, args []string) (serveConfig, []string, error) {
	cfg := fromConfig(config.Default())
	bindServeFlags(fs, &cfg)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return cfg, nil, err
	}
	final := fs
	if cfg.configPath != "" {
		base := config.Default()
		if err := config.Load(cfg.configPath, &base); err != nil {
			return cfg, nil, err
		}
		merged := fromConfig(base)
		merged.configPath = cfg.configPath
		again := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		again.SetOutput(io.Discard)
		bindServeFlags(again, &merged)
		if _, err := parseInterspersed(again, args); err != nil {
			return cfg, nil, err
		}
		cfg, final = merged, again
	}
	given := map[string]bool{}
	final.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["name"] || given["node-name"] {
		cfg.nameSet = true
	}
	if env := os.Getenv(clusterSecretEnv); env != "" && !given["cluster-secret"] {
		if len(env) < config.MinClusterSecret {
			return cfg, nil, fmt.Errorf("$%s: %d bytes; a shared secret needs at least %d", clusterSecretEnv, len(env), config.MinClusterSecret)
		}
		cfg.cluster.Secret = env
	}
	if cfg.cluster.Listen != "" && !cfg.nameSet {
		name, err := defaultNodeName(cfg.opts.Listen)
		if err != nil {
			return cfg, nil, err
		}
		cfg.opts.ServerName = name
	}
	c := cfg.toConfig()
	if err := config.Validate(&c); err != nil {
		return cfg, nil, err
	}
	return cfg, pos, nil
}

func runServe(ctx context.Context, std stdio, args []string) int {
	fs := newFlagSet("serve", "[--config FILE] [FLAGS]", serveDescription)
	cfg, pos, err := parseServe(fs, args)
	if code, done := parseExit(fs, std, err); done {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, std, fmt.Errorf("unexpected argument %q", pos[0]))
	}
	log := slog.New(slog.NewTextHandler(std.err, &slog.HandlerOptions{Level: cfg.level}))
	opts := cfg.engineOptions()
	opts.Logger = log
	switch {
	case opts.Cluster == nil && cfg.cluster.Secret != "":
		log.Info("a cluster secret is set but cluster mode is off (no --cluster-listen); it is unused")
	case opts.Cluster != nil && opts.Cluster.Secret == "":
		log.Warn("cluster mode without a secret: gossip and node links are neither authenticated nor encrypted; set --cluster-secret, $" +
			clusterSecretEnv + " or [cluster] secret unless the network is trusted")
	}
	if limit, ok := memoryLimit(int64(opts.MaxRetained), os.Getenv("GOMEMLIMIT")); ok {
		// The engine keeps the runtime's limit at this minus the history
		// it holds off the Go heap.
		debug.SetMemoryLimit(limit)
		opts.MemoryLimit = limit
		log.Info("memory limit for the process", "bytes", limit, "max_retained", opts.MaxRetained)
	}
	srv, err := engine.Start(opts)
	if err != nil {
		log.Error("cannot start", "err", err)
		return exitFail
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	attrs := []any{"addr", srv.Addr(), "tls_addr", srv.TLSAddr(), "metrics_addr", srv.MetricsAddr(), "ws_url", srv.WSURL(), "version", version}
	if st, ok := srv.Cluster(); ok {
		attrs = append(attrs, "node", st.Node, "gossip_addr", gossipAddr(st))
	}
	log.Info("ready", attrs...)
	drainReq := srv.DrainRequested() // nil (never ready) on a single node
	asked := false                   // the drain was asked for, not signalled
	for running := true; running; {
		select {
		case <-hup:
			reloadAuth(log, srv, cfg.configPath)
		case <-ctx.Done():
			running = false
		case <-drainReq:
			log.Info("asked to drain (sluice cluster drain)")
			running, asked = false, true
		case <-srv.Done():
			log.Error("server stopped unexpectedly")
			return exitFail
		}
	}
	if _, ok := srv.Cluster(); ok {
		drain(log, srv, cfg.drainTimeout, asked)
	}
	log.Info("shutting down", "timeout", cfg.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("shutdown", "err", err)
		return exitFail
	}
	log.Info("stopped")
	return exitOK
}

// drain drains a cluster node (engine.Server.Drain) for at most timeout;
// a further SIGINT or SIGTERM cuts it short. When the drain was asked for
// (asked: 'sluice cluster drain', such as a Kubernetes preStop hook runs)
// rather than signalled, the first signal is the one that would have
// started it (Kubernetes sends SIGTERM once the hook returned) and only
// the second cuts it short.
func drain(log *slog.Logger, srv *engine.Server, timeout time.Duration, asked bool) {
	term := make(chan os.Signal, 1)
	signal.Notify(term, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(term)
	log.Info("draining", "timeout", timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cut := make(chan struct{})
	go func() { // ends with the drain (cancel)
		defer close(cut)
		if asked {
			select {
			case <-term:
				log.Info("signal received while draining: the drain goes on (a second signal cuts it short)")
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-term:
			log.Warn("signal received again: the drain is cut short")
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := srv.Drain(ctx); err != nil {
		log.Warn("the drain did not complete", "err", err)
	}
	cancel()
	<-cut
}

// reloadAuth installs the [auth] section of the configuration file at
// path on srv (SIGHUP). A file that does not load leaves the current setup
// in place. It returns whether the new setup was installed.
func reloadAuth(log *slog.Logger, srv *engine.Server, path string) bool {
	if path == "" {
		log.Warn("SIGHUP ignored: the server was started without --config")
		return false
	}
	a, err := config.LoadAuth(path)
	if err == nil {
		err = srv.SetAuth(a)
	}
	if err != nil {
		log.Error("reload failed; keeping the current auth setup", "config", path, "err", err)
		return false
	}
	log.Info("reloaded auth", "config", path)
	return true
}

// byteSize is a flag.Value for a size in bytes with an optional unit.
type byteSize struct{ p *int }

func (b byteSize) String() string {
	if b.p == nil {
		return ""
	}
	return strconv.Itoa(*b.p)
}

func (b byteSize) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*b.p = n
	return nil
}

// parseSize parses "123", "2MiB", "512K", "1.5MB" (see config.ParseSize).
func parseSize(s string) (int, error) { return config.ParseSize(s) }

// quietString is a flag.Value for a string whose usage text shows no
// default: a second name of a flag (--node-name), or a secret, which must
// never be printed.
type quietString struct{ p *string }

func (q quietString) String() string { return "" }

func (q quietString) Set(v string) error {
	*q.p = v
	return nil
}

// slowPolicy is a flag.Value for engine.SlowPolicy.
type slowPolicy struct{ p *engine.SlowPolicy }

func (s slowPolicy) String() string {
	if s.p == nil {
		return ""
	}
	return string(*s.p)
}

func (s slowPolicy) Set(v string) error {
	switch p := engine.SlowPolicy(v); p {
	case engine.SlowLag, engine.SlowSkip, engine.SlowDisconnect:
		*s.p = p
		return nil
	}
	return fmt.Errorf("slow policy %q is none of %q, %q, %q", v, engine.SlowLag, engine.SlowSkip, engine.SlowDisconnect)
}

// logLevel is a flag.Value for slog.Level.
type logLevel struct{ p *slog.Level }

func (l logLevel) String() string {
	if l.p == nil {
		return ""
	}
	return strings.ToLower(l.p.String())
}

func (l logLevel) Set(v string) error { return l.p.UnmarshalText([]byte(v)) }

// memFixedOverhead is what a node needs beside its message history and
// pending output: the runtime, connections, channel state, the loops'
// buffers (BENCHMARKS.md measures it).
const memFixedOverhead = 128 << 20

// memoryLimit returns the memory limit `sluice serve` gives the process
// (engine.Options.MemoryLimit: the engine sets the Go runtime's soft limit,
// runtime/debug.SetMemoryLimit, to it minus the history it holds off the
// heap): 1.25 x --max-retained, which covers history and pending output
// (engine.Options.MaxRetained), plus memFixedOverhead. Without it the
// collector lets the heap grow to twice what is live, so a 64 MiB budget
// reached 225 MiB of RSS. None when the budget is off or $GOMEMLIMIT
// already sets one.
func memoryLimit(maxRetained int64, env string) (int64, bool) {
	if maxRetained <= 0 || env != "" {
		return 0, false
	}
	return maxRetained + maxRetained/4 + memFixedOverhead, true
}
