package manager

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/role"
)

// Behaviours 1, 2, 3 and 15: a never-used channel is created by its first
// grant at position 1 of a new epoch; a full streamlet refuses, and the
// next grant continues exactly where it ended, with no gap and no
// duplicate.
func TestWriteGrant_NewChannelStartsAt1AndRollsOverWithoutGaps(t *testing.T) {
	e := newEnv(t, 1, "a")
	g := e.grant("chat", 0)
	if g.First != 1 || g.Epoch == 0 || g.LimitMsgs != 100 {
		t.Fatalf("first grant %+v", g)
	}
	pos := e.publish(g, 100)
	if pos[0] != 1 || pos[99] != 100 {
		t.Fatalf("positions %d..%d", pos[0], pos[99])
	}
	if _, err := e.host("a").Streamlet(g.Streamlet).Append([]byte("x"), e.clock.now().UnixNano()); !errors.Is(err, role.ErrStreamletClosed) {
		t.Fatalf("append to a full streamlet: %v", err)
	}
	g2 := e.grant("chat", g.Streamlet)
	if g2.First != 101 || g2.Epoch != g.Epoch || g2.Streamlet == g.Streamlet {
		t.Fatalf("second grant %+v after %+v", g2, g)
	}
	e.publish(g2, 5)
	g3 := e.grant("chat", g2.Streamlet) // not full: sealed at 105
	if g3.First != 106 {
		t.Fatalf("third grant starts at %d, want 106", g3.First)
	}
	e.checkContiguous("chat")
	if c := e.channel("chat"); len(c.List) != 3 || c.List[1].End != 106 {
		t.Fatalf("list %+v", c.List)
	}
}

// Concurrent grants of a new channel share one streamlet (one OPEN
// committed), and so do concurrent asks after the same refusing streamlet.
func TestWriteGrant_ConcurrentAsksShareOneStreamlet(t *testing.T) {
	e := newEnv(t, 1, "a")
	var wg sync.WaitGroup
	got := make([]role.Grant, 16)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = e.grant("c", 0) }()
	}
	wg.Wait()
	for _, g := range got {
		if g.Streamlet != got[0].Streamlet {
			t.Fatalf("grants name streamlets %d and %d", got[0].Streamlet, g.Streamlet)
		}
	}
	first := got[0].Streamlet
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = e.grant("c", first) }()
	}
	wg.Wait()
	for _, g := range got {
		if g.Streamlet == first || g.Streamlet != got[0].Streamlet {
			t.Fatalf("after %d: grants %d and %d", first, got[0].Streamlet, g.Streamlet)
		}
	}
	if c := e.channel("c"); len(c.List) != 2 {
		t.Fatalf("%d streamlets, want 2", len(c.List))
	}
}

// Behaviour 7 and the lifecycle: a lease that ended is closed at its real
// end by the tick; a closed streamlet is freed at its TTL (on its host
// too), never before its predecessor; an idle channel without readers is
// dropped after a TTL, one with readers is not.
func TestTick_LeaseEndExpiryAndDrop(t *testing.T) {
	e := newEnv(t, 1, "a")
	g := e.grant("c", 0)
	e.publish(g, 7)
	e.clock.advance(life)
	e.m.Tick(e.clock.now())
	c := e.channel("c")
	if r := c.List[0]; !r.Closed || r.End != 8 {
		t.Fatalf("after the lease: %+v", r)
	}
	e.clock.advance(ttl - time.Second)
	e.m.Tick(e.clock.now())
	if len(e.channel("c").List) != 1 {
		t.Fatal("expired before its TTL")
	}
	e.clock.advance(time.Second)
	e.m.Tick(e.clock.now())
	if c = e.channel("c"); len(c.List) != 0 || c.Next != 8 {
		t.Fatalf("after the TTL: %+v", c)
	}
	if e.host("a").Streamlet(g.Streamlet) != nil {
		t.Fatal("the host still holds the expired streamlet")
	}
	e.m.Interest("c", "b", 1)
	e.clock.advance(ttl)
	e.m.Tick(e.clock.now())
	if _, ok := e.st.Channel("c"); !ok {
		t.Fatal("a channel with readers was dropped")
	}
	e.m.Interest("c", "b", -1)
	e.clock.advance(time.Second)
	e.m.Tick(e.clock.now())
	if _, ok := e.st.Channel("c"); ok {
		t.Fatal("an idle channel without readers was kept")
	}
	// A new incarnation: a new epoch, position 1 again.
	if g2 := e.grant("c", 0); g2.First != 1 || g2.Epoch <= g.Epoch {
		t.Fatalf("recreated: %+v (old epoch %d)", g2, g.Epoch)
	}
}

