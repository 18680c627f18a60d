package metalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"

	"github.com/sluice-rtm/sluice/internal/owned"
)

// Raft is the Log of a cluster, on hashicorp/raft. Create it with NewRaft;
// feed it the membership with SetMembers; gossip its Advert.
//
// Goroutines of its own (counted by Running, waited for by Shutdown): the
// leadership watcher, the reconcile loop (bootstrap, then the voters when
// leader), and the stream layer's accept loop and inbound handshakes.
// hashicorp raft runs its own, also ended by Shutdown.
type Raft struct {
	cfg    Config
	id     string // this server's id
	addr   string // this server's Raft address: host:port/id
	log    *slog.Logger
	raft   *raft.Raft
	stream *streamLayer
	peers  *peerTracker
	stores stores
	obs    *raft.Observer
	obsCh  chan raft.Observation

	// ops guards every wait for raft's answer against shutdown (op);
	// opsDown is set, under its write lock, before raft shuts down.
	ops     sync.RWMutex
	opsDown bool

	changed chan struct{} // LeadershipChanged, one slot
	kick    chan struct{} // wakes the reconcile loop, one slot
	stop    chan struct{} // closed by Shutdown
	g       owned.Count
	wg      sync.WaitGroup

	lmu        sync.Mutex
	leadership Leadership

	mmu        sync.Mutex
	members    []Member
	membersSet bool
	addrs      map[string]string // server id -> Raft address, from the members' adverts
	cfgAddrs   map[string]string // server id -> Raft address, from the configuration

	// Test counters: reconcile rounds run, bootstraps done.
	rounds, bootstraps atomic.Int64

	hasState atomic.Bool // this node holds Raft state: bootstrapped, restarted or replicated to

	downOnce sync.Once
	downErr  error
}

// stores are raft's log, stable and snapshot stores.
type stores struct {
	logs   raft.LogStore
	stable raft.StableStore
	snaps  raft.SnapshotStore
	close  func() error
}

// openStores opens the stores in cfg.DataDir (the WAL in "wal/", its
// metadata and the stable store in "wal/wal-meta.db", snapshots in
// "snapshots/"), or in memory when it is "".
func openStores(cfg Config) (stores, error) {
	if cfg.DataDir == "" {
		m := raft.NewInmemStore()
		return stores{logs: m, stable: m, snaps: raft.NewInmemSnapshotStore(), close: func() error { return nil }}, nil
	}
	walDir := filepath.Join(cfg.DataDir, "wal")
	if err := os.MkdirAll(walDir, 0o700); err != nil {
		return stores{}, fmt.Errorf("metalog: data directory: %w", err)
	}
	w, err := wal.Open(walDir, wal.WithSegmentSize(cfg.SegmentSize), wal.WithLogger(newHCLog(cfg.Logger, "raft-wal")))
	if err != nil {
		return stores{}, fmt.Errorf("metalog: opening the log in %s: %w", walDir, err)
	}
	// The WAL's metadata database is locked now: no other process uses
	// the directory, and no snapshot of this one is being written.
	if err := removePartialSnapshots(filepath.Join(cfg.DataDir, snapshotsDir)); err != nil {
		_ = w.Close()
		return stores{}, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, cfg.SnapshotRetain, newHCLog(cfg.Logger, "raft-snapshot"))
	if err != nil {
		_ = w.Close()
		return stores{}, fmt.Errorf("metalog: snapshot store: %w", err)
	}
	// The leader sends every entry it just wrote to the followers: the
	// cache serves those from memory, where the WAL read each back from
	// its file (a pread per entry: a tenth of the leader's CPU at 1,300
	// changes/s, BENCHMARKS.md).
	logs, err := raft.NewLogCache(logCacheEntries(cfg), w)
	if err != nil {
		_ = w.Close()
		return stores{}, fmt.Errorf("metalog: log cache: %w", err)
	}
	return stores{logs: logs, stable: w, snaps: snaps, close: w.Close}, nil
}

// logCacheEntries is how many of the newest entries the log cache keeps:
// two full AppendEntries (as Consul keeps 512 at its 256 per append).
func logCacheEntries(cfg Config) int { return 2 * cfg.MaxAppendEntries }

// snapshotsDir is where raft's file snapshot store keeps its snapshots,
// under the data directory: one directory each, named term-index-time,
// with a ".tmp" suffix while it is written (taken here or installed from
// the leader).
const snapshotsDir = "snapshots"

// removePartialSnapshots removes the snapshots a crash left half written
// in dir. raft's store skips them but never removes them (it reaps only
// complete snapshots beyond SnapshotRetain), so each kill during a
// snapshot's write or install would leave one behind for good: with
// 100,000 channels about 42 MB each.
func removePartialSnapshots(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("metalog: snapshot directory: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasSuffix(e.Name(), ".tmp") {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("metalog: removing a partial snapshot: %w", err)
			}
		}
	}
	return nil
}

