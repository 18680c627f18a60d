package metalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The test cluster: in-process nodes on loopback, each a Raft log with its
// own kvFSM, and a stand-in for the gossip membership that feeds every
// live node the same member list (each member's Advert as last gossiped,
// alive or dead since when, draining).

// testTimeout bounds every wait of the cluster tests.
const testTimeout = 30 * time.Second

type testCluster struct {
	t   testing.TB
	mod func(*Config)
	// newApp, if set, makes each node's state machine instead of a kvFSM
	// (testNode.app; testNode.fsm is then nil).
	newApp func() FSM
	logger *slog.Logger
	base   string // the nodes' data directories are under it

	// gate and entered go to every kvFSM started (kvFSM.gate).
	gate, entered chan struct{}

	mu      sync.Mutex
	nodes   map[string]*testNode
	members map[string]*Member
}

type testNode struct {
	name string
	dir  string // "" in memory
	fsm  *kvFSM
	app  FSM // the state machine: fsm, or testCluster.newApp's
	log  *Raft
}

// testLogger writes to stderr when METALOG_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("METALOG_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testConfig is a Config with timings for tests on a loaded machine.
func testConfig(name, dir string) Config {
	return Config{
		Node: name, Bind: "127.0.0.1:0", Secret: testSecret, DataDir: dir, Logger: testLogger().With("node", name),
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		LeaderLeaseTimeout: 150 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
		ReconcileInterval: 50 * time.Millisecond, StableAfter: 200 * time.Millisecond, DeadAfter: time.Second,
		HandshakeTimeout: 2 * time.Second, IOTimeout: 2 * time.Second, SegmentSize: 1 << 20,
	}
}

// newTestCluster returns an empty cluster; mod adjusts every node's
// Config. Its cleanup shuts every node down and checks that none of their
// goroutines outlive Shutdown.
func newTestCluster(t testing.TB, mod func(*Config)) *testCluster {
	// The directory first: cleanups run last-registered first, so the
	// nodes are shut down before their directories are removed.
	c := &testCluster{t: t, mod: mod, logger: testLogger(), base: t.TempDir(), nodes: make(map[string]*testNode), members: make(map[string]*Member)}
	t.Cleanup(func() {
		for _, n := range c.all() {
			c.shutdown(n)
		}
	})
	return c
}

func (c *testCluster) all() []*testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Collect(maps.Values(c.nodes))
}

// live returns the running nodes.
func (c *testCluster) live() []*testNode {
	var out []*testNode
	for _, n := range c.all() {
		if n.log != nil {
			out = append(out, n)
		}
	}
	return out
}

// start starts node name (again, with its directory, if it ran before and
// persist is set) and gossips.
func (c *testCluster) start(name string, persist bool, mod func(*Config)) *testNode {
	c.t.Helper()
	c.mu.Lock()
	n := c.nodes[name]
	if n == nil {
		n = &testNode{name: name}
		if persist {
			n.dir = filepath.Join(c.base, name)
		}
		c.nodes[name] = n
	}
	c.mu.Unlock()
	if c.newApp != nil {
		n.fsm, n.app = nil, c.newApp()
	} else {
		n.fsm = newKV()
		n.fsm.gate, n.fsm.entered = c.gate, c.entered
		n.app = n.fsm
	}
	cfg := testConfig(name, n.dir)
	cfg.OnAdvert = func(a Advert) { c.advert(name, a) }
	if c.mod != nil {
		c.mod(&cfg)
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := NewRaft(cfg, n.app)
	if err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	c.mu.Lock()
	n.log = r
	a := r.Advert()
	c.members[name] = &Member{Name: name, ServerID: a.ServerID, Addr: a.Addr, Bootstrapped: a.Bootstrapped, Alive: true, Since: time.Now()}
	c.mu.Unlock()
	c.gossip()
	return n
}

// startAll starts nodes named by names, in order.
func (c *testCluster) startAll(persist bool, names ...string) {
	for _, name := range names {
		c.start(name, persist, nil)
	}
}

// advert records a node's new Advert and gossips it.
func (c *testCluster) advert(name string, a Advert) {
	c.mu.Lock()
	if m := c.members[name]; m != nil {
		m.Bootstrapped = a.Bootstrapped
	}
	c.mu.Unlock()
	c.gossip()
}

// update changes a member and gossips.
func (c *testCluster) update(name string, fn func(*Member)) {
	c.mu.Lock()
	fn(c.members[name])
	c.mu.Unlock()
	c.gossip()
}

// gossip gives every live node the current member list.
func (c *testCluster) gossip() {
	c.mu.Lock()
	list := make([]Member, 0, len(c.members))
	for _, m := range c.members {
		list = append(list, *m)
	}
	var logs []*Raft
	for _, n := range c.nodes {
		if n.log != nil {
			logs = append(logs, n.log)
		}
	}
	c.mu.Unlock()
	for _, r := range logs {
		r.SetMembers(list)
	}
}

// shutdown stops a node and checks its goroutines ended.
func (c *testCluster) shutdown(n *testNode) {
	c.mu.Lock()
	r := n.log
	n.log = nil
	c.mu.Unlock()
	if r == nil {
		return
	}
	if err := r.Shutdown(); err != nil {
		c.t.Errorf("shutdown %s: %v", n.name, err)
	}
	if k := r.Running(); k != 0 {
		c.t.Errorf("%s: %d of its goroutines outlived Shutdown", n.name, k)
	}
	if n.fsm == nil {
		return
	}
	if err := n.fsm.err(); err != nil {
		c.t.Errorf("%s: %v", n.name, err)
	}
}

// kill shuts a node down and has the membership declare it dead.
func (c *testCluster) kill(n *testNode) {
	c.shutdown(n)
	c.update(n.name, func(m *Member) { m.Alive, m.Since = false, time.Now() })
}

// leader waits for a live node that leads and has applied everything
// committed before (Barrier), and returns it.
func (c *testCluster) leader() *testNode {
	c.t.Helper()
	var found *testNode
	waitFor(c.t, testTimeout, "a leader", func() bool {
		for _, n := range c.live() {
			if _, self := n.log.Leader(); self {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := n.log.Barrier(ctx)
				cancel()
				if err == nil {
					found = n
					return true
				}
			}
		}
		return false
	})
	return found
}

// propose proposes cmd through the current leader, retrying while
// leadership moves, and returns the result.
func (c *testCluster) propose(cmd []byte) (string, uint64) {
	c.t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		n := c.leader()
		res, idx, err := n.log.Propose(context.Background(), cmd)
		if err == nil {
			return string(res), idx
		}
		if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrLeadershipLost) || time.Now().After(deadline) {
			c.t.Fatalf("propose: %v", err)
		}
	}
}

