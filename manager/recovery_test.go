package manager

import (
	"errors"
	"reflect"
	"testing"
	"time"

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
			c := newHosts(clock, "a", "b", "c")
			m := replicaManager(t, c, 2, clock)
			m.cfg.Node = "m" // the manager on a node of its own
			g, err := m.WriteGrant("ch", 0)
			if err != nil || !reflect.DeepEqual(g.Set(), []string{"a", "b"}) {
				t.Fatalf("grant %+v %v", g, err)
			}
			a, b := c.hs["a"].Streamlet(g.Streamlet), c.hs["b"].Streamlet(g.Streamlet)
			for i := 0; i < 5; i++ {
				if _, err := a.Append([]byte{byte(i)}, 1); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := b.Replicate("a", g.Epoch, 0, 3, 0, false, func(i int) ([]byte, bool, int64) {
				p, ext := a.Buf().GetHeldExt(i)
				return p, ext, 1
			}); err != nil {
				t.Fatal(err)
			}
			a.Acked("b", 3) // three acknowledged
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
