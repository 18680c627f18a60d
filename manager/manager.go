// Package manager is the channel-manager role: it decides every change to
// the channels' streamlet lists and commits it to the metadata log, whose
// state machine (package meta) holds the lists. It serves write grants from
// the committed lists, opens streamlets on hosts chosen by load, closes
// them (sealed by their orderer, or recovered from their replicas), frees
// them at expiry, copies closed ones back up to their replica count and
// drops idle channels.
//
// In a cluster only the leader of the metadata log runs a manager that
// acts (Lead); every node's state machine holds the same lists, and a
// stale manager's command conflicts and changes nothing (the
// compare-and-set of package meta), so two managers can never both extend
// a channel. On a single node the manager always leads and its log applies
// commands directly. It never touches a connection: hosts are reached
// through role.Host and the rest of the cluster through Cluster.
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-rtm/sluice/internal/mapshrink"
	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/role"
)

// Log is where the manager commits its decisions: the replicated metadata
// log (package cluster/metalog) or a single node's direct application.
// Propose returns the state machine's result once the command is committed
// and applied to the Config.State this manager reads. It fails without
// changing anything when this node cannot commit (not the leader: an error
// wrapping role.ErrNotLeader).
type Log interface {
	Propose(ctx context.Context, cmd []byte) (result []byte, index uint64, err error)
}

// Cluster is what the manager needs from the nodes (package cluster; a
// single node's is Local). Its methods may wait for the network; the
// manager never calls them holding a lock.
type Cluster interface {
	// HostOf returns node's Host role (this node's host or a remote one);
	// nil when node is unknown or cannot be reached now.
	HostOf(node string) role.Host
	// Choose picks the hosting node for the channel's next streamlet by
	// load among the usable nodes, avoiding exclude; false when none is
	// left.
	Choose(channel string, seq uint64, load Load, exclude []string) (string, bool)
	// Usable reports whether node is live, reachable and not draining: it
	// may get new streamlets and counts as a holder of what it holds.
	Usable(node string) bool
	// Gone reports whether what node held will not come back: it runs
	// another incarnation than the recorded one (it restarted: hosts keep
	// streamlets in memory only), or it has been dead or departed for the
	// cluster's bound (cluster.Options.NodeGoneAfter). A node merely
	// unreachable, paused or cut off for less is not gone.
	Gone(node string) bool
	// Copy makes node to take over a complete copy of the closed
	// streamlet ref of channel (epoch) from its holder ref.Host; it
	// returns once to holds it.
	Copy(to, channel string, epoch uint64, ref role.StreamletRef) error
	// Go runs f off the caller's goroutine when f may wait for the
	// network (a single node runs it inline); false when it could not be
	// started.
	Go(f func()) bool
}

// Config is what a Manager is built from.
type Config struct {
	// Node is this node's name; NewID numbers new streamlets (unique in
	// the cluster).
	Node  string
	NewID func() uint64
	// Limits returns the streamlet limits of a channel.
	Limits func(channel string) role.Limits
	// Clock is the time source of every decision.
	Clock func() time.Time
	// DedupWindow is the hosts' dedup window (0: every retained
	// streamlet counts): a new streamlet's hosts are told the channel's
	// earlier streamlets within it (role.Grant.Prior).
	DedupWindow time.Duration
	// State is this node's replica of the committed lists; Log commits
	// to it.
	State *meta.State
	Log   Log
	// Cluster reaches the hosts; Local(node, host) on a single node.
	Cluster Cluster
	// DropGrace is how long a manager that starts leading waits before it
	// drops idle channels, so that the reader nodes' interest reaches it
	// first (0: none, a single node).
	DropGrace time.Duration
	// ProposeTimeout bounds one commit (0: 10 s).
	ProposeTimeout time.Duration
	// Logger, if set, logs the cluster decisions.
	Logger *slog.Logger
}

// Load is a channel's own load as its manager measures it.
type Load struct {
	MsgsPerSec, BytesPerSec float64
	Readers                 int
}

