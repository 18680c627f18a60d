package metalog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestRaft_SingleNode: a node alone (bootstrap-expect 1) bootstraps once
// the membership is known, leads, and commits; its Status tells.
func TestRaft_SingleNode(t *testing.T) {
	c := newTestCluster(t, nil)
	a := c.start("a", false, nil)
	l := c.leader()
	if l != a {
		t.Fatalf("leader %s", l.name)
	}
	if res, idx := c.propose(casCmd("k", "", "v")); res != "ok" || idx == 0 {
		t.Fatalf("propose: %q %d", res, idx)
	}
	if res, _ := c.propose(casCmd("k", "", "w")); res != "conflict:v" {
		t.Fatalf("stale cas: %q", res)
	}
	st := a.log.Status()
	if st.State != "leader" || !st.Self || st.Leader != "a" || len(st.Voters) != 1 || st.Voters[0].ID != a.log.Advert().ServerID ||
		st.CommitIndex < 2 || st.AppliedIndex < 2 || st.Term == 0 {
		t.Fatalf("status %+v", st)
	}
	if !a.log.Advert().Bootstrapped || a.log.bootstraps.Load() != 1 {
		t.Fatal("not bootstrapped once")
	}
}

// TestRaft_ThreeNodes: three nodes started together with bootstrap-expect
// 3 form one cluster of three voters (only the smallest name
// bootstraps); commits reach every FSM; a follower refuses to propose and
// names the leader; a stale compare-and-set loses.
func TestRaft_ThreeNodes(t *testing.T) {
	c := newTestCluster(t, func(cfg *Config) { cfg.BootstrapExpect = 3 })
	c.startAll(false, "c", "b", "a")
	c.waitVoters("a", "b", "c")
	want := make(map[string]string)
	for i := range 30 {
		k := fmt.Sprintf("k%d", i)
		if res, _ := c.propose(setCmd(k, "v")); res != "ok" {
			t.Fatalf("propose: %q", res)
		}
		want[k] = "v"
	}
	c.waitState(want)
	l := c.leader()
	for _, n := range c.live() {
		if got := n.log.bootstraps.Load(); got != map[bool]int64{true: 1, false: 0}[n.name == "a"] {
			t.Errorf("%s bootstrapped %d times", n.name, got)
		}
		if n == l {
			continue
		}
		_, _, err := n.log.Propose(context.Background(), setCmd("x", "y"))
		var nl *NotLeaderError
		if !errors.As(err, &nl) || !errors.Is(err, ErrNotLeader) || nl.Leader != l.name {
			t.Errorf("follower %s: %v", n.name, err)
		}
		if err := n.log.Barrier(context.Background()); !errors.Is(err, ErrNotLeader) {
			t.Errorf("follower barrier: %v", err)
		}
		if name, self := n.log.Leader(); name != l.name || self {
			t.Errorf("%s sees leader %q self %v", n.name, name, self)
		}
	}
	if res, _ := c.propose(casCmd("k0", "stale", "w")); res != "conflict:v" {
		t.Fatalf("stale cas: %q", res)
	}
}

// TestRaft_FiveNodes: five members make five voters.
func TestRaft_FiveNodes(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startAll(false, "a", "b", "c", "d", "e")
	c.waitVoters("a", "b", "c", "d", "e")
	if res, _ := c.propose(setCmd("k", "v")); res != "ok" {
		t.Fatal(res)
	}
	c.waitState(map[string]string{"k": "v"})
}

