package membership

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Timing defaults. memberlist's LAN profile probes every 1 s and suspects for
// 4*log10(n) probe intervals, which takes 5-10 s to declare a killed node
// dead; Sluice wants its grants moved within about 3 s on a LAN, so probes are
// twice as frequent and suspicion is shorter. With these values a killed node
// is probed within ~0.5 s, fails its direct, indirect and TCP pings within
// ~0.5 s more, and is declared dead after a suspicion timeout of
// SuspicionMult*max(1, log10(n))*ProbeInterval (1 s up to 10 nodes, 2 s at
// 100). The price is more probe traffic: one UDP ping per node per 0.5 s.
const (
	DefaultProbeInterval  = 500 * time.Millisecond
	DefaultProbeTimeout   = 250 * time.Millisecond
	DefaultGossipInterval = 100 * time.Millisecond
	DefaultSuspicionMult  = 2
	DefaultJoinRetry      = time.Second
	// DefaultRejoinInterval is how often a joined node whose seeds include
	// a DNS name resolves them again and joins the addresses that are no
	// live member (seeds.go).
	DefaultRejoinInterval = 10 * time.Second
	// DefaultBroadcastTimeout bounds UpdateMeta and Leave when they are given
	// a non-positive timeout (memberlist would otherwise wait forever).
	DefaultBroadcastTimeout = 5 * time.Second
)

// deadNodeReclaimTime is how long after a node is declared dead another
// incarnation may take over its name from a different address. memberlist's
// default (0) never allows it, which locks a node restarted on a new address
// out until the dead entry is reaped (GossipToTheDeadTime, 30 s). A dead name
// is free by definition: the cluster already gave up on its holder, and a
// holder that comes back on its old address refutes as usual. So the wait is
// kept minimal, and a restart is accepted as soon as its join reaches a peer.
const deadNodeReclaimTime = time.Millisecond

// pushPullInterval is how often a node exchanges its full state with a
// random peer (memberlist scales it up beyond 32 nodes). memberlist's LAN
// default is 30 s; a node restarted on a new address before the others
// declared its old incarnation dead is only accepted at such an exchange after
// the death, since its join and refutation are rejected as an address
// conflict while the old incarnation still counts as alive. 5 s bounds that
// rejoin delay; the cost is one small TCP exchange per node every 5 s.
const pushPullInterval = 5 * time.Second

// tcpTimeout bounds each TCP exchange (join, push/pull, fallback ping);
// memberlist's LAN default of 10 s would make Start hang that long per
// black-holed seed.
const tcpTimeout = 3 * time.Second

// Config configures a member. Start reads it once; the functions it holds
// are kept and called for the Node's whole life (see each field for where).
type Config struct {
	// Name is the unique node name: 1..NameMax bytes.
	Name string
	// BindAddr is the "host:port" gossip listens on, TCP and UDP; the host
	// must be an IP literal or empty (all interfaces); port 0 picks a free
	// port (read it back with Node.Addr).
	BindAddr string
	// AdvertiseAddr is the "host:port" (IP literal, port > 0) other nodes
	// use to reach this one; empty: the bound address.
	AdvertiseAddr string
	// Join lists the seeds: "IP:PORT", "HOST:PORT" (every A/AAAA record of
	// HOST) or "dnssrv+NAME" (every SRV record of NAME), resolved again at
	// each attempt; empty for the first node. See seeds.go.
	Join []string
	// Resolver resolves the seeds that are names (nil: net.DefaultResolver).
	// It is called from the joiner's goroutine and from Start.
	Resolver Resolver
	// Secret, when set, encrypts and authenticates gossip with the AES-256
	// key SHA-256(Secret). Nodes with different secrets cannot talk.
	Secret []byte
	// Meta returns this node's metadata, at most MetaMax bytes. It is called
	// by Start and UpdateMeta only (the result is cached for memberlist), and
	// must be safe to call from any goroutine. Nil: no metadata.
	Meta func() []byte
	// OnChange, if set, is called for every join, leave/death and metadata
	// update, including this node's own, on memberlist's goroutines, one
	// call at a time, while memberlist holds its node lock: it must not
	// block, and must not call Join, UpdateMeta, Leave or Shutdown (Members
	// and All are fine). The first call, this node's own EventJoin, happens
	// inside Start.
	OnChange func(Event)
	// Logger receives memberlist's log lines at Debug level and this
	// package's own messages. Nil: discard.
	Logger *slog.Logger

	// Timing; zero takes the Default* constants above.
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	GossipInterval time.Duration
	SuspicionMult  int
	// JoinRetry is how often the background joiner retries the seeds when
	// Start could reach none of them.
	JoinRetry time.Duration
	// RejoinInterval is how often a joined node with DNS seeds looks for
	// members it does not know yet (zero: DefaultRejoinInterval).
	RejoinInterval time.Duration
}