// NewRaft starts this node's Raft log over fsm: it opens the stores, takes
// or draws the server id, listens on cfg.Bind, and starts raft. A node
// with state (a restart) rejoins its cluster at once; a node with an empty
// log waits for SetMembers and then bootstraps a cluster or is added by a
// leader (shouldBootstrap).
func NewRaft(cfg Config, fsm FSM) (*Raft, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if len(cfg.Node) > MaxNodeName {
		return nil, fmt.Errorf("%w: node name longer than %d bytes", ErrConfig, MaxNodeName)
	}
	st, err := openStores(cfg)
	if err != nil {
		return nil, err
	}
	r, err := start(cfg, fsm, st)
	if err != nil {
		_ = st.close()
		return nil, err
	}
	return r, nil
}

// start does NewRaft's work once the stores are open.
func start(cfg Config, fsm FSM, st stores) (*Raft, error) {
	id, created, err := loadIdentity(st.stable, cfg.Node)
	if err != nil {
		return nil, err
	}
	hasState, err := raft.HasExistingState(st.logs, st.stable, st.snaps)
	if err != nil {
		return nil, fmt.Errorf("metalog: reading the stores: %w", err)
	}
	if created && hasState {
		return nil, fmt.Errorf("%w: the stores hold a log but no server id", ErrIdentity)
	}
	ln, err := net.Listen("tcp", cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("metalog: listen: %w", err)
	}
	hostport, err := advertised(cfg.Advertise, ln.Addr())
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	r := &Raft{
		cfg: cfg, id: id, addr: raftAddress(hostport, id), log: cfg.Logger, peers: newPeerTracker(), stores: st,
		obsCh: make(chan raft.Observation, 16), changed: make(chan struct{}, 1), kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
	}
	r.hasState.Store(hasState)
	r.stream = newStreamLayer(ln, streamOptions{
		self: id, secret: cfg.Secret, adv: addr(r.addr), hsTimeout: cfg.HandshakeTimeout,
		maxInbound: cfg.MaxInbound, maxHandshakes: cfg.MaxHandshakes, log: cfg.Logger,
	})
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: r.stream, MaxPool: cfg.MaxPool, Timeout: cfg.IOTimeout, Logger: newHCLog(cfg.Logger, "raft-net"),
		ServerAddressProvider: addressBook{r},
	})
	trans := &progressTransport{NetworkTransport: nt, peers: r.peers, now: time.Now}
	r.raft, err = raft.NewRaft(raftConfig(cfg, id), &fsmAdapter{fsm: fsm}, st.logs, st.stable, st.snaps, trans)
	if err != nil {
		_ = nt.Close()
		r.stream.wait()
		return nil, fmt.Errorf("metalog: starting raft: %w", err)
	}
	r.obs = raft.NewObserver(r.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	r.raft.RegisterObserver(r.obs)
	r.refreshLeadership()
	signal(r.changed) // the initial state, whatever it is
	signal(r.kick)
	r.wg.Add(2)
	r.g.Go(r.watchLeadership, r.wg.Done)
	r.g.Go(r.reconcileLoop, r.wg.Done)
	r.log.Info("metalog: raft started", "server", id, "addr", r.addr, "state", hasState, "data-dir", cfg.DataDir)
	return r, nil
}

// advertised returns the host:port to advertise: adv, or the bound address
// if it is dialable.
func advertised(adv string, bound net.Addr) (string, error) {
	if adv == "" {
		adv = bound.String()
	}
	host, port, err := net.SplitHostPort(adv)
	if err != nil {
		return "", fmt.Errorf("%w: advertise address %q: %v", ErrConfig, adv, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() || port == "0" {
		return "", fmt.Errorf("%w: advertise address %q cannot be dialed; set Advertise", ErrConfig, adv)
	}
	return adv, nil
}

// raftConfig returns hashicorp raft's configuration for cfg.
func raftConfig(cfg Config, id string) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.MaxAppendEntries = cfg.MaxAppendEntries
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	// A removed server stays up: it may be added back (a dead voter that
	// returns with its log comes back as a non-voter).
	rc.ShutdownOnRemove = false
	rc.NoLegacyTelemetry = true
	rc.Logger = newHCLog(cfg.Logger, "raft")
	return rc
}

// Propose implements Log.
func (r *Raft) Propose(ctx context.Context, cmd []byte) ([]byte, uint64, error) {
	timeout, err := r.enqueueTimeout(ctx)
	if err != nil {
		return nil, 0, err
	}
	if len(cmd) > r.cfg.MaxCommand {
		return nil, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(cmd), r.cfg.MaxCommand)
	}
	if r.raft.State() != raft.Leader {
		return nil, 0, r.notLeader()
	}
	var res []byte
	var index uint64
	err = r.op(func() error {
		f := r.raft.Apply(cmd, timeout)
		if err := f.Error(); err != nil {
			return err
		}
		res, _ = f.Response().([]byte)
		index = f.Index()
		return nil
	})
	if err != nil {
		return nil, 0, r.mapErr(err)
	}
	return res, index, nil
}

