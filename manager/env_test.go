package manager

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/role"
)

// The manager's tests run on env: a state machine fed by a direct log,
// real hosts (package host) on named nodes, and one Cluster double
// (testCluster) whose nodes can be made unreachable, gone or draining.
// Replication between the hosts is driven by the test (replicate), so a
// test decides exactly what each follower holds.

// testLog applies commands directly, in order, as a single node's log
// does; fail makes it refuse (a node that is not the leader).
type testLog struct {
	mu   sync.Mutex
	st   *meta.State
	idx  uint64
	fail error
	// gate, if set, is called by Propose before it applies cmd (without
	// the log's lock: concurrent proposals may wait in it); the function
	// it returns is called once cmd is applied. Set before any Propose.
	gate func(cmd []byte) (applied func())
}

func (l *testLog) Propose(_ context.Context, cmd []byte) ([]byte, uint64, error) {
	if l.gate != nil {
		defer l.gate(cmd)()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return nil, 0, l.fail
	}
	l.idx++
	return l.st.Apply(l.idx, cmd), l.idx, nil
}

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type testNode struct {
	h                    *host.Host
	down, gone, draining bool
}

// testCluster is the one Cluster double of these tests.
type testCluster struct {
	mu    sync.Mutex
	nodes map[string]*testNode
	order []string
	// hold makes Go queue its functions in held (run by the test, as a
	// pool whose workers are all busy would run them later).
	hold bool
	held []func()
}

func (c *testCluster) node(n string) *testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[n]
}

func (c *testCluster) set(n string, f func(*testNode)) {
	c.mu.Lock()
	f(c.nodes[n])
	c.mu.Unlock()
}

func (c *testCluster) HostOf(n string) role.Host {
	c.mu.Lock()
	defer c.mu.Unlock()
	if nd := c.nodes[n]; nd != nil && !nd.down && !nd.gone {
		return nd.h
	}
	return nil
}

// Choose takes the usable nodes in order, starting at seq.
func (c *testCluster) Choose(_ string, seq uint64, _ Load, exclude []string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.order {
		n := c.order[(int(seq)+i)%len(c.order)]
		if nd := c.nodes[n]; !nd.down && !nd.gone && !nd.draining && !slices.Contains(exclude, n) {
			return n, true
		}
	}
	return "", false
}

func (c *testCluster) Usable(n string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	nd := c.nodes[n]
	return nd != nil && !nd.down && !nd.gone && !nd.draining
}

func (c *testCluster) Gone(n string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	nd := c.nodes[n]
	return nd == nil || nd.gone
}

func (c *testCluster) Go(f func()) bool {
	c.mu.Lock()
	if c.hold {
		c.held = append(c.held, f)
		c.mu.Unlock()
		return true
	}
	c.mu.Unlock()
	f()
	return true
}

// runHeld runs the functions Go queued while hold was set, and stops
// holding.
func (c *testCluster) runHeld() {
	c.mu.Lock()
	held := c.held
	c.held, c.hold = nil, false
	c.mu.Unlock()
	for _, f := range held {
		f()
	}
}

// Copy copies the sealed streamlet from ref.Host to node to, as NODE_READ
// into a host.NewCopy and Adopt do.
func (c *testCluster) Copy(to, channel string, epoch uint64, ref role.StreamletRef) error {
	src, dst := c.HostOf(ref.Host), c.HostOf(to)
	if src == nil || dst == nil {
		return fmt.Errorf("copy %d from %s to %s: unreachable", ref.ID, ref.Host, to)
	}
	s := src.(*host.Host).Streamlet(ref.ID)
	if s == nil || !s.Buf().Sealed() {
		return fmt.Errorf("copy %d: not sealed at %s", ref.ID, ref.Host)
	}
	n := s.Buf().Len()
	cp := dst.(*host.Host).NewCopy(ref.ID, channel, ref.First, role.Limits{Msgs: 1000, Size: 1 << 20}, ref.Host)
	cp.Fill(0, n, func(i int) ([]byte, bool, int64) { p, ext := s.Buf().GetExt(i); return p, ext, 1 }, true)
	return dst.(*host.Host).Adopt(cp, role.Hosted{ID: ref.ID, Epoch: epoch, First: ref.First, Len: uint32(n), Sealed: true,
		LimitMsgs: 1000, Replicas: ref.Replicas})
}