// Node is a running cluster member. All methods are safe for concurrent use
// from any goroutine, except from inside Config.OnChange (see there).
type Node struct {
	name   string
	addr   string // bound gossip address
	ml     *memberlist.Memberlist
	d      *delegate
	log    *slog.Logger
	retry  time.Duration
	rejoin time.Duration

	// Seed resolution (seeds.go); set by Start, read-only after.
	seeds    []string
	resolver Resolver
	self     func(netip.AddrPort) bool

	metaFn func() []byte
	metaMu sync.Mutex // serialises UpdateMeta: read, validate, store, gossip

	// life guards the lifecycle. Leave and UpdateMeta hold it shared while
	// they call memberlist (whose Leave panics after Shutdown); Shutdown
	// takes it exclusively. Both calls are bounded by their timeout. Leave
	// sets d.left (first, under leaveMu), which also closes UpdateMeta and
	// Join.
	life    sync.RWMutex
	closed  bool // Shutdown was called (guarded by life)
	leaveMu sync.Mutex

	stop       chan struct{} // closed by Shutdown; stops the joiner
	joinerDone chan struct{} // closed when the joiner exits (or was never started)
}

// Start validates cfg, binds the gossip sockets and joins the seeds it can
// reach. If cfg.Join is non-empty and no other member could be reached (the
// seeds may include this node itself), Start still succeeds (this may be the
// first node up) and a background goroutine retries the seeds every
// JoinRetry until this node knows another live member or Shutdown is called. Errors wrap
// ErrInvalidConfig, ErrMetaTooLarge, or the bind failure.
func Start(cfg Config) (*Node, error) {
	mc, bindHost, err := cfg.memberlistConfig()
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	mc.Logger = log.New(slogWriter{logger}, "", 0)

	n := &Node{
		name:       cfg.Name,
		log:        logger,
		retry:      cfg.JoinRetry,
		metaFn:     cfg.Meta,
		stop:       make(chan struct{}),
		joinerDone: make(chan struct{}),
	}
	if n.retry == 0 {
		n.retry = DefaultJoinRetry
	}
	n.rejoin = orDefault(cfg.RejoinInterval, DefaultRejoinInterval)
	n.seeds = append([]string(nil), cfg.Join...)
	n.resolver = cfg.Resolver
	if n.resolver == nil {
		n.resolver = net.DefaultResolver
	}
	n.d = &delegate{name: cfg.Name, tab: newTable(), onChange: cfg.OnChange}
	n.d.bcast.RetransmitMult = mc.RetransmitMult
	n.d.bcast.NumNodes = n.d.tab.liveCount
	if err := n.loadMeta(); err != nil {
		return nil, err
	}
	mc.Delegate = n.d
	mc.Events = n.d

	// The transport is built here rather than by memberlist, which, given
	// port 0, would also overwrite the configured advertise port.
	nt, err := listen(mc)
	if err != nil {
		return nil, fmt.Errorf("membership: start %q on %s: %w", cfg.Name, cfg.BindAddr, err)
	}
	mc.Transport = nt
	mc.BindPort = nt.GetAutoBindPort()
	if mc.AdvertiseAddr == "" {
		mc.AdvertisePort = mc.BindPort
	}
	n.addr = net.JoinHostPort(bindHost, strconv.Itoa(mc.BindPort))
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = nt.Shutdown() // no-op if Create already shut it down
		return nil, fmt.Errorf("membership: start %q on %s: %w", cfg.Name, cfg.BindAddr, err)
	}
	n.ml = ml

	local := ml.LocalNode()
	adv, _ := netip.AddrFromSlice(local.Addr)
	n.self = selfMatcher(netip.AddrPortFrom(adv.Unmap(), local.Port), mc.BindAddr == "0.0.0.0" || mc.BindAddr == "::", localAddrs())
	if len(n.seeds) > 0 {
		// A seed list shared by all nodes usually names this node too;
		// its own address is skipped, and success is judged by the
		// members known afterwards, not by the contact count.
		k, err := n.joinSeeds()
		if !n.joined() {
			logger.Info("membership: no other member reachable, retrying in background",
				"seeds", n.seeds, "contacted", k, "every", n.retry, "err", err)
		}
		if !n.joined() || seedsNeedDNS(n.seeds) {
			go n.joiner()
			return n, nil
		}
	}
	close(n.joinerDone)
	return n, nil
}

