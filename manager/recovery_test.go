package manager

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
)

// TestDecideRecovery: which tail survives, what is sealed, what is lost,
// and a recovery left half done by a manager that died.
func TestDecideRecovery(t *testing.T) {
	set := []string{"a", "b", "c"}
	gone := errors.New("gone")
	tail := func(n string, held uint32) tailReport { return tailReport{Node: n, Tail: role.Tail{Held: held}} }
	final := func(n string, held uint32) tailReport {
		return tailReport{Node: n, Tail: role.Tail{Held: held, Final: true}}
	}
	dead := func(n string) tailReport { return tailReport{Node: n, Err: gone} }
	for _, tc := range []struct {
		name  string
		tails []tailReport
		succ  uint64
		want  recoveryPlan
	}{
		{"a follower died: the shortest survivor's length, both kept",
			[]tailReport{tail("a", 10), tail("b", 8), dead("c")}, 0, recoveryPlan{Len: 8, Keep: []string{"a", "b"}}},
		{"the orderer died: the followers' common prefix",
			[]tailReport{dead("a"), tail("b", 8), tail("c", 9)}, 0, recoveryPlan{Len: 8, Keep: []string{"b", "c"}}},
		{"N=2, the follower died: everything the orderer holds",
			[]tailReport{tail("a", 10), dead("b")}, 0, recoveryPlan{Len: 10, Keep: []string{"a"}}},
		{"every replica gone: lost",
			[]tailReport{dead("a"), dead("b"), dead("c")}, 0, recoveryPlan{Lost: true}},
		{"the manager died after sealing one replica: its length stands",
			[]tailReport{tail("a", 12), final("b", 9), tail("c", 11)}, 0, recoveryPlan{Len: 9, Keep: []string{"a", "b", "c"}}},
		{"a survivor shorter than an earlier recovery's length is dropped",
			[]tailReport{dead("a"), final("b", 9), tail("c", 7)}, 0, recoveryPlan{Len: 9, Keep: []string{"b"}, Drop: []string{"c"}}},
		{"the successor this manager recorded is no conflict",
			[]tailReport{{Node: "a", Tail: role.Tail{Held: 5, Succ: 77}}, tail("b", 5)}, 77, recoveryPlan{Len: 5, Keep: []string{"a", "b"}}},
		{"another manager's successor: taken",
			[]tailReport{{Node: "a", Tail: role.Tail{Held: 5, Succ: 78}}, tail("b", 5)}, 77, recoveryPlan{Len: 5, Keep: []string{"a", "b"}, Taken: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideRecovery(set, tc.tails, tc.succ); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDecideRecovery_NeverLosesAnAcknowledgedRecord: a differential check
// against the invariant itself. Every replica holds at least the durable
// count d (what the orderer acknowledged); whatever subset fewer than all
// dies, the decided length is at least d.
func TestDecideRecovery_NeverLosesAnAcknowledgedRecord(t *testing.T) {
	set := []string{"a", "b", "c"}
	for d := uint32(0); d < 4; d++ {
		for extra := 0; extra < 64; extra++ { // what each holds beyond d: 0..3 each
			held := []uint32{d + uint32(extra&3), d + uint32(extra>>2&3), d + uint32(extra>>4&3)}
			for deadMask := 0; deadMask < 7; deadMask++ { // never all three
				var tails []tailReport
				for i, n := range set {
					tr := tailReport{Node: n, Tail: role.Tail{Held: held[i]}}
					if deadMask&(1<<i) != 0 {
						tr.Err = errors.New("dead")
					}
					tails = append(tails, tr)
				}
				p := decideRecovery(set, tails, 0)
				if p.Lost || p.Len < d || len(p.Keep) == 0 {
					t.Fatalf("d=%d held=%v dead=%03b: plan %+v loses acknowledged records", d, held, deadMask, p)
				}
				for _, n := range p.Keep {
					i := map[string]int{"a": 0, "b": 1, "c": 2}[n]
					if held[i] < p.Len {
						t.Fatalf("kept %s holding %d < %d", n, held[i], p.Len)
					}
				}
			}
		}
	}
}

// TestNodeDown_RecoversReplicatedStreamlets: a replica's death fences the
// survivors, seals the open streamlet at what they all hold (every
// acknowledged record: nothing lost), releases the orderer's waiting acks
// and makes the next grant a new streamlet with a full set of live
// replicas; the orderer's death keeps the followers' common prefix.
func TestNodeDown_RecoversReplicatedStreamlets(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	for _, tc := range []struct {
		name     string
		kill     string
		wantLen  uint64
		wantKeep []string
	}{
		{"follower dies", "b", 5, []string{"a"}},
		{"orderer dies", "a", 3, []string{"b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, m, g := fiveHeldThree(t, "m", clock) // three acknowledged
			c.dead[tc.kill] = true
			m.NodeDown(tc.kill)
			info, _ := m.Info("ch", false)
			ref := info.Streamlets[0]
			if !ref.Closed || ref.Lost || ref.End != g.First+tc.wantLen || !reflect.DeepEqual(ref.Set(), tc.wantKeep) {
				t.Fatalf("after recovery %+v, want closed at +%d on %v", ref, tc.wantLen, tc.wantKeep)
			}
			survivor := c.hs[tc.wantKeep[0]].Streamlet(g.Streamlet)
			if n, final := survivor.Durable(); uint64(n) != tc.wantLen || !final {
				t.Fatalf("survivor durable %d final %v", n, final)
			}
			g2, err := m.WriteGrant("ch", 0)
			if err != nil || g2.Streamlet == g.Streamlet || g2.First != g.First+tc.wantLen || len(g2.Set()) != 2 {
				t.Fatalf("next grant %+v %v", g2, err)
			}
			for _, n := range g2.Set() {
				if n == tc.kill {
					t.Fatalf("next streamlet on the dead node: %v", g2.Set())
				}
			}
			if m.Recoveries() != 1 {
				t.Fatalf("%d recoveries", m.Recoveries())
			}
		})
	}
}

// TestMissingReplicas: a rebuild marks for recovery the replicated
// streamlets whose recorded set names a node that did not report them
// (pure), whatever the missing node's place in the set; complete sets,
// single copies, lost entries and marks are left alone.
func TestMissingReplicas(t *testing.T) {
	rep := func(id uint64, node string, set ...string) role.Hosted {
		return role.Hosted{ID: id, Epoch: 1, First: 100, Host: node, Len: 5, Replicas: set}
	}
	for _, tc := range []struct {
		name string
		in   []role.Hosted
		want map[uint64]bool
	}{
		{"complete", []role.Hosted{rep(1, "a", "a", "b"), rep(1, "b", "a", "b")}, nil},
		{"a follower missing", []role.Hosted{rep(1, "a", "a", "d", "b"), rep(1, "b", "a", "d", "b")}, map[uint64]bool{1: true}},
		{"the orderer missing", []role.Hosted{rep(1, "b", "d", "b")}, map[uint64]bool{1: true}},
		{"only the orderer left", []role.Hosted{rep(1, "a", "a", "b"), rep(2, "a", "a", "b"), rep(2, "b", "a", "b")}, map[uint64]bool{1: true}},
		{"single copies", []role.Hosted{{ID: 1, Host: "a", Len: 3}, {ID: 2, Host: "b", Len: 3, Replicas: []string{"b"}}}, nil},
		{"lost, and a mark", []role.Hosted{{ID: 1, Host: "a", Replicas: []string{"a", "b"}, Lost: true},
			{ID: 2, Host: "a", Replicas: []string{"a", "b"}, Mark: true}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := missingReplicas(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("missingReplicas = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRebuild_RecoversAReplicaThatDiedWithTheManager: the manager of a
// channel and a follower of its streamlets die at once (the fault suite's
// kill-two-r3: N = 3, two of five nodes killed). The orderer a wrote 5
// records; the dead follower b had confirmed 3, so a shows 3, and would
// never show more. The next manager learns of the channel only by its
// rebuild, after b's NodeDown ran. It must recover the streamlet (fence
// the survivors, seal them at what they all hold: a, the one left, holds
// 5, never acknowledged but shown from now on) rather than grant it, whose
// writes would never be acknowledged, or seal it at the orderer, which
// ends it in the list at 5 while a shows 3 forever: readers wait at the
// fourth and a copy of it never completes. Open: the next grant recovers
// it; closed (sealed at its orderer before the deaths): the next tick
// does (not while the node has no majority), and only then is it copied.
func TestRebuild_RecoversAReplicaThatDiedWithTheManager(t *testing.T) {
	for _, closed := range []bool{false, true} {
		t.Run(map[bool]string{false: "open", true: "closed"}[closed], func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			clock := func() time.Time { return now }
			c, _, g := fiveHeldThree(t, "m1", clock) // manager m1, which dies
			a := c.hs["a"].Streamlet(g.Streamlet)
			if closed {
				if _, err := c.hs["a"].Seal(g.Streamlet, 0, ""); err != nil {
					t.Fatal(err)
				}
			}
			// m1 and b die; m2 manages the channel from now on.
			c.dead["b"] = true
			m2 := replicaManager(t, c, 2, clock)
			m2.cfg.Node = "m2"
			if closed {
				if _, ok := m2.Info("ch", true); !ok {
					t.Fatal("m2 does not know the channel")
				}
				m2.SetCluster(noQuorum{c})
				for _, act := range m2.Tick(now) {
					if act.Kind == ActRecover {
						t.Fatal("a recovery without a majority")
					}
				}
				m2.SetCluster(c)
				for _, act := range m2.Tick(now) {
					if act.Kind == ActCopy {
						t.Fatalf("a copy of streamlet %d before its recovery", act.Ref.ID)
					}
				}
				m2.Do(m2.Tick(now))
			}
			g2, err := m2.WriteGrant("ch", 0)
			if err != nil || g2.Streamlet == g.Streamlet {
				t.Fatalf("m2's grant %+v %v: want a new streamlet after the recovered one", g2, err)
			}
			if g2.First != g.First+5 {
				t.Fatalf("next streamlet starts at +%d, want +5 (what the survivors hold)", g2.First-g.First)
			}
			info, _ := m2.Info("ch", false)
			if ref := info.Streamlets[0]; ref.ID != g.Streamlet || !ref.Closed || ref.Lost || ref.End != g.First+5 {
				t.Fatalf("recovered entry %+v, want closed at +5", ref)
			}
			if n, final := a.Durable(); n != 5 || !final || !a.Buf().Sealed() {
				t.Fatalf("a shows %d (final %v, sealed %v), want 5 and sealed: readers and copies read to the end", n, final, a.Buf().Sealed())
			}
			if m2.Recoveries() != 1 {
				t.Fatalf("%d recoveries, want 1", m2.Recoveries())
			}
		})
	}
}

// TestRecovery_ClosedStreamletShorterThanListed: a replicated streamlet
// closed at its orderer's end (the seal counts what the orderer wrote,
// acknowledged or not) whose orderer then dies is recovered at what the
// follower holds; the rest, never acknowledged, is listed lost, so that
// readers get GAP lost for it instead of waiting at a position no replica
// will ever hold, and the positions are not handed out again. Before, the
// list kept the orderer's end: readers of the follower stalled there for
// good (the N = 2 rolling restart's stalled subscriber).
func TestRecovery_ClosedStreamletShorterThanListed(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	c, m, g := fiveHeldThree(t, "m", clock) // three acknowledged, two written at a only
	now = now.Add(5 * time.Second)          // past the lease: the next grant closes it at a's end
	g2, err := m.WriteGrant("ch", 0)
	if err != nil || g2.First != g.First+5 {
		t.Fatalf("next grant %+v %v, want one at +5", g2, err)
	}
	c.dead["a"] = true
	m.NodeDown("a")
	info, _ := m.Info("ch", false)
	if len(info.Streamlets) != 3 {
		t.Fatalf("list %+v, want the recovered streamlet, a lost range and the next", info.Streamlets)
	}
	s0, hole := info.Streamlets[0], info.Streamlets[1]
	if s0.ID != g.Streamlet || s0.End != g.First+3 || s0.Lost || !reflect.DeepEqual(s0.Set(), []string{"b"}) {
		t.Fatalf("recovered %+v, want [+0, +3) on b", s0)
	}
	if !hole.Lost || hole.First != g.First+3 || hole.End != g.First+5 {
		t.Fatalf("after it %+v, want [+3, +5) lost", hole)
	}
	if i := info.Locate(g.First + 3); i != 1 {
		t.Fatalf("position +3 is in entry %d, want the lost range", i)
	}
	if next := info.Streamlets[2]; next.ID != g2.Streamlet || next.First != g.First+5 {
		t.Fatalf("next %+v", next)
	}
	g3, err := m.WriteGrant("ch", 0)
	if err != nil || g3.First < g.First+5 {
		t.Fatalf("grant after recovery %+v %v: reuses a lost position", g3, err)
	}
}

// TestWriteGrant_RetriedSetMakesAFollowerTheOrderer: the first replica
// chosen refuses the streamlet (its node drains, which the manager's view
// does not show yet) after the second hosted it as a follower; the retry,
// with the same id, makes that node the orderer of a new set. It must
// start forwarding to its new follower like any orderer (the host's
// onOrder hook). Before, the host took the new set silently: nothing was
// forwarded, no record ever became durable, and the channel's readers and
// publishers stalled until the orderer left (the N = 2 rolling restart).
func TestWriteGrant_RetriedSetMakesAFollowerTheOrderer(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	c := newHosts(clock, "b", "c", "a")
	var ordered []string
	for _, n := range c.order {
		c.hs[n].SetReplicationHooks(func(s *host.Streamlet) { ordered = append(ordered, fmt.Sprintf("%s:%d", n, s.ID())) }, nil)
	}
	m := replicaManager(t, c, 2, clock)
	m.cfg.Node = "m"
	if g, err := m.WriteGrant("ch", 0); err != nil || !reflect.DeepEqual(g.Set(), []string{"b", "c"}) {
		t.Fatalf("first grant %+v %v, want one on [b c]", g, err)
	}
	ordered = nil
	c.hs["b"].SetDraining()
	now = now.Add(5 * time.Second) // past the lease: the next grant opens the successor
	g, err := m.WriteGrant("ch", 0)
	if err != nil || !reflect.DeepEqual(g.Set(), []string{"c", "a"}) {
		t.Fatalf("grant %+v %v, want one on [c a]", g, err)
	}
	s := c.hs["c"].Streamlet(g.Streamlet)
	if s == nil || !s.Orderer() || !reflect.DeepEqual(s.Replicas(), []string{"c", "a"}) {
		t.Fatalf("c's streamlet %v: orderer %v", s, s != nil && s.Orderer())
	}
	if want := []string{fmt.Sprintf("c:%d", g.Streamlet)}; !reflect.DeepEqual(ordered, want) {
		t.Fatalf("onOrder calls %v, want %v", ordered, want)
	}
}

// noQuorum is a cluster whose node has no majority.
type noQuorum struct{ hosts }

func (noQuorum) Quorate() bool { return false }