// TestRaft_LeaderKill: when the leader dies, the two others elect a new
// one in a later term, every acknowledged entry is in their state, both
// saw the leadership change, and commits go on.
func TestRaft_LeaderKill(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startAll(false, "a", "b", "c")
	c.waitVoters("a", "b", "c")
	want := make(map[string]string)
	for i := range 50 {
		k := fmt.Sprintf("k%d", i)
		c.propose(setCmd(k, "1"))
		want[k] = "1"
	}
	old := c.leader()
	term := old.log.Leadership().Term
	survivors := []*testNode{}
	for _, n := range c.live() {
		if n != old {
			survivors = append(survivors, n)
			drain(n.log.LeadershipChanged())
		}
	}
	c.kill(old)
	l := c.leader()
	if l == old || l.log.Leadership().Term <= term {
		t.Fatalf("new leader %s in term %d (old term %d)", l.name, l.log.Leadership().Term, term)
	}
	c.waitState(want, survivors...)
	for _, n := range survivors {
		select {
		case <-n.log.LeadershipChanged():
		default:
			t.Errorf("%s: no leadership signal", n.name)
		}
		waitFor(t, testTimeout, "the new leadership seen", func() bool {
			ld := n.log.Leadership()
			return ld.Leader == l.name && ld.Term > term && ld.Self == (n == l)
		})
	}
	c.propose(setCmd("after", "1"))
	want["after"] = "1"
	c.waitState(want, survivors...)
}

func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// TestRaft_Partition: five voters; the leader and one follower are cut
// off from the three others. The minority cannot commit (its leader steps
// down and its proposals fail); the majority elects a leader and commits.
// After the heal every node holds the majority's state.
func TestRaft_Partition(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startAll(false, "a", "b", "c", "d", "e")
	c.waitVoters("a", "b", "c", "d", "e")
	c.propose(setCmd("p", "before"))
	old := c.leader()
	minority, majority := []*testNode{old}, []*testNode{}
	for _, n := range c.live() {
		switch {
		case n == old:
		case len(minority) < 2:
			minority = append(minority, n)
		default:
			majority = append(majority, n)
		}
	}
	c.block(minority, majority)
	// The minority's leader steps down within its lease; meanwhile and
	// after, nothing it is asked to commit commits.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		res, _, err := old.log.Propose(context.Background(), casCmd("p", "before", "minority"))
		if err == nil {
			t.Fatalf("the minority committed (%q)", res)
		}
		if errors.Is(err, ErrNotLeader) {
			break
		}
	}
	var ml *testNode
	waitFor(t, testTimeout, "a majority leader", func() bool {
		for _, n := range majority {
			if _, self := n.log.Leader(); self {
				ml = n
				return true
			}
		}
		return false
	})
	var res []byte
	waitFor(t, testTimeout, "a majority commit", func() bool {
		var err error
		res, _, err = ml.log.Propose(context.Background(), casCmd("p", "before", "majority"))
		return err == nil
	})
	if string(res) != "ok" {
		t.Fatalf("majority cas: %q", res)
	}
	for _, n := range minority {
		if v := n.fsm.get("p"); v != "before" {
			t.Fatalf("%s sees %q while cut off", n.name, v)
		}
		if _, _, err := n.log.Propose(context.Background(), setCmd("q", "minority")); err == nil {
			t.Fatalf("%s committed while cut off", n.name)
		}
	}
	c.block(nil, nil)
	c.waitState(map[string]string{"p": "majority"})
}

// TestRaft_OutsiderCannotVoteOrAppend: a node without the cluster secret
// that reaches the Raft ports gets no RPC through: a vote request with a
// huge term and an append both fail, and no node's term or leader moves.
func TestRaft_OutsiderCannotVoteOrAppend(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startAll(false, "a", "b", "c")
	c.waitVoters("a", "b", "c")
	l := c.leader()
	ld := l.log.Leadership()
	o := newOutsider(t, "not-the-cluster-secret-0123456789")
	for _, n := range c.live() {
		a := n.log.Advert()
		if err := o.vote(a, 1_000_000); err == nil {
			t.Errorf("%s: the outsider's vote request went through", n.name)
		}
		if err := o.appendEntries(a, 1_000_000); err == nil {
			t.Errorf("%s: the outsider's append went through", n.name)
		}
	}
	// An insider (the right secret) would be heard: the check is the secret.
	in := newOutsider(t, testSecret)
	if err := in.vote(c.live()[0].log.Advert(), 1); err != nil {
		t.Fatalf("an insider's RPC failed: %v", err)
	}
	if got := c.leader(); got != l || got.log.Leadership().Term != ld.Term {
		t.Fatalf("leadership moved: %s term %d, was %s term %d", got.name, got.log.Leadership().Term, l.name, ld.Term)
	}
}