// joined reports whether this node knows another live member.
func (n *Node) joined() bool { return n.d.tab.liveCount() > 1 }

// joinSeeds resolves the seeds and contacts each address that is neither
// this node nor a live member, one at a time (Shutdown waits for at most
// one contact); it returns how many answered.
func (n *Node) joinSeeds() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), tcpTimeout)
	addrs, rerr := resolveSeeds(ctx, n.resolver, n.seeds, n.self)
	cancel()
	known := map[string]bool{}
	for _, m := range n.d.tab.snapshot(true) {
		known[m.Addr] = true
	}
	k := 0
	var errs []error
	for _, a := range addrs {
		if known[a] {
			continue
		}
		select {
		case <-n.stop:
			return k, errors.Join(rerr, ErrClosed)
		default:
		}
		if n.d.left.Load() {
			return k, errors.Join(rerr, ErrClosed)
		}
		if c, err := n.ml.Join([]string{a}); err != nil {
			errs = append(errs, err)
		} else {
			k += c
		}
	}
	return k, errors.Join(rerr, errors.Join(errs...))
}

// joiner retries the seeds every n.retry until this node knows another
// live member (through its own join or because another node joined it);
// with DNS seeds it then goes on every n.rejoin, joining the addresses
// the names answer that are no live member. It ends with Shutdown or
// Leave.
func (n *Node) joiner() {
	defer close(n.joinerDone)
	dns := seedsNeedDNS(n.seeds)
	wait := time.NewTimer(n.retry)
	defer wait.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-wait.C:
		}
		if n.d.left.Load() || (n.joined() && !dns) {
			return
		}
		was := n.joined()
		if k, err := n.joinSeeds(); k > 0 && n.joined() && !was {
			n.log.Info("membership: joined cluster", "contacted", k)
		} else if err != nil {
			n.log.Debug("membership: joining seeds", "seeds", n.seeds, "contacted", k, "err", err)
		}
		if n.joined() {
			wait.Reset(n.rejoin)
		} else {
			wait.Reset(n.retry)
		}
	}
}

// listen binds the TCP and UDP gossip sockets. With port 0 the kernel picks
// the TCP port and UDP may find it taken, so that case is retried a few times.
func listen(mc *memberlist.Config) (*memberlist.NetTransport, error) {
	tc := &memberlist.NetTransportConfig{
		BindAddrs: []string{mc.BindAddr},
		BindPort:  mc.BindPort,
		Logger:    mc.Logger,
	}
	attempts := 1
	if mc.BindPort == 0 {
		attempts = 10
	}
	var err error
	for range attempts {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(tc); err == nil {
			return nt, nil
		}
	}
	return nil, err
}