type env struct {
	t     *testing.T
	st    *meta.State
	log   *testLog
	cl    *testCluster
	m     *Manager
	clock *testClock
	lim   role.Limits
}

const (
	life = 4 * time.Second
	ttl  = 60 * time.Second
)

// newEnv starts a leading manager on nodes (the first is the manager's
// own) with replicas copies of each streamlet and 100-message streamlets.
func newEnv(t *testing.T, replicas int, nodes ...string) *env {
	t.Helper()
	e := &env{t: t, st: meta.New(), clock: &testClock{t: time.Unix(1_800_000_000, 0)},
		lim: role.Limits{Msgs: 100, Size: 1 << 20, Life: life, TTL: ttl, Replicas: replicas}}
	e.log = &testLog{st: e.st}
	e.cl = &testCluster{nodes: map[string]*testNode{}, order: nodes}
	for _, n := range nodes {
		e.cl.nodes[n] = &testNode{h: host.New(n, e.clock.now)}
	}
	first := e.cl.nodes[nodes[0]].h
	e.m = New(Config{Node: nodes[0], NewID: first.NewID, Limits: func(string) role.Limits { return e.lim },
		Clock: e.clock.now, State: e.st, Log: e.log, Cluster: e.cl})
	e.st.SetObserver(func(c meta.Change) {
		for _, n := range nodes {
			e.cl.nodes[n].h.Apply(c)
		}
		e.m.Changed(c)
	})
	e.m.Lead()
	return e
}

func (e *env) host(n string) *host.Host { return e.cl.node(n).h }

func (e *env) channel(name string) *meta.Channel {
	e.t.Helper()
	c, ok := e.st.Channel(name)
	if !ok {
		e.t.Fatalf("channel %q does not exist", name)
	}
	return c
}

func (e *env) grant(ch string, after uint64) role.Grant {
	e.t.Helper()
	g, err := e.m.WriteGrant(ch, after)
	if err != nil {
		e.t.Fatalf("grant of %q after %d: %v", ch, after, err)
	}
	return g
}

// publish appends n messages under g at its orderer, replicates them to
// every follower (replicate) and returns their positions.
func (e *env) publish(g role.Grant, n int) []uint64 {
	e.t.Helper()
	s := e.host(g.Host).Streamlet(g.Streamlet)
	if s == nil {
		e.t.Fatalf("streamlet %d is not hosted at %s", g.Streamlet, g.Host)
	}
	var out []uint64
	for i := 0; i < n; i++ {
		p, err := s.Append([]byte(fmt.Sprintf("m%d", i)), e.clock.now().UnixNano())
		if err != nil {
			e.t.Fatalf("append %d to %d: %v", i, g.Streamlet, err)
		}
		out = append(out, p)
	}
	e.replicate(g, -1)
	return out
}

// replicate forwards the orderer's records to every follower of g, all of
// them (upTo -1) or the first upTo, and reports the acknowledgements.
func (e *env) replicate(g role.Grant, upTo int) {
	e.t.Helper()
	if len(g.Replicas) <= 1 {
		return
	}
	o := e.host(g.Replicas[0]).Streamlet(g.Streamlet)
	n := o.Buf().Written()
	if upTo >= 0 {
		n = min(n, upTo)
	}
	for _, f := range g.Replicas[1:] {
		fs := e.host(f).Streamlet(g.Streamlet)
		held, err := fs.Replicate(g.Replicas[0], g.Epoch, 0, n, 0, false, func(i int) ([]byte, bool, int64) {
			p, ext := o.Buf().GetHeldExt(i)
			return p, ext, o.Buf().HeldStamp(i)
		})
		if err != nil {
			e.t.Fatalf("replicating %d to %s: %v", g.Streamlet, f, err)
		}
		o.Acked(f, held)
	}
}

// checkContiguous checks behaviour 2 on the committed list: positions
// from 1, strictly increasing, no gap and no overlap between streamlets.
func (e *env) checkContiguous(ch string) {
	e.t.Helper()
	c := e.channel(ch)
	next := c.List[0].First
	for _, r := range c.List {
		if r.First != next {
			e.t.Fatalf("streamlet %d starts at %d, want %d: %+v", r.ID, r.First, next, c.List)
		}
		next = r.End
	}
}