// TestRaft_RestartKeepsIdentityAndState: every node of a three-node
// cluster with data directories is shut down and started again (on new
// ports): each keeps its server id, the cluster elects a leader through the
// addresses the membership advertises now, the state is back, and commits
// go on.
func TestRaft_RestartKeepsIdentityAndState(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startAll(true, "a", "b", "c")
	c.waitVoters("a", "b", "c")
	want := make(map[string]string)
	for i := range 20 {
		k := fmt.Sprintf("k%d", i)
		c.propose(setCmd(k, "v"))
		want[k] = "v"
	}
	c.waitState(want)
	ids := make(map[string]string)
	for _, n := range c.live() {
		ids[n.name] = n.log.Advert().ServerID
		c.kill(n)
	}
	c.startAll(true, "a", "b", "c")
	for _, n := range c.live() {
		if a := n.log.Advert(); a.ServerID != ids[n.name] || !a.Bootstrapped || n.log.bootstraps.Load() != 0 {
			t.Fatalf("%s restarted as %+v (was %s), bootstraps %d", n.name, a, ids[n.name], n.log.bootstraps.Load())
		}
	}
	c.propose(setCmd("after", "v"))
	want["after"] = "v"
	c.waitState(want)
	c.waitVoters("a", "b", "c")
}

// TestRaft_WipedNodeRejoinsAsNewServer: a voter that lost its data
// directory comes back under a new server id; the leader removes the old
// id, adds the new one as a non-voter, promotes it once caught up, and its
// state is rebuilt from the others.
func TestRaft_WipedNodeRejoinsAsNewServer(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startAll(true, "a", "b", "c")
	c.waitVoters("a", "b", "c")
	c.propose(setCmd("k", "v"))
	var victim *testNode
	for _, n := range c.live() {
		if _, self := n.log.Leader(); !self {
			victim = n
		}
	}
	oldID := victim.log.Advert().ServerID
	c.kill(victim)
	if err := os.RemoveAll(victim.dir); err != nil {
		t.Fatal(err)
	}
	c.start(victim.name, true, nil)
	newID := victim.log.Advert().ServerID
	if newID == oldID {
		t.Fatal("same server id after the directory was lost")
	}
	c.waitVoters("a", "b", "c")
	waitFor(t, testTimeout, "the old id gone from every configuration", func() bool {
		for _, n := range c.live() {
			st := n.log.Status()
			for _, s := range append(st.Voters, st.NonVoters...) {
				if s.ID == oldID {
					return false
				}
			}
		}
		return true
	})
	if victim.log.bootstraps.Load() != 0 {
		t.Fatal("the wiped node bootstrapped a cluster of its own")
	}
	c.propose(setCmd("k2", "v"))
	c.waitState(map[string]string{"k": "v", "k2": "v"})
}

// TestRaft_SnapshotRestoreTruncate: with a low snapshot threshold the
// nodes take snapshots and truncate their logs; a node joining afterwards
// is brought up by a snapshot install; a node restarted from its directory
// restores its snapshot and replays the rest.
func TestRaft_SnapshotRestoreTruncate(t *testing.T) {
	c := newTestCluster(t, func(cfg *Config) {
		cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = 32, 20*time.Millisecond, 8
		cfg.SegmentSize = 64 << 10 // whole segments go once a snapshot covers them
	})
	c.startAll(true, "a", "b", "c")
	c.waitVoters("a", "b", "c")
	want := make(map[string]string)
	pad := strings.Repeat("x", 1000)
	for i := range 300 {
		k, v := fmt.Sprintf("k%03d", i), fmt.Sprint(i)+pad
		c.propose(setCmd(k, v))
		want[k] = v
	}
	c.waitState(want)
	waitFor(t, testTimeout, "snapshots and truncated logs everywhere", func() bool {
		for _, n := range c.live() {
			st := n.log.Status()
			if st.SnapshotIndex == 0 || st.FirstIndex <= 1 || st.LastIndex-st.FirstIndex > 200 {
				return false
			}
		}
		return true
	})
	d := c.start("d", true, nil)
	c.waitState(want, d)
	if st := d.log.Status(); st.SnapshotIndex == 0 {
		t.Fatalf("the late node holds no snapshot: %+v", st)
	}
	var b *testNode
	for _, n := range c.live() {
		if _, self := n.log.Leader(); !self && n.name != "d" {
			b = n
		}
	}
	c.kill(b)
	c.start(b.name, true, nil)
	c.waitState(want, b)
	c.propose(setCmd("after", "1"))
	want["after"] = "1"
	c.waitState(want)
}