const softShards = 64

// soft is what the manager knows of a channel beyond the committed list:
// the change in progress, the reader nodes, the measured rate. It is lost
// with the manager and rebuilt as nodes ask (interest is sent again to a
// new leader).
type soft struct {
	// busy is the change in progress (a grant opening a streamlet, a
	// close, a recovery): one at a time per channel, off every lock.
	busy *change
	// readers counts the reading gateway loops per node.
	readers map[string]int
	nread   int
	load    Load
}

type softShard struct {
	mu   sync.Mutex
	m    map[string]*soft
	peak mapshrink.Peak
}

// change is one change of a channel in progress; g and err are a grant's
// outcome, set before done is closed.
type change struct {
	done  chan struct{}
	grant bool
	g     role.Grant
	err   error
}

// Manager is the channel manager of one node. Safe for concurrent use.
//
// Lock order: a softShard's mu, then the state's own locks (a grant reads
// the committed tail under it); never held across a host call or a
// commit. cuts.mu, cmu and the due queue's mu are taken alone.
type Manager struct {
	cfg  Config
	st   *meta.State
	soft [softShards]softShard

	// leading: Lead ran and Follow did not since; leadSince is when (unix
	// ns; the drop grace counts from it).
	leading   atomic.Bool
	leadSince atomic.Int64

	due dueQueue // channels with something due (due.go)
	cut cuts     // pairs of nodes an orderer could not make talk (unreachable.go)

	// copies in flight (copy.go), by streamlet id, under cmu.
	cmu                    sync.Mutex
	copying                map[uint64]bool
	backlog                []copyJob // the last scan's jobs not taken yet, under cmu
	copiesDone, copiesFail atomic.Int64
	lastCopyScan           atomic.Int64

	grants, degraded, degradedLog, recoveries atomic.Int64
}

// New returns a manager over cfg.State. It does not act until Lead.
func New(cfg Config) *Manager {
	if cfg.ProposeTimeout <= 0 {
		cfg.ProposeTimeout = 10 * time.Second
	}
	m := &Manager{cfg: cfg, st: cfg.State, copying: make(map[uint64]bool)}
	for i := range m.soft {
		m.soft[i].m = make(map[string]*soft)
	}
	return m
}

func (m *Manager) now() time.Time { return m.cfg.Clock() }