// Barrier implements Log.
func (r *Raft) Barrier(ctx context.Context) error {
	timeout, err := r.enqueueTimeout(ctx)
	if err != nil {
		return err
	}
	if r.raft.State() != raft.Leader {
		return r.notLeader()
	}
	if err := r.op(func() error { return r.raft.Barrier(timeout).Error() }); err != nil {
		return r.mapErr(err)
	}
	return nil
}

// op runs fn, which asks raft for something and waits for its answer,
// unless the log shuts down. hashicorp/raft (v1.8.0) does not answer every
// request it took once it stops: a command or configuration entry
// committed but not yet taken by its FSM goroutine, a leadership transfer
// queued in its buffered channel (a test's transfer to a node killed
// meanwhile waited 23 minutes; an engine test's shutdown 17 minutes on a
// configuration change). So every wait runs under ops's read lock, which
// Shutdown takes before it stops raft: while one waits, raft runs and
// answers it, within a leader lease when this node leads (committed, or
// leadership lost) and at once when it does not.
func (r *Raft) op(fn func() error) error {
	r.ops.RLock()
	defer r.ops.RUnlock()
	if r.opsDown {
		return ErrShutdown
	}
	return fn()
}

// enqueueTimeout returns how long raft may take to accept an operation:
// until ctx's deadline (0: no limit).
func (r *Raft) enqueueTimeout(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	select {
	case <-r.stop:
		return 0, ErrShutdown
	default:
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, nil
	}
	d := time.Until(dl)
	if d <= 0 {
		return 0, context.DeadlineExceeded
	}
	return d, nil
}

func (r *Raft) notLeader() error {
	_, id := r.raft.LeaderWithID()
	return &NotLeaderError{Leader: nodeOf(string(id))}
}

// mapErr maps raft's errors to the package's.
func (r *Raft) mapErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return r.notLeader()
	case errors.Is(err, raft.ErrLeadershipLost):
		return ErrLeadershipLost
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("metalog: %w", context.DeadlineExceeded)
	}
	return fmt.Errorf("metalog: %w", err)
}

// Leader implements Log.
func (r *Raft) Leader() (string, bool) {
	_, id := r.raft.LeaderWithID()
	return nodeOf(string(id)), r.raft.State() == raft.Leader
}

// Leadership implements Log. Self turns true when this node enters the
// leader state, before its first entry of the term is committed: a new
// leader calls Barrier before it serves from its state.
func (r *Raft) Leadership() Leadership {
	r.lmu.Lock()
	defer r.lmu.Unlock()
	return r.leadership
}

// LeadershipChanged implements Log.
func (r *Raft) LeadershipChanged() <-chan struct{} { return r.changed }

// current reads the leadership from raft.
func (r *Raft) current() Leadership {
	_, id := r.raft.LeaderWithID()
	return Leadership{Term: r.raft.CurrentTerm(), Leader: nodeOf(string(id)), LeaderID: string(id),
		Self: r.raft.State() == raft.Leader}
}

// refreshLeadership reads the leadership from raft and signals a change.
func (r *Raft) refreshLeadership() {
	l := r.current()
	r.lmu.Lock()
	prev := r.leadership
	r.leadership = l
	r.lmu.Unlock()
	if l == prev {
		return
	}
	if l.Self != prev.Self {
		r.peers.reset() // a new leadership learns its followers afresh
		signal(r.kick)
	}
	signal(r.changed)
}

// watchLeadership refreshes the leadership on raft's observations. A full
// observation channel drops observations, but those it holds trigger
// refreshes that read the latest state.
func (r *Raft) watchLeadership() {
	for {
		select {
		case <-r.stop:
			return
		case <-r.obsCh:
			r.refreshLeadership()
		}
	}
}

// signal puts a value in a one-slot channel unless one is pending.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Advert returns what this node gossips about its Raft side. Bootstrapped
// turns true once (OnAdvert tells when); the id and address never change.
// Safe for concurrent use.
func (r *Raft) Advert() Advert {
	return Advert{ServerID: r.id, Addr: r.addr, Bootstrapped: r.hasState.Load()}
}