// TestRaft_DeadVoterReplaced: with four members (three voters, one
// non-voter), a voter that dies is removed once dead past DeadAfter and
// the non-voter takes its seat.
func TestRaft_DeadVoterReplaced(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startAll(false, "a", "b", "c")
	c.waitVoters("a", "b", "c")
	c.start("d", false, nil)
	waitFor(t, testTimeout, "d a non-voter", func() bool {
		_, nv := voterNames(c.leader())
		return fmt.Sprint(nv) == "[d]"
	})
	l := c.leader()
	var victim *testNode
	for _, n := range c.live() {
		if n != l && n.name != "d" {
			victim = n
		}
	}
	c.kill(victim)
	rest := []string{"a", "b", "c", "d"}
	rest = slices.DeleteFunc(rest, func(s string) bool { return s == victim.name })
	c.waitVoters(rest...)
	for _, n := range c.live() {
		if _, nv := voterNames(n); len(nv) != 0 {
			t.Fatalf("%s: non-voters %v", n.name, nv)
		}
	}
	c.propose(setCmd("k", "v"))
	c.waitState(map[string]string{"k": "v"})
}

// TestRaft_BootstrapExpectWaits: with bootstrap-expect 3, two nodes wait
// (many reconcile rounds, no state, no leader); when the third appears
// only the smallest-named bootstraps, and all three are voters from the
// first configuration: no promotion is needed (none can happen here: a
// non-voter would have to be caught up for an hour).
func TestRaft_BootstrapExpectWaits(t *testing.T) {
	c := newTestCluster(t, func(cfg *Config) { cfg.BootstrapExpect = 3; cfg.StableAfter = time.Hour })
	c.startAll(false, "b", "c")
	waitFor(t, testTimeout, "20 reconcile rounds on each node", func() bool {
		for _, n := range c.live() {
			if n.log.rounds.Load() < 20 {
				return false
			}
		}
		return true
	})
	for _, n := range c.live() {
		if n.log.Advert().Bootstrapped || n.log.bootstraps.Load() != 0 || n.log.Status().Term != 0 {
			t.Fatalf("%s did not wait: %+v", n.name, n.log.Status())
		}
	}
	c.start("a", false, nil)
	c.waitVoters("a", "b", "c")
	for _, n := range c.live() {
		if got, want := n.log.bootstraps.Load(), map[bool]int64{true: 1}[n.name == "a"]; got != want {
			t.Fatalf("%s bootstrapped %d times", n.name, got)
		}
	}
}

// TestRaft_DrainingLeaderHandsOver: with four members (three voters), a
// leader whose node drains hands its leadership to another voter, which
// demotes it and promotes the fourth member in its place.
func TestRaft_DrainingLeaderHandsOver(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startAll(false, "a", "b", "c")
	c.waitVoters("a", "b", "c")
	c.start("d", false, nil)
	waitFor(t, testTimeout, "d a non-voter", func() bool {
		_, nv := voterNames(c.leader())
		return fmt.Sprint(nv) == "[d]"
	})
	old := c.leader()
	c.update(old.name, func(m *Member) { m.Draining = true })
	var l *testNode
	waitFor(t, testTimeout, "a new leader", func() bool {
		l = c.leader()
		return l != old
	})
	waitFor(t, testTimeout, "the drained node demoted", func() bool {
		v, nv := voterNames(l)
		return len(v) == 3 && !slices.Contains(v, old.name) && slices.Contains(nv, old.name)
	})
	c.propose(setCmd("k", "v"))
	c.waitState(map[string]string{"k": "v"})
}