// memberlistConfig validates c and translates it; it returns the bind host
// for Node.Addr.
func (c *Config) memberlistConfig() (*memberlist.Config, string, error) {
	if c.Name == "" || len(c.Name) > NameMax {
		return nil, "", fmt.Errorf("%w: name %q must be 1..%d bytes", ErrInvalidConfig, c.Name, NameMax)
	}
	bindHost, bindPort, err := splitAddr(c.BindAddr, true)
	if err != nil {
		return nil, "", fmt.Errorf("%w: bind address: %w", ErrInvalidConfig, err)
	}
	for _, seed := range c.Join {
		if err := ValidSeed(seed); err != nil {
			return nil, "", fmt.Errorf("%w: seed: %w", ErrInvalidConfig, err)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"probe interval", c.ProbeInterval}, {"probe timeout", c.ProbeTimeout},
		{"gossip interval", c.GossipInterval}, {"join retry", c.JoinRetry}, {"rejoin interval", c.RejoinInterval}} {
		if d.v < 0 {
			return nil, "", fmt.Errorf("%w: negative %s %v", ErrInvalidConfig, d.name, d.v)
		}
	}
	if c.SuspicionMult < 0 {
		return nil, "", fmt.Errorf("%w: negative suspicion multiplier %d", ErrInvalidConfig, c.SuspicionMult)
	}

	mc := memberlist.DefaultLANConfig()
	mc.Name = c.Name
	mc.BindAddr = bindHost
	if bindHost == "" {
		mc.BindAddr = "0.0.0.0"
		bindHost = "0.0.0.0"
	}
	mc.BindPort = bindPort
	mc.AdvertiseAddr, mc.AdvertisePort = "", bindPort
	if c.AdvertiseAddr != "" {
		host, port, err := splitAddr(c.AdvertiseAddr, false)
		if err != nil {
			return nil, "", fmt.Errorf("%w: advertise address: %w", ErrInvalidConfig, err)
		}
		mc.AdvertiseAddr, mc.AdvertisePort = host, port
	}
	mc.ProbeInterval = orDefault(c.ProbeInterval, DefaultProbeInterval)
	mc.ProbeTimeout = orDefault(c.ProbeTimeout, DefaultProbeTimeout)
	mc.GossipInterval = orDefault(c.GossipInterval, DefaultGossipInterval)
	mc.SuspicionMult = c.SuspicionMult
	if mc.SuspicionMult == 0 {
		mc.SuspicionMult = DefaultSuspicionMult
	}
	if mc.ProbeTimeout >= mc.ProbeInterval {
		return nil, "", fmt.Errorf("%w: probe timeout %v must be below probe interval %v",
			ErrInvalidConfig, mc.ProbeTimeout, mc.ProbeInterval)
	}
	mc.DeadNodeReclaimTime = deadNodeReclaimTime
	mc.TCPTimeout = tcpTimeout
	mc.PushPullInterval = pushPullInterval
	if len(c.Secret) > 0 {
		key := sha256.Sum256(c.Secret)
		mc.SecretKey = key[:]
	}
	return mc, bindHost, nil
}

func orDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// splitAddr parses "host:port" with an IP-literal (or, if bind, empty) host.
func splitAddr(s string, bind bool) (string, int, error) {
	host, ps, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 || (!bind && port == 0) {
		return "", 0, fmt.Errorf("bad port in %q", s)
	}
	if host == "" && bind {
		return "", port, nil
	}
	if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("host in %q is not an IP address", s)
	}
	return host, port, nil
}

// loadMeta calls the Meta function, validates and caches the result for the
// delegate.
func (n *Node) loadMeta() error {
	var meta []byte
	if n.metaFn != nil {
		meta = n.metaFn()
	}
	if len(meta) > MetaMax {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrMetaTooLarge, len(meta), MetaMax)
	}
	meta = append([]byte(nil), meta...) // the caller may reuse its buffer
	n.d.meta.Store(&meta)
	return nil
}

// Name returns the node name. Safe from any goroutine.
func (n *Node) Name() string { return n.name }

// Addr returns the bound gossip address "host:port", with the actual port
// when BindAddr asked for port 0. Safe from any goroutine.
func (n *Node) Addr() string { return n.addr }

// Members returns every member currently Alive or Suspect, this node
// included, sorted by Name. The slice and its members are fresh copies owned
// by the caller. Safe from any goroutine, including OnChange.
func (n *Node) Members() []Member { return n.d.tab.snapshot(true) }

// All returns every member this node knows, including Dead and Left ones
// (the most recent departures, up to a bound), sorted by Name. The slice is
// owned by the caller. Safe from any goroutine, including OnChange.
func (n *Node) All() []Member { return n.d.tab.snapshot(false) }