// A manager that starts leading drops no idle channel before DropGrace:
// the reader nodes' interest has to reach it first.
func TestTick_NoDropDuringTheGrace(t *testing.T) {
	e := newEnv(t, 1, "a")
	e.m.cfg.DropGrace = 10 * time.Second
	if _, _, err := e.m.Info("c", true); err != nil {
		t.Fatal(err)
	}
	e.clock.advance(ttl)
	e.m.Lead()
	e.m.Tick(e.clock.now())
	if _, ok := e.st.Channel("c"); !ok {
		t.Fatal("dropped within the grace")
	}
	e.clock.advance(10 * time.Second)
	e.m.Tick(e.clock.now())
	if _, ok := e.st.Channel("c"); ok {
		t.Fatal("not dropped after the grace")
	}
}

// Behaviour 13 and the recovery rule: with two replicas, the orderer cut
// off from the manager, the next grant recovers the streamlet from the
// follower: every acknowledged (visible) record is kept, records only the
// follower holds are kept too, and the next streamlet starts right after,
// so no position is acknowledged twice. The cut-off orderer drops its
// replica when it learns the committed end.
func TestRecovery_OrdererUnreachableKeepsEveryAcknowledgedRecord(t *testing.T) {
	e := newEnv(t, 2, "a", "b", "c")
	g := e.grant("c", 0)
	o, f := g.Replicas[0], g.Replicas[1]
	e.publish(g, 10)
	os := e.host(o).Streamlet(g.Streamlet)
	for i := 0; i < 3; i++ {
		if _, err := os.Append([]byte("unacked"), e.clock.now().UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	e.replicate(g, 11) // the follower holds one of the three
	if n, _ := os.Durable(); n != 11 {
		t.Fatalf("durable %d, want 11", n)
	}
	e.cl.set(o, func(n *testNode) { n.down = true })
	g2 := e.grant("c", g.Streamlet)
	c := e.channel("c")
	if r := c.List[0]; !r.Closed || r.Lost || r.End != g.First+11 || !slices.Equal(r.Set(), []string{f}) {
		t.Fatalf("recovered %+v", r)
	}
	if g2.First != g.First+11 || slices.Contains(g2.Replicas, o) {
		t.Fatalf("next grant %+v", g2)
	}
	if e.host(o).Streamlet(g.Streamlet) != nil {
		t.Fatal("the cut-off orderer kept a replica the list does not name")
	}
	e.checkContiguous("c")
}

// With a single copy, a host that cannot be reached but is not known dead
// is waited for (the writers get a retriable refusal, nothing is announced
// lost); once the membership declares it gone, its streamlet is lost up to
// the largest end it could have reached and the channel continues above.
func TestRecovery_SingleCopyWaitsUntilItsHostIsGone(t *testing.T) {
	e := newEnv(t, 1, "a", "b")
	g := e.grant("c", 0)
	e.publish(g, 5)
	e.cl.set(g.Host, func(n *testNode) { n.down = true })
	if _, err := e.m.WriteGrant("c", g.Streamlet); !errors.Is(err, role.ErrUnavailable) {
		t.Fatalf("grant while the host is unreachable: %v", err)
	}
	if r := e.channel("c").List[0]; r.Closed {
		t.Fatalf("closed while its host may come back: %+v", r)
	}
	e.cl.set(g.Host, func(n *testNode) { n.gone = true })
	g2 := e.grant("c", g.Streamlet)
	if r := e.channel("c").List[0]; !r.Lost || r.End != g.First+100 {
		t.Fatalf("lost streamlet %+v", r)
	}
	if g2.First != g.First+100 {
		t.Fatalf("continues at %d, want %d", g2.First, g.First+100)
	}
}

// A host that refuses the new streamlet: the committed streamlet (nobody
// can have written it: its grant was never handed out) is closed empty and
// the next try goes to another node.
func TestOpen_RefusedHostClosesTheStreamletEmpty(t *testing.T) {
	e := newEnv(t, 1, "a", "b")
	e.host("a").SetDraining() // refuses HOST though the cluster still offers it
	g := e.grant("c", 0)
	if g.Host != "b" {
		t.Fatalf("granted on %s", g.Host)
	}
	c := e.channel("c")
	if len(c.List) != 2 || !c.List[0].Closed || c.List[0].End != c.List[0].First || c.List[1].First != c.List[0].First {
		t.Fatalf("list %+v", c.List)
	}
}

// Two managers that both act (a stale leader and the new one) never both
// extend a channel: every rollover either commits or conflicts, and the
// committed list stays contiguous with every written position kept.
func TestTwoManagersNeverBothExtendAChannel(t *testing.T) {
	e := newEnv(t, 1, "a")
	m2 := New(e.m.cfg)
	m2.Lead()
	var wg sync.WaitGroup
	for _, m := range []*Manager{e.m, m2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var after uint64
			for i := 0; i < 50; i++ {
				g, err := m.WriteGrant("c", after)
				if err != nil {
					t.Error(err)
					return
				}
				s := e.host("a").Streamlet(g.Streamlet)
				if s != nil {
					_, _ = s.Append([]byte("x"), e.clock.now().UnixNano())
				}
				after = g.Streamlet
			}
		}()
	}
	wg.Wait()
	e.checkContiguous("c")
	for _, r := range e.channel("c").List {
		if s := e.host("a").Streamlet(r.ID); s != nil && r.Closed && s.Buf().Len() != int(r.End-r.First) {
			t.Fatalf("streamlet %d holds %d, listed %d..%d", r.ID, s.Buf().Len(), r.First, r.End)
		}
	}
}

// NodeGone takes a dead node out of every closed streamlet; a replicated
// one keeps its other holder and is copied back up to its replica count by
// the next tick.
func TestNodeDown_AndReReplication(t *testing.T) {
	e := newEnv(t, 2, "a", "b", "c")
	g := e.grant("c", 0)
	e.publish(g, 4)
	e.grant("c", g.Streamlet)
	dead := g.Replicas[1]
	e.cl.set(dead, func(n *testNode) { n.gone = true })
	if err := e.m.NodeGone(dead, ""); err != nil {
		t.Fatal(err)
	}
	r := e.channel("c").List[0]
	if r.Lost || slices.Contains(r.Set(), dead) || len(r.Set()) != 1 {
		t.Fatalf("after NodeGone: %+v", r)
	}
	// Counted as it is now, not at the last scan: the closed streamlet
	// waits for a copy, and the open one waits for a recovery when the
	// dead node is one of its replicas (NODE_GONE leaves open sets to the
	// recovery).
	want := int64(1)
	if open, _ := e.channel("c").Open(); slices.Contains(open.Set(), dead) {
		want++
	}
	if _, _, _, waiting := e.m.CopyStats(); waiting != want {
		t.Fatalf("waiting %d before the copy, want %d", waiting, want)
	}
	e.clock.advance(time.Second)
	e.m.Tick(e.clock.now())
	r = e.channel("c").List[0]
	if len(r.Set()) != 2 || slices.Contains(r.Set(), dead) {
		t.Fatalf("not copied back to two holders: %+v", r)
	}
	if done, _, _, _ := e.m.CopyStats(); done == 0 {
		t.Fatal("no copy counted")
	}
	if s := e.host(r.Set()[0]).Streamlet(r.ID); s == nil || s.Buf().Len() != 4 {
		t.Fatalf("the new holder's copy: %v", s)
	}
}

// An orderer's report that it cannot reach a follower recovers the open
// streamlet with both kept when both answer, and keeps the pair from
// ordering and following one new streamlet.
func TestUnreachable_RecoversAndKeepsThePairApart(t *testing.T) {
	e := newEnv(t, 2, "a", "b", "c")
	g := e.grant("c", 0)
	e.publish(g, 3)
	o, f := g.Replicas[0], g.Replicas[1]
	r, err := e.m.Unreachable("c", g.Streamlet, o, f)
	if err != nil || r.Lost || r.Len != 3 {
		t.Fatalf("answer %+v, %v", r, err)
	}
	for i := 0; i < 6; i++ {
		g2 := e.grant("c", e.channel("c").TailID())
		if g2.Replicas[0] == o && slices.Contains(g2.Replicas, f) {
			t.Fatalf("new streamlet orders on %s and follows on %s: %v", o, f, g2.Replicas)
		}
	}
}

// A manager that is not the leader proposes nothing; its error says so.
func TestNotLeader(t *testing.T) {
	e := newEnv(t, 1, "a")
	e.log.fail = role.ErrNotLeader
	if _, err := e.m.WriteGrant("c", 0); !errors.Is(err, role.ErrNotLeader) {
		t.Fatalf("grant: %v", err)
	}
	e.m.Follow()
	if _, err := e.m.WriteGrant("c", 0); !errors.Is(err, role.ErrNotLeader) {
		t.Fatalf("grant after Follow: %v", err)
	}
}

// The retention budget's early expiry frees a prefix through the streamlet
// named; the open streamlet is never expired.
func TestExpire(t *testing.T) {
	e := newEnv(t, 1, "a")
	g := e.grant("c", 0)
	g2 := e.grant("c", g.Streamlet)
	if n, err := e.m.Expire("c", g2.Streamlet); n != 0 || err != nil {
		t.Fatalf("expired the open streamlet: %d, %v", n, err)
	}
	if n, err := e.m.Expire("c", g.Streamlet); n != 1 || err != nil {
		t.Fatalf("expire: %d, %v", n, err)
	}
	if c := e.channel("c"); len(c.List) != 1 || c.List[0].ID != g2.Streamlet {
		t.Fatalf("list %+v", c.List)
	}
}

// The single node's Cluster: one host, every streamlet on it.
func TestLocal_SingleNode(t *testing.T) {
	clock := &testClock{t: time.Unix(1_800_000_000, 0)}
	st := meta.New()
	h := host.New("solo", clock.now)
	m := New(Config{Node: "solo", NewID: h.NewID, Clock: clock.now, State: st, Log: &testLog{st: st},
		Limits:  func(string) role.Limits { return role.Limits{Msgs: 10, Size: 1 << 20, Life: life, TTL: ttl} },
		Cluster: Local("solo", h)})
	st.SetObserver(func(c meta.Change) { h.Apply(c); m.Changed(c) })
	m.Lead()
	g, err := m.WriteGrant("c", 0)
	if err != nil || g.Host != "solo" || g.First != 1 {
		t.Fatalf("grant %+v, %v", g, err)
	}
	info, found, err := m.Info("c", false)
	if err != nil || !found || info.Next != 1 || len(info.Streamlets) != 1 {
		t.Fatalf("info %+v %v %v", info, found, err)
	}
	if _, err := h.Streamlet(g.Streamlet).Append([]byte("x"), clock.now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	if info, _, _ = m.Info("c", false); info.Next != 2 {
		t.Fatalf("next %d after one message", info.Next)
	}
}

func TestDecideRecovery(t *testing.T) {
	set := []string{"a", "b", "c"}
	tail := func(n string, held uint32, final bool) tailReport {
		return tailReport{Node: n, Tail: role.Tail{Held: held, Final: final}}
	}
	gone := func(n string) tailReport { return tailReport{Node: n, Err: errHostGone} }
	for name, tc := range map[string]struct {
		tails []tailReport
		want  recoveryPlan
	}{
		"all answer":        {[]tailReport{tail("a", 9, false), tail("b", 7, false), tail("c", 8, false)}, recoveryPlan{Len: 7, Keep: set}},
		"orderer gone":      {[]tailReport{gone("a"), tail("b", 7, false), tail("c", 8, false)}, recoveryPlan{Len: 7, Keep: []string{"b", "c"}}},
		"one survivor":      {[]tailReport{gone("a"), gone("b"), tail("c", 8, false)}, recoveryPlan{Len: 8, Keep: []string{"c"}}},
		"none":              {[]tailReport{gone("a"), gone("b"), gone("c")}, recoveryPlan{Lost: true}},
		"earlier recovery":  {[]tailReport{tail("a", 9, false), tail("b", 8, true), tail("c", 8, false)}, recoveryPlan{Len: 8, Keep: set}},
		"short of a final":  {[]tailReport{tail("a", 6, false), tail("b", 8, true)}, recoveryPlan{Len: 8, Keep: []string{"b"}, Drop: []string{"a"}}},
		"final beats a min": {[]tailReport{tail("a", 9, true), tail("c", 10, false)}, recoveryPlan{Len: 9, Keep: []string{"a", "c"}}},
	} {
		if got := decideRecovery(set, tc.tails); !equalPlan(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", name, got, tc.want)
		}
	}
}

func equalPlan(a, b recoveryPlan) bool {
	return a.Lost == b.Lost && a.Len == b.Len && slices.Equal(a.Keep, b.Keep) && slices.Equal(a.Drop, b.Drop)
}

// Whatever subset of fewer than all replicas is lost, the recovered length
// covers every acknowledged record: acknowledged records are held by
// every replica, so by any survivor.
func TestDecideRecovery_NeverLosesAnAcknowledgedRecord(t *testing.T) {
	set := []string{"a", "b", "c"}
	for acked := uint32(0); acked < 4; acked++ {
		for extra := 0; extra < 27; extra++ { // what each replica holds beyond acked: 0..2 each
			held := []uint32{acked + uint32(extra%3), acked + uint32(extra/3%3), acked + uint32(extra/9%3)}
			for mask := 1; mask < 7; mask++ { // the survivors: a non-empty proper subset
				var tails []tailReport
				for i, n := range set {
					if mask&(1<<i) != 0 {
						tails = append(tails, tailReport{Node: n, Tail: role.Tail{Held: held[i]}})
					} else {
						tails = append(tails, tailReport{Node: n, Err: errHostGone})
					}
				}
				if p := decideRecovery(set, tails); p.Lost || p.Len < acked {
					t.Fatalf("held %v survivors %b: plan %+v loses acknowledged %d", held, mask, p, acked)
				}
			}
		}
	}
}

// A copy slot that frees takes the backlog's next streamlet at once: every
// streamlet a dead node leaves short of a holder is copied after one scan,
// by the workers that scan starts (at most maxCopies), with no scan in
// between. Each slot waited for the next tick before: at most maxCopies
// copies per tick (64 a second), and a node's death left hundreds of
// streamlets single for seconds (nemesis seed 1: the next kill lost one).
func TestCopies_AFreedSlotTakesTheNextJob(t *testing.T) {
	e := newEnv(t, 2, "a", "b", "c")
	var after uint64
	for range 3 * maxCopies {
		g := e.grant("ch", after)
		e.publish(g, 1)
		after = g.Streamlet
	}
	e.grant("ch", after) // closes the last
	e.cl.set("c", func(n *testNode) { n.gone = true })
	if err := e.m.NodeGone("c", ""); err != nil {
		t.Fatal(err)
	}
	short := 0
	for _, r := range e.channel("ch").List {
		if r.Closed && len(r.Set()) < 2 {
			short++
		}
	}
	if short <= maxCopies {
		t.Fatalf("%d streamlets short of a holder: the test needs more than %d", short, maxCopies)
	}
	e.cl.mu.Lock()
	e.cl.hold = true
	e.cl.mu.Unlock()
	e.clock.advance(time.Second)
	e.m.Tick(e.clock.now())
	e.cl.mu.Lock()
	workers := e.cl.held
	e.cl.held, e.cl.hold = nil, false
	e.cl.mu.Unlock()
	if len(workers) != maxCopies {
		t.Fatalf("%d copy workers started for %d streamlets, want %d", len(workers), short, maxCopies)
	}
	for _, w := range workers {
		w()
	}
	for _, r := range e.channel("ch").List {
		if r.Closed && len(r.Set()) != 2 {
			t.Fatalf("streamlet %d still held by %v after one scan's workers ran", r.ID, r.Set())
		}
	}
	if done, _, running, _ := e.m.CopyStats(); done != int64(short) || running != 0 {
		t.Fatalf("copies done %d running %d, want %d and 0", done, running, short)
	}
}