func (m *Manager) logger() *slog.Logger {
	if m.cfg.Logger != nil {
		return m.cfg.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Lead makes this manager act: the node leads the metadata log and its
// state holds every committed change (the caller waited for that). The
// soft state of an earlier term is forgotten; idle channels are not
// dropped for DropGrace.
func (m *Manager) Lead() {
	for i := range m.soft {
		sh := &m.soft[i]
		sh.mu.Lock()
		for name, sc := range sh.m {
			if sc.busy == nil {
				delete(sh.m, name)
			} else {
				sc.readers, sc.nread = nil, 0
			}
		}
		sh.mu.Unlock()
	}
	m.leadSince.Store(m.now().UnixNano())
	m.leading.Store(true)
	m.due.reset()
	m.st.Range(func(c *meta.Channel) bool {
		m.due.push(c.Name, m.dueOf(c))
		return true
	})
}

// Follow stops the manager acting: another node leads.
func (m *Manager) Follow() {
	m.leading.Store(false)
	m.due.reset()
}

// Leading reports whether Lead ran and Follow did not since.
func (m *Manager) Leading() bool { return m.leading.Load() }

// Changed tells the manager of a committed change (the state machine's
// observer, on its applying goroutine): the channel's next due time may
// have moved. It does not block.
func (m *Manager) Changed(c meta.Change) {
	if !m.leading.Load() {
		return
	}
	if c.Dropped {
		m.forgetSoft(c.Channel)
		return
	}
	m.due.push(c.Channel, 0) // visited at the next tick, which finds its due time
}

func (m *Manager) softShard(name string) *softShard {
	return &m.soft[xxhash.Sum64String(name)%softShards]
}

// lockSoft returns the channel's soft state, created if needed, with its
// shard locked.
func (m *Manager) lockSoft(name string) (*softShard, *soft) {
	sh := m.softShard(name)
	sh.mu.Lock()
	sc := sh.m[name]
	if sc == nil {
		sc = &soft{}
		sh.m[name] = sc
	}
	return sh, sc
}

// forgetSoft drops the channel's soft state unless a change runs or it
// has readers.
func (m *Manager) forgetSoft(name string) {
	sh := m.softShard(name)
	sh.mu.Lock()
	if sc := sh.m[name]; sc != nil && sc.busy == nil && sc.nread == 0 {
		sh.m = mapshrink.Delete(sh.m, name, &sh.peak)
	}
	sh.mu.Unlock()
}

// begin starts a change of the channel, waiting for one in progress to
// end first; grant says it is a grant (whose outcome the grants that
// waited for it may take: WriteGrant).
func (m *Manager) begin(name string, grant bool) *change {
	for {
		sh, sc := m.lockSoft(name)
		if op := sc.busy; op != nil {
			sh.mu.Unlock()
			<-op.done
			continue
		}
		op := &change{done: make(chan struct{}), grant: grant}
		sc.busy = op
		sh.mu.Unlock()
		return op
	}
}

// end finishes the change op with a grant's outcome.
func (m *Manager) end(name string, op *change, g role.Grant, err error) {
	sh, sc := m.lockSoft(name)
	sc.busy = nil
	op.g, op.err = g, err
	sh.mu.Unlock()
	close(op.done)
}

// propose commits c and returns its result.
func (m *Manager) propose(c *meta.Cmd) (meta.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.ProposeTimeout)
	defer cancel()
	res, _, err := m.cfg.Log.Propose(ctx, meta.AppendCmd(nil, c))
	if err != nil {
		if errors.Is(err, role.ErrNotLeader) {
			return 0, err
		}
		return 0, fmt.Errorf("%w: committing %v of %q: %v", role.ErrUnavailable, c.Kind, c.Channel, err)
	}
	if len(res) != 1 {
		return 0, fmt.Errorf("%w: %v of %q: result of %d bytes", role.ErrUnavailable, c.Kind, c.Channel, len(res))
	}
	return meta.Result(res[0]), nil
}

// Interest records delta reading loops of node for the channel; a channel
// with readers is never dropped.
func (m *Manager) Interest(channel, node string, delta int) {
	sh, sc := m.lockSoft(channel)
	defer sh.mu.Unlock()
	if sc.readers == nil {
		sc.readers = make(map[string]int)
	}
	n := sc.readers[node] + delta
	if n <= 0 {
		delete(sc.readers, node)
	} else {
		sc.readers[node] = n
	}
	sc.nread = 0
	for _, k := range sc.readers {
		sc.nread += k
	}
}

// SetInterest records that n gateway loops of node read the channel (an
// absolute count: a node sends it again to a new leader).
func (m *Manager) SetInterest(channel, node string, n int) {
	sh, sc := m.lockSoft(channel)
	defer sh.mu.Unlock()
	if sc.readers == nil {
		sc.readers = make(map[string]int)
	}
	sc.nread += n - sc.readers[node]
	if n <= 0 {
		delete(sc.readers, node)
	} else {
		sc.readers[node] = n
	}
}

// NodeReaders forgets node's readers (it died or left).
func (m *Manager) NodeReaders(node string) {
	for i := range m.soft {
		sh := &m.soft[i]
		sh.mu.Lock()
		for _, sc := range sh.m {
			if k, ok := sc.readers[node]; ok {
				delete(sc.readers, node)
				sc.nread -= k
			}
		}
		sh.mu.Unlock()
	}
}

// readers returns how many loops read the channel.
func (m *Manager) readers(channel string) int {
	sh := m.softShard(channel)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sc := sh.m[channel]; sc != nil {
		return sc.nread
	}
	return 0
}

// Info returns the channel's committed list; the open streamlet's length
// is asked of its orderer (a request to another node in a cluster). With
// create set, a channel that does not exist is created.
func (m *Manager) Info(channel string, create bool) (role.ChannelInfo, bool, error) {
	c, ok := m.st.Channel(channel)
	if !ok && create {
		if err := m.create(channel); err != nil {
			return role.ChannelInfo{}, false, err
		}
		c, ok = m.st.Channel(channel)
	}
	if !ok {
		return role.ChannelInfo{}, false, nil
	}
	n := 0
	if o, open := c.Open(); open {
		if h := m.cfg.Cluster.HostOf(o.Host); h != nil {
			n, _ = h.Len(o.ID)
		}
	}
	return c.Info(n), true, nil
}

// create commits a new incarnation of channel unless it exists.
func (m *Manager) create(channel string) error {
	for try := 0; try < 4; try++ {
		if _, ok := m.st.Channel(channel); ok {
			return nil
		}
		now := m.now().UnixNano()
		r, err := m.propose(&meta.Cmd{Kind: meta.KindCreate, Time: now, Channel: channel, Epoch: m.st.NewEpoch(now)})
		if err != nil {
			return err
		}
		if r == meta.ResultOK {
			return nil
		}
	}
	return fmt.Errorf("%w: creating %q kept conflicting", role.ErrUnavailable, channel)
}

// Expire frees the channel's closed streamlets up to and including through
// ahead of their TTL (the retention budget of its host is exceeded), and
// returns how many.
func (m *Manager) Expire(channel string, through uint64) (int, error) {
	c, ok := m.st.Channel(channel)
	if !ok {
		return 0, nil
	}
	n := 0
	for _, r := range c.List {
		if !r.Closed {
			break
		}
		n++
		if r.ID == through {
			r, err := m.propose(&meta.Cmd{Kind: meta.KindExpire, Time: m.now().UnixNano(),
				Batch: []meta.Ref{{Channel: channel, Epoch: c.Epoch, ID: through}}})
			if err != nil || r != meta.ResultOK {
				return 0, err
			}
			return n, nil
		}
	}
	return 0, nil
}

// NodeGone commits that what node held is gone (the membership declared
// it dead or departed, or it runs a new incarnation, next, since hosts
// keep streamlets in memory only): it no longer holds any closed streamlet
// (those it held alone are lost), its readers are forgotten, and the
// channels whose open streamlet it held are closed at the next tick
// (recovered from the other replicas, or lost with it). next, "" for
// none, is the incarnation that may hold streamlets from now on.
func (m *Manager) NodeGone(node, next string) error {
	m.NodeReaders(node)
	r, err := m.propose(&meta.Cmd{Kind: meta.KindNodeGone, Time: m.now().UnixNano(), Node: node, Instance: next})
	if err != nil {
		return err
	}
	if r != meta.ResultOK {
		return fmt.Errorf("manager: NODE_GONE %s: %v", node, r)
	}
	m.st.Range(func(c *meta.Channel) bool {
		if o, ok := c.Open(); ok {
			for _, n := range o.Set() {
				if n == node {
					m.due.push(c.Name, 0)
				}
			}
		}
		return true
	})
	return nil
}

// Channels reports how many channels exist (metrics and load).
func (m *Manager) Channels() int { return m.st.Len() }

// Grants reports how many write grants were asked of this manager.
func (m *Manager) Grants() int64 { return m.grants.Load() }

// Degraded reports how many streamlets were opened with fewer replicas
// than configured (metrics).
func (m *Manager) Degraded() int64 { return m.degraded.Load() }

// Recoveries reports how many replicated streamlets were recovered.
func (m *Manager) Recoveries() int64 { return m.recoveries.Load() }

var _ role.Manager = (*Manager)(nil)