// TestRaft_Refusals: a command over MaxCommand, an expired context and a
// shut down log are refused without reaching the FSM; Status and Leader
// still answer after Shutdown, which is idempotent.
func TestRaft_Refusals(t *testing.T) {
	c := newTestCluster(t, func(cfg *Config) { cfg.MaxCommand = 16 })
	a := c.start("a", false, nil)
	c.leader()
	if _, _, err := a.log.Propose(context.Background(), setCmd("key", "a value too long")); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, _, err := a.log.Propose(ctx, setCmd("k", "v")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expired: %v", err)
	}
	if err := a.log.Barrier(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expired barrier: %v", err)
	}
	r := a.log
	c.shutdown(a)
	if err := r.Shutdown(); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	if _, _, err := r.Propose(context.Background(), setCmd("k", "v")); !errors.Is(err, ErrShutdown) {
		t.Fatalf("after shutdown: %v", err)
	}
	if err := r.Barrier(context.Background()); !errors.Is(err, ErrShutdown) {
		t.Fatalf("barrier after shutdown: %v", err)
	}
	if st := r.Status(); st.State != "shutdown" || st.Self || len(st.Voters) != 1 {
		t.Fatalf("status after shutdown: %+v", st)
	}
	if _, self := r.Leader(); self {
		t.Fatal("a shut down log leads")
	}
	if a.fsm.applied != 0 {
		t.Fatalf("%d commands applied", a.fsm.applied)
	}
}

// TestConfig_Validate: defaults validate; each bound is enforced.
func TestConfig_Validate(t *testing.T) {
	ok := Config{Node: "a", Bind: "127.0.0.1:0"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Config){
		func(c *Config) { c.Node = "" },
		func(c *Config) { c.Bind = "" },
		func(c *Config) { c.BootstrapExpect = -1 },
		func(c *Config) { c.HeartbeatTimeout, c.ElectionTimeout = 2*time.Second, time.Second },
		func(c *Config) { c.LeaderLeaseTimeout = 2 * time.Second },
		func(c *Config) { c.MaxAppendEntries = 2000 },
		func(c *Config) { c.SnapshotRetain = -1 },
		func(c *Config) { c.SegmentSize = 1000 },
		func(c *Config) { c.MaxVoters = 4 },
		func(c *Config) { c.DeadAfter = -time.Second },
		func(c *Config) { c.MaxInbound = -1 },
		func(c *Config) { c.MaxCommand = -1 },
	}
	for i, mod := range bad {
		c := ok
		mod(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("case %d: %v", i, err)
		}
	}
	long := Config{Node: strings.Repeat("n", MaxNodeName+1), Bind: "127.0.0.1:0"}
	if _, err := NewRaft(long, newKV()); !errors.Is(err, ErrConfig) {
		t.Errorf("long name: %v", err)
	}
	unspec := Config{Node: "a", Bind: "0.0.0.0:0"}
	if _, err := NewRaft(unspec, newKV()); !errors.Is(err, ErrConfig) {
		t.Errorf("unspecified advertise: %v", err)
	}
}

