package metalog

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Config configures a Raft log. NewRaft reads it once.
type Config struct {
	// Node is this node's name in the cluster (its membership name).
	Node string
	// Bind is the TCP "host:port" the Raft transport listens on, a port of
	// its own; port 0 picks one (tests).
	Bind string
	// Advertise is the "host:port" other nodes dial; "" takes the bound
	// address, which must then not be unspecified (0.0.0.0 or ::).
	Advertise string
	// Secret is the cluster secret the node handshake proves on every Raft
	// connection, and from which the records' keys derive. "" proves
	// nothing: then anyone who reaches the port is a peer.
	Secret string
	// DataDir holds the write-ahead log with its metadata, which also keeps
	// raft's term and vote and the server id ("wal/"), and the snapshots
	// ("snapshots/"); it is created if missing. "" keeps everything in
	// memory: a restart starts empty, under a new server id (tests).
	DataDir string
	// BootstrapExpect is how many live members with empty logs a node waits
	// to see before the smallest-named of them starts a new cluster
	// (shouldBootstrap). Default 1.
	BootstrapExpect int
	// Logger receives the log's and hashicorp raft's messages. nil discards.
	Logger *slog.Logger
	// OnAdvert, if set, is called when this node's Advert changes (it
	// becomes Bootstrapped, once), on a goroutine of the log, never
	// concurrently with itself; it must not block (the cluster gossips the
	// new Advert from there).
	OnAdvert func(Advert)

	// Raft timing. HeartbeatTimeout: a follower without contact from a
	// leader this long (randomised up to twice as long) calls an election;
	// the leader sends heartbeats ten times as often. ElectionTimeout: a
	// candidate without a result this long tries again (>= HeartbeatTimeout).
	// LeaderLeaseTimeout: a leader that has not heard from a quorum this long
	// steps down (<= HeartbeatTimeout); an in-flight Propose fails then.
	// CommitTimeout: an idle leader sends an AppendEntries this often, so
	// followers learn the commit index of the last entries (and apply them)
	// within this long (randomised up to twice).
	HeartbeatTimeout   time.Duration // default 1 s
	ElectionTimeout    time.Duration // default 1 s
	LeaderLeaseTimeout time.Duration // default 500 ms
	CommitTimeout      time.Duration // default 10 ms
	// MaxAppendEntries bounds the entries per AppendEntries and per group
	// commit (1..1024). Default 256.
	MaxAppendEntries int

	// Snapshots keep the log bounded. A snapshot is considered every
	// SnapshotInterval (randomised up to twice) and taken when at least
	// SnapshotThreshold entries came since the last; the log then keeps
	// TrailingLogs entries before it (for followers slightly behind), and
	// SnapshotRetain snapshots are kept on disk.
	SnapshotInterval  time.Duration // default 20 s
	SnapshotThreshold uint64        // default 16384
	TrailingLogs      uint64        // default 10240
	SnapshotRetain    int           // default 2
	// SegmentSize is the size of a WAL segment file (preallocated); whole
	// segments are deleted once a snapshot covers them. Default 16 MiB.
	SegmentSize int

	// Voters. MaxVoters (odd, default 5) caps the voters (reconcile.go).
	// A voter dead for DeadAfter (per membership) loses its seat; a
	// non-voter is promoted once its log has been within MaxLag entries of
	// the leader's commit index for StableAfter. The leader reconciles the
	// configuration on every SetMembers and every ReconcileInterval.
	MaxVoters         int           // default 5
	DeadAfter         time.Duration // default 10 s
	StableAfter       time.Duration // default 3 s
	MaxLag            uint64        // default 512
	ReconcileInterval time.Duration // default 1 s

	// Transport. HandshakeTimeout bounds a connection's node handshake (and
	// an inbound one's first byte). IOTimeout bounds each RPC's I/O (raft's
	// NetworkTransport timeout; an InstallSnapshot's scales with its size).
	// MaxPool connections per peer are kept for reuse. MaxInbound bounds the
	// inbound connections (established plus handshaking), MaxHandshakes
	// the inbound handshakes in progress.
	HandshakeTimeout time.Duration // default 5 s
	IOTimeout        time.Duration // default 10 s
	MaxPool          int           // default 3
	MaxInbound       int           // default 128
	MaxHandshakes    int           // default 32

	// MaxCommand bounds a command's length. Default DefaultMaxCommand.
	MaxCommand int
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	setInt := func(d *int, v int) {
		if *d == 0 {
			*d = v
		}
	}
	setU := func(d *uint64, v uint64) {
		if *d == 0 {
			*d = v
		}
	}
	setInt(&c.BootstrapExpect, 1)
	set(&c.HeartbeatTimeout, time.Second)
	set(&c.ElectionTimeout, time.Second)
	set(&c.LeaderLeaseTimeout, 500*time.Millisecond)
	set(&c.CommitTimeout, 10*time.Millisecond)
	setInt(&c.MaxAppendEntries, 256)
	set(&c.SnapshotInterval, 20*time.Second)
	setU(&c.SnapshotThreshold, 16384)
	setU(&c.TrailingLogs, 10240)
	setInt(&c.SnapshotRetain, 2)
	setInt(&c.SegmentSize, 16<<20)
	setInt(&c.MaxVoters, 5)
	set(&c.DeadAfter, 10*time.Second)
	set(&c.StableAfter, 3*time.Second)
	setU(&c.MaxLag, 512)
	set(&c.ReconcileInterval, time.Second)
	set(&c.HandshakeTimeout, 5*time.Second)
	set(&c.IOTimeout, 10*time.Second)
	setInt(&c.MaxPool, 3)
	setInt(&c.MaxInbound, 128)
	setInt(&c.MaxHandshakes, 32)
	setInt(&c.MaxCommand, DefaultMaxCommand)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// ErrConfig is wrapped by Validate's errors.
var ErrConfig = errors.New("metalog: invalid config")

// Validate checks a configuration after defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Node == "" || len(c.Node) > 255:
		return bad("node name must be 1..255 bytes")
	case c.Bind == "":
		return bad("no bind address")
	case c.BootstrapExpect < 1:
		return bad("bootstrap-expect %d < 1", c.BootstrapExpect)
	case c.HeartbeatTimeout < 5*time.Millisecond || c.ElectionTimeout < c.HeartbeatTimeout:
		return bad("heartbeat timeout %v must be >= 5ms and <= the election timeout %v", c.HeartbeatTimeout, c.ElectionTimeout)
	case c.LeaderLeaseTimeout < 5*time.Millisecond || c.LeaderLeaseTimeout > c.HeartbeatTimeout:
		return bad("leader lease %v must be >= 5ms and <= the heartbeat timeout %v", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	case c.CommitTimeout < time.Millisecond:
		return bad("commit timeout %v < 1ms", c.CommitTimeout)
	case c.MaxAppendEntries < 1 || c.MaxAppendEntries > 1024:
		return bad("max append entries %d not in 1..1024", c.MaxAppendEntries)
	case c.SnapshotInterval < 5*time.Millisecond:
		return bad("snapshot interval %v < 5ms", c.SnapshotInterval)
	case c.SnapshotRetain < 1:
		return bad("snapshot retain %d < 1", c.SnapshotRetain)
	case c.SegmentSize < 64<<10:
		return bad("segment size %d < 64 KiB", c.SegmentSize)
	case c.MaxVoters < 1 || c.MaxVoters%2 == 0:
		return bad("max voters %d must be odd and >= 1", c.MaxVoters)
	case c.DeadAfter < 0 || c.StableAfter < 0 || c.ReconcileInterval < time.Millisecond:
		return bad("negative voter timing, or a reconcile interval under 1ms")
	case c.HandshakeTimeout <= 0 || c.IOTimeout <= 0:
		return bad("handshake and I/O timeouts must be positive")
	case c.MaxPool < 1 || c.MaxInbound < 1 || c.MaxHandshakes < 1:
		return bad("connection limits must be >= 1")
	case c.MaxCommand < 1:
		return bad("max command %d < 1", c.MaxCommand)
	}
	return nil
}