// voters returns the sorted voter and non-voter node names in n's latest
// configuration.
func voterNames(n *testNode) (voters, nonvoters []string) {
	st := n.log.Status()
	for _, s := range st.Voters {
		voters = append(voters, s.Node)
	}
	for _, s := range st.NonVoters {
		nonvoters = append(nonvoters, s.Node)
	}
	return voters, nonvoters
}

// waitVoters waits until every live node's configuration has exactly the
// named voters.
func (c *testCluster) waitVoters(names ...string) {
	c.t.Helper()
	slices.Sort(names)
	want := fmt.Sprint(names)
	waitFor(c.t, testTimeout, "voters "+want, func() bool {
		for _, n := range c.live() {
			if v, _ := voterNames(n); fmt.Sprint(v) != want {
				return false
			}
		}
		return true
	})
}

// waitState waits until every given node's FSM holds want.
func (c *testCluster) waitState(want map[string]string, nodes ...*testNode) {
	c.t.Helper()
	if len(nodes) == 0 {
		nodes = c.live()
	}
	waitFor(c.t, testTimeout, "the state everywhere", func() bool {
		for _, n := range nodes {
			if !maps.Equal(n.fsm.state(), want) {
				return false
			}
		}
		return true
	})
}

// block cuts the nodes of side a from those of side b, both ways, through
// the stream layers' test hook; nil sides lift every cut.
func (c *testCluster) block(a, b []*testNode) {
	in := func(ns []*testNode, name string) bool {
		return slices.ContainsFunc(ns, func(n *testNode) bool { return n.name == name })
	}
	for _, n := range c.live() {
		switch {
		case a == nil:
			n.log.stream.setBlock(nil)
		case in(a, n.name):
			n.log.stream.setBlock(func(peer string) bool { return in(b, peer) })
		case in(b, n.name):
			n.log.stream.setBlock(func(peer string) bool { return in(a, peer) })
		}
	}
}

// outsider speaks raft's RPCs over a stream layer of its own, with the
// secret it is given.
type outsider struct {
	id    string
	trans *raft.NetworkTransport
}

func newOutsider(t *testing.T, secret string) *outsider {
	t.Helper()
	id := sid("outsider", 1)
	s := newTestStream(t, id, secret, nil)
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: s, MaxPool: 1, Timeout: 2 * time.Second, Logger: newHCLog(testLogger(), "outsider"),
	})
	t.Cleanup(func() { _ = trans.Close() })
	return &outsider{id: id, trans: trans}
}

func (o *outsider) header() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(o.id), Addr: []byte(o.trans.LocalAddr())}
}

func (o *outsider) vote(to Advert, term uint64) error {
	var resp raft.RequestVoteResponse
	return o.trans.RequestVote(raft.ServerID(to.ServerID), raft.ServerAddress(to.Addr), &raft.RequestVoteRequest{
		RPCHeader: o.header(), Term: term, LastLogIndex: 1 << 40, LastLogTerm: term,
	}, &resp)
}

func (o *outsider) appendEntries(to Advert, term uint64) error {
	var resp raft.AppendEntriesResponse
	return o.trans.AppendEntries(raft.ServerID(to.ServerID), raft.ServerAddress(to.Addr), &raft.AppendEntriesRequest{
		RPCHeader: o.header(), Term: term, PrevLogEntry: 0, LeaderCommitIndex: 1 << 40,
		Entries: []*raft.Log{{Index: 1, Term: term, Type: raft.LogCommand, Data: setCmd("evil", "1")}},
	}, &resp)
}