// SetMembers gives the log the membership's current view: every member the
// membership knows (alive, dead or left), this node included or not. The
// log keeps a copy and reconciles at once (in the background). Safe for
// concurrent use; it does not block on the network.
func (r *Raft) SetMembers(members []Member) {
	addrs := make(map[string]string, len(members))
	for _, m := range members {
		if m.ServerID != "" && m.Addr != "" {
			addrs[m.ServerID] = m.Addr
		}
	}
	r.mmu.Lock()
	r.members = slices.Clone(members)
	r.membersSet = true
	r.addrs = addrs
	r.mmu.Unlock()
	signal(r.kick)
}

// addressBook is the transport's raft.ServerAddressProvider: a server is
// dialed at the address its node advertises now, as Consul does, so that
// nodes restarted on new addresses find each other again before any leader
// exists to update the configuration. A server the membership does not
// know is dialed at its configured address (as the reconcile loop last
// read the configuration; raft falls back to it too).
type addressBook struct{ r *Raft }

var errUnknownServer = errors.New("metalog: no address known for this server yet")

// ServerAddr implements raft.ServerAddressProvider.
func (b addressBook) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	b.r.mmu.Lock()
	a, ok := b.r.addrs[string(id)]
	if !ok {
		a, ok = b.r.cfgAddrs[string(id)]
	}
	b.r.mmu.Unlock()
	if !ok {
		return "", errUnknownServer
	}
	return raft.ServerAddress(a), nil
}

// noteConfig records the configured servers' addresses for addressBook
// and returns the configuration's servers.
func (r *Raft) noteConfig() ([]cfgServer, error) {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	srv := f.Configuration().Servers
	servers := make([]cfgServer, 0, len(srv))
	addrs := make(map[string]string, len(srv))
	for _, s := range srv {
		servers = append(servers, cfgServer{ID: string(s.ID), Addr: string(s.Address), Voter: s.Suffrage == raft.Voter})
		addrs[string(s.ID)] = string(s.Address)
	}
	r.mmu.Lock()
	r.cfgAddrs = addrs
	r.mmu.Unlock()
	return servers, nil
}

// memberView returns the members with this node in them (its own Raft
// fields, the membership's other flags), and whether SetMembers was called.
func (r *Raft) memberView() ([]Member, bool) {
	r.mmu.Lock()
	defer r.mmu.Unlock()
	self := Member{Name: r.cfg.Node, Alive: true}
	out := make([]Member, 0, len(r.members)+1)
	for _, m := range r.members {
		if m.Name == r.cfg.Node {
			self = m
			continue
		}
		out = append(out, m)
	}
	self.Addr, self.ServerID, self.Bootstrapped, self.Alive, self.Left = r.addr, r.id, r.hasState.Load(), true, false
	return append(out, self), r.membersSet
}

// Status implements Log.
func (r *Raft) Status() Status {
	st := Status{Node: r.cfg.Node, ServerID: r.id, State: strings.ToLower(r.raft.State().String()), Leadership: r.current()}
	if f := r.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			srv := Server{Node: nodeOf(string(s.ID)), ID: string(s.ID), Addr: string(s.Address)}
			if s.Suffrage == raft.Voter {
				st.Voters = append(st.Voters, srv)
			} else {
				st.NonVoters = append(st.NonVoters, srv)
			}
		}
	}
	byName := func(a, b Server) int { return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID)) }
	slices.SortFunc(st.Voters, byName)
	slices.SortFunc(st.NonVoters, byName)
	if r.raft.State() != raft.Shutdown {
		st.FirstIndex, _ = r.stores.logs.FirstIndex()
	}
	st.LastIndex, st.CommitIndex, st.AppliedIndex = r.raft.LastIndex(), r.raft.CommitIndex(), r.raft.AppliedIndex()
	if snaps, err := r.stores.snaps.List(); err == nil && len(snaps) > 0 {
		st.SnapshotIndex, st.SnapshotTerm = snaps[0].Index, snaps[0].Term
	}
	return st
}

// Running returns the log's own goroutines still running (internal/owned).
func (r *Raft) Running() int { return r.g.Running() + r.stream.g.Running() }

// Shutdown implements Log: it stops the reconcile loop and the leadership
// watcher and waits for them, then stops raft (whose transport closes the
// stream layer and every connection), waits for every goroutine, and
// closes the stores. A leader does not hand its leadership over first:
// drain (Member.Draining) for that.
//
// Raft is stopped last, once no one waits for its answer (op).
func (r *Raft) Shutdown() error {
	r.downOnce.Do(func() {
		close(r.stop)
		r.wg.Wait()
		r.ops.Lock() // no one waits for raft from here on (op)
		r.opsDown = true
		r.ops.Unlock()
		r.raft.DeregisterObserver(r.obs)
		err := r.raft.Shutdown().Error()
		_ = r.stream.Close() // closed by the transport already; idempotent
		r.stream.wait()
		r.downErr = errors.Join(err, r.stores.close())
		r.refreshLeadership()
	})
	return r.downErr
}