// UpdateMeta calls Config.Meta again and gossips the result. When other
// members are alive it waits until memberlist has finished retransmitting the
// update (RetransmitMult*ceil(log10(n+1)) gossip rounds: ~0.4 s below 10
// nodes with the defaults), at most timeout (non-positive:
// DefaultBroadcastTimeout), so call it off latency-critical goroutines; on timeout it returns an error wrapping ErrTimeout
// and the update still propagates. Oversized metadata returns an error
// wrapping ErrMetaTooLarge and keeps the previous metadata. After Leave or
// Shutdown it returns ErrClosed.
func (n *Node) UpdateMeta(timeout time.Duration) error {
	n.life.RLock()
	defer n.life.RUnlock()
	if n.closed || n.d.left.Load() {
		return fmt.Errorf("membership: update meta of %q: %w", n.name, ErrClosed)
	}
	n.metaMu.Lock()
	defer n.metaMu.Unlock()
	if err := n.loadMeta(); err != nil {
		return fmt.Errorf("membership: update meta of %q: %w", n.name, err)
	}
	if err := n.ml.UpdateNode(orDefault(max(timeout, 0), DefaultBroadcastTimeout)); err != nil {
		return fmt.Errorf("membership: update meta of %q: %w: %v", n.name, ErrTimeout, err)
	}
	return nil
}

// Join contacts the given "host:port" addresses and merges state with each
// one that answers, returning how many answered. If none did the error wraps
// ErrNoSeedReachable. After Leave or Shutdown it returns ErrClosed. It may
// take up to a few seconds per unreachable address.
func (n *Node) Join(addrs []string) (int, error) {
	n.life.RLock()
	closed := n.closed || n.d.left.Load()
	n.life.RUnlock()
	if closed {
		return 0, fmt.Errorf("membership: join from %q: %w", n.name, ErrClosed)
	}
	if len(addrs) == 0 {
		return 0, nil
	}
	k, err := n.ml.Join(addrs)
	if k == 0 {
		return 0, fmt.Errorf("membership: join %v from %q: %w: %w", addrs, n.name, ErrNoSeedReachable, err)
	}
	return k, nil
}

// Leave announces a graceful departure, so other nodes report this one as
// Left at once instead of detecting its death by probing. It waits at most
// timeout (non-positive: DefaultBroadcastTimeout) for the announcement to go
// out; on timeout it returns an error wrapping ErrTimeout. The node keeps its
// sockets open until Shutdown, which should follow. Leave is idempotent;
// after Shutdown it returns ErrClosed.
func (n *Node) Leave(timeout time.Duration) error {
	n.leaveMu.Lock()
	defer n.leaveMu.Unlock()
	n.life.RLock()
	defer n.life.RUnlock()
	if n.closed {
		return fmt.Errorf("membership: leave %q: %w", n.name, ErrClosed)
	}
	if n.d.left.Load() {
		return nil
	}
	n.d.left.Store(true)
	deadline := time.Now().Add(orDefault(max(timeout, 0), DefaultBroadcastTimeout))

	// Announce first and let the announcement finish its retransmissions, so
	// most peers learn "leaving" before memberlist's departure notice.
	if n.otherLive() {
		b := &leavingBroadcast{msg: append([]byte{msgLeaving}, n.name...), finished: make(chan struct{})}
		n.d.bcast.QueueBroadcast(b)
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-b.finished:
		case <-t.C:
		}
		t.Stop()
	}
	if err := n.ml.Leave(max(time.Until(deadline), time.Millisecond)); err != nil {
		return fmt.Errorf("membership: leave %q: %w: %v", n.name, ErrTimeout, err)
	}
	return nil
}

// otherLive reports whether the table has a live member besides this node.
func (n *Node) otherLive() bool {
	for _, m := range n.d.tab.snapshot(true) {
		if !m.Local {
			return true
		}
	}
	return false
}

// Shutdown stops gossip, closes the sockets and stops the background joiner,
// without announcing anything: other nodes detect the death by probing (call
// Leave first for a graceful exit). It waits for an in-flight Leave or
// UpdateMeta (bounded by their timeouts) and for the joiner's current attempt.
// Idempotent; safe from any goroutine except OnChange.
func (n *Node) Shutdown() error {
	n.life.Lock()
	if n.closed {
		n.life.Unlock()
		return nil
	}
	n.closed = true
	close(n.stop)
	n.life.Unlock()
	<-n.joinerDone
	if err := n.ml.Shutdown(); err != nil {
		return fmt.Errorf("membership: shutdown %q: %w", n.name, err)
	}
	return nil
}