// TestRaft_TransferAfterShutdownAnswers: a leadership transfer asked of
// a log that shut down answers at once with ErrShutdown. raft queues the
// request in a buffered channel its stopped loop never reads again, so a
// request that got queued (one of two, raft's select picks at random)
// waited forever (a test's transfer to a node killed meanwhile: 23 min).
func TestRaft_TransferAfterShutdownAnswers(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startAll(false, "a", "b", "c")
	c.waitVoters("a", "b", "c")
	l := c.leader()
	other := "a"
	if l.name == "a" {
		other = "b"
	}
	log := l.log
	c.shutdown(l)
	for i := 0; i < 20; i++ {
		done := make(chan error, 1)
		go func() { done <- log.TransferLeadership(other) }() // awaited below
		select {
		case err := <-done:
			if !errors.Is(err, ErrShutdown) {
				t.Fatalf("transfer %d after the shutdown: %v, want ErrShutdown", i, err)
			}
		case <-time.After(testTimeout):
			t.Fatalf("transfer %d after the shutdown did not answer in %v", i, testTimeout)
		}
	}
}

// TestRaft_ShutdownAnswersAConfigurationChange: Shutdown stops raft only
// once no one waits for its answer (Raft.op), so a configuration change the
// reconcile loop waits for, and a proposal, are answered. hashicorp/raft hands a committed
// configuration entry to its FSM goroutine, which stops at the shutdown
// without answering what it had not taken yet, and a configuration
// change's future does not watch the shutdown: stopped first, raft left
// the reconcile loop, and Shutdown with it, waiting forever (an engine
// test's cluster shutdown hung so for 17 minutes). Here the change is
// committed behind a command the FSM holds; raft must not be shut down
// while it waits, and the change must succeed once the FSM goes on.
func TestRaft_ShutdownAnswersAConfigurationChange(t *testing.T) {
	c := newTestCluster(t, func(cfg *Config) { cfg.ReconcileInterval = time.Hour })
	c.gate, c.entered = make(chan struct{}), make(chan struct{}, 1)
	var open sync.Once
	release := func() { open.Do(func() { close(c.gate) }) }
	t.Cleanup(release) // before the cluster's shutdown, should the test fail first
	c.startAll(false, "a")
	a := c.leader()
	r := a.log
	go func() { _, _, _ = r.Propose(context.Background(), []byte{'g'}) }() // answered once the gate opens
	<-c.entered
	changed := make(chan error, 1)
	r.wg.Add(1) // as the reconcile loop: one of the log's own goroutines
	r.g.Go(func() {
		changed <- r.applyChange(change{Kind: addNonvoter, ID: "x@0000000000000001", Addr: "127.0.0.1:1"})
	}, r.wg.Done)
	waitFor(t, testTimeout, "the change appended", func() bool {
		f := r.raft.GetConfiguration()
		if f.Error() != nil {
			return false
		}
		for _, s := range f.Configuration().Servers {
			if s.ID == "x@0000000000000001" {
				return true
			}
		}
		return false
	})
	appended := r.raft.LastIndex()
	proposed := make(chan error, 1)
	go func() { // awaited below
		res, _, err := r.Propose(context.Background(), setCmd("k", "v"))
		if err == nil && string(res) != "ok" {
			err = fmt.Errorf("result %q", res)
		}
		proposed <- err
	}()
	waitFor(t, testTimeout, "the proposal appended", func() bool { return r.raft.LastIndex() > appended })
	down := make(chan error, 1)
	go func() { down <- r.Shutdown() }() // awaited below
	<-r.stop
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if r.raft.State() == raft.Shutdown {
			t.Error("raft was shut down while a configuration change of the log's own goroutine waited")
			break
		}
		time.Sleep(time.Millisecond) // a poll: nothing may happen in this second
	}
	release()
	select {
	case err := <-changed:
		if err != nil {
			t.Errorf("the configuration change: %v, want it committed", err)
		}
	case <-time.After(testTimeout):
		t.Fatalf("the configuration change was not answered in %v", testTimeout)
	}
	select {
	case err := <-proposed:
		if err != nil {
			t.Errorf("the proposal: %v, want it committed", err)
		}
	case <-time.After(testTimeout):
		t.Fatalf("the proposal was not answered in %v", testTimeout)
	}
	select {
	case <-down:
	case <-time.After(testTimeout):
		t.Fatalf("Shutdown did not return in %v", testTimeout)
	}
}
