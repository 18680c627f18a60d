package view

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/placement"
)

// fakeClock is a settable clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time        { return c.t }
func (c *fakeClock) add(d time.Duration)   { c.t = c.t.Add(d) }
func newClock() *fakeClock                 { return &fakeClock{time.Unix(1_700_000_000, 0)} }
func names(ms map[string]float64) []string { return sortedKeys(ms) }
func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// testView is a view of members (name to its message rate) from self,
// every one recorded with its incarnation "i-NAME", except those named
// "-NAME" in down; the others in down are marked down.
func testView(self string, members map[string]float64, down ...string) (*View, *fakeClock) {
	rec := map[string]string{}
	unrecorded := map[string]bool{}
	for _, n := range down {
		if n[0] == '-' {
			unrecorded[n[1:]] = true
		}
	}
	var live []Member
	for _, name := range names(members) {
		live = append(live, Member{Name: name, Meta: Meta{Client: name + ":1", Cap: 1, MsgsIn: members[name], Inst: "i-" + name}})
		if !unrecorded[name] {
			rec[name] = "i-" + name
		}
	}
	clk := newClock()
	v := New(Config{Self: self, Instance: "i-" + self, Clock: clk.now, GoneAfter: time.Minute,
		Recorded: func(n string) (string, bool) { r, ok := rec[n]; return r, ok }})
	v.Set(live)
	for _, n := range down {
		if n[0] != '-' {
			v.MarkDown(n)
		}
	}
	return v, clk
}

// TestChoose_HostOfANewStreamlet: the host of a new streamlet is another
// node than the manager (the leader) whenever there is one, never an
// excluded, down or unrecorded node, the manager itself only when it is
// alone, and none when every node is excluded.
func TestChoose_HostOfANewStreamlet(t *testing.T) {
	three := map[string]float64{"a": 0, "b": 0, "c": 0}
	for _, tc := range []struct {
		name    string
		members map[string]float64
		down    []string
		exclude []string
		want    []string // acceptable answers; nil: none
	}{
		{"three nodes: not the manager", three, nil, nil, []string{"b", "c"}},
		{"one excluded", three, nil, []string{"b"}, []string{"c"}},
		{"one down", three, []string{"c"}, nil, []string{"b"}},
		{"one not recorded", three, []string{"-b"}, nil, []string{"c"}},
		{"others excluded: the manager", three, nil, []string{"b", "c"}, []string{"a"}},
		{"alone", map[string]float64{"a": 0}, nil, nil, []string{"a"}},
		{"everyone excluded", three, nil, []string{"a", "b", "c"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := testView("a", tc.members, tc.down...)
			for seq := uint64(0); seq < 50; seq++ {
				got, ok := v.Choose("ch", seq, placement.ChannelLoad{}, tc.exclude)
				if tc.want == nil {
					if ok {
						t.Fatalf("seq %d: chose %q, want none", seq, got)
					}
					continue
				}
				if !ok || !slices.Contains(tc.want, got) {
					t.Fatalf("seq %d: chose %q (%v), want one of %v", seq, got, ok, tc.want)
				}
			}
		})
	}
}

// TestChoose_RotatesAHotChannel: consecutive streamlets of one channel
// spread over the other nodes (the placement key includes the sequence).
func TestChoose_RotatesAHotChannel(t *testing.T) {
	v, _ := testView("a", map[string]float64{"a": 0, "b": 0, "c": 0, "d": 0})
	seen := map[string]int{}
	for seq := uint64(0); seq < 60; seq++ {
		n, _ := v.Choose("hot", seq, placement.ChannelLoad{MsgsPerSec: 1e5}, nil)
		seen[n]++
	}
	if len(seen) < 2 || seen["a"] != 0 {
		t.Fatalf("streamlets on %v, want at least two nodes and never the manager a", seen)
	}
}

// TestChoose_NeverADrainingNode: a member that gossips a drain, and this
// node once it drains, get no new streamlet.
func TestChoose_NeverADrainingNode(t *testing.T) {
	v, _ := testView("a", map[string]float64{"a": 0, "b": 0, "c": 0})
	v.Set([]Member{
		{Name: "a", Meta: Meta{Client: "a:1", Inst: "i-a"}},
		{Name: "b", Meta: Meta{Client: "b:1", Inst: "i-b", Drain: true}},
		{Name: "c", Meta: Meta{Client: "c:1", Inst: "i-c"}},
	})
	v.SetDraining()
	for seq := uint64(0); seq < 50; seq++ {
		if got, ok := v.Choose("ch", seq, placement.ChannelLoad{}, nil); !ok || got != "c" {
			t.Fatalf("seq %d: chose %q (%v), want c", seq, got, ok)
		}
	}
	if got, ok := v.Choose("ch", 0, placement.ChannelLoad{}, []string{"c"}); ok {
		t.Fatalf("chose %q with c excluded and a, b draining", got)
	}
}

// TestDecisions: what each decision says of a node in each state, from
// node a (incarnation i-a): b live and recorded, c live but marked down,
// d live running another incarnation than the recorded one (restarted),
// e live and not recorded yet (new), f live and draining, g recorded and
// dead for less than GoneAfter, h recorded and dead for longer, z never
// seen.
func TestDecisions(t *testing.T) {
	rec := map[string]string{"a": "i-a", "b": "i-b", "c": "i-c", "d": "i-d", "f": "i-f", "g": "i-g", "h": "i-h"}
	clk := newClock()
	v := New(Config{Self: "a", Instance: "i-a", Clock: clk.now, GoneAfter: time.Minute,
		Recorded: func(n string) (string, bool) { r, ok := rec[n]; return r, ok }})
	m := func(name, inst string, drain bool) Member {
		return Member{Name: name, Meta: Meta{Client: name + ":1", Inst: inst, Drain: drain}}
	}
	all := []Member{m("a", "i-a", false), m("b", "i-b", false), m("c", "i-c", false), m("d", "i-d2", false),
		m("e", "i-e", false), m("f", "i-f", true), m("g", "i-g", false), m("h", "i-h", false)}
	v.Set(all)
	v.Set(all[:7]) // h leaves
	if v.Gone("h") {
		t.Fatal("h gone the moment it left")
	}
	clk.add(50 * time.Second)
	v.Set(all[:6]) // g leaves 50 s later
	v.MarkDown("c")
	clk.add(20 * time.Second) // h dead 70 s, g 20 s
	for _, tc := range []struct {
		node                          string
		live, reachable, usable, gone bool
	}{
		{"a", true, true, true, false},
		{"b", true, true, true, false},
		{"c", true, false, false, false},
		{"d", true, true, false, true},
		{"e", true, true, false, false},
		{"f", true, true, false, false},
		{"g", false, false, false, false},
		{"h", false, false, false, true},
		{"z", false, false, false, false}, // first seen dead now
	} {
		if got := v.Live(tc.node); got != tc.live {
			t.Errorf("Live(%s) = %v, want %v", tc.node, got, tc.live)
		}
		if got := v.Reachable(tc.node); got != tc.reachable {
			t.Errorf("Reachable(%s) = %v, want %v", tc.node, got, tc.reachable)
		}
		if got := v.Usable(tc.node); got != tc.usable {
			t.Errorf("Usable(%s) = %v, want %v", tc.node, got, tc.usable)
		}
		if got := v.Gone(tc.node); got != tc.gone {
			t.Errorf("Gone(%s) = %v, want %v", tc.node, got, tc.gone)
		}
	}
	clk.add(time.Minute)
	if !v.Gone("z") {
		t.Error("z, never seen, not gone after GoneAfter")
	}
	if n := v.Alive(); n != 5 {
		t.Errorf("Alive %d, want 5 (a, b, d, e, f: c is down)", n)
	}
	if n := v.UsableOthers(); n != 3 {
		t.Errorf("UsableOthers %d, want 3 (b, d, e: c is down, f drains)", n)
	}
	// This node: usable until it drains; gone only under another
	// incarnation than its own.
	v.SetDraining()
	if v.Usable("a") || !v.Draining() {
		t.Error("a draining node is usable")
	}
	rec["a"] = "i-a0"
	if !v.Gone("a") {
		t.Error("this node, recorded under another incarnation, is not gone")
	}
}

// TestGone_BackInTheLiveSet: a member that comes back before GoneAfter
// starts its dead time again the next time it leaves.
func TestGone_BackInTheLiveSet(t *testing.T) {
	v, clk := testView("a", map[string]float64{"a": 0, "b": 0})
	a := Member{Name: "a", Meta: Meta{Client: "a:1", Inst: "i-a"}}
	b := Member{Name: "b", Meta: Meta{Client: "b:1", Inst: "i-b"}}
	v.Set([]Member{a})
	v.NoteDead(map[string]bool{"a": true}, []string{"b"})
	clk.add(50 * time.Second)
	v.Set([]Member{a, b})
	v.NoteDead(map[string]bool{"a": true, "b": true}, []string{"b"})
	if d := v.DeadFor("b"); d != 0 {
		t.Fatalf("b back in the live set, dead for %v", d)
	}
	v.Set([]Member{a})
	v.NoteDead(map[string]bool{"a": true}, []string{"b"})
	clk.add(50 * time.Second)
	if v.Gone("b") || v.DeadFor("b") != 50*time.Second {
		t.Fatalf("b dead for %v (gone %v), want 50s and not gone", v.DeadFor("b"), v.Gone("b"))
	}
}

// TestSet_LeftAndDownMarks: Set reports the members that left (never this
// node), and forgets the down marks older than DownFor; a mark made again
// lasts DownFor from then.
func TestSet_LeftAndDownMarks(t *testing.T) {
	v, clk := testView("a", map[string]float64{"a": 0, "b": 0, "c": 0, "d": 0})
	v.MarkDown("b")
	if v.Reachable("b") || v.Alive() != 3 {
		t.Fatalf("b marked down: reachable %v, alive %d", v.Reachable("b"), v.Alive())
	}
	left := v.Set([]Member{{Name: "b", Meta: Meta{Client: "b:1", Inst: "i-b"}}, {Name: "d", Meta: Meta{Client: "d:1", Inst: "i-d"}}})
	if !slices.Equal(left, []string{"c"}) {
		t.Fatalf("left %v, want [c] (a is this node)", left)
	}
	clk.add(DownFor)
	v.Set([]Member{{Name: "b", Meta: Meta{Client: "b:1", Inst: "i-b"}}})
	if v.Reachable("b") {
		t.Fatal("b reachable when its mark is exactly DownFor old")
	}
	clk.add(time.Nanosecond)
	v.Set([]Member{{Name: "b", Meta: Meta{Client: "b:1", Inst: "i-b"}}})
	if !v.Reachable("b") {
		t.Fatal("b's down mark outlived DownFor")
	}
	if v.MarkDown("a") || !v.Reachable("a") {
		t.Fatal("this node was marked down")
	}
}

// TestDial_MarksAndRedials: a node marked down is dialed only by force
// (the redial), Unreached lists it until a link is made, and a link made
// by force ends its down mark, one made otherwise does not.
func TestDial_MarksAndRedials(t *testing.T) {
	v, _ := testView("a", map[string]float64{"a": 0, "b": 0, "c": 0})
	if addr, ok := v.Dialable("b", false); !ok || addr != "b:1" {
		t.Fatalf("Dialable(b) = %q %v", addr, ok)
	}
	if _, ok := v.Dialable("z", true); ok {
		t.Fatal("a node not in the view is dialable")
	}
	v.MarkDown("b")
	v.MarkDown("c")
	if _, ok := v.Dialable("b", false); ok {
		t.Fatal("a node marked down is dialable without force")
	}
	if _, ok := v.Dialable("b", true); !ok {
		t.Fatal("a node marked down is not dialable by force")
	}
	if got := v.Unreached(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("Unreached %v, want [b c]", got)
	}
	v.Reached("b", true)
	v.Reached("c", false)
	if got := v.Unreached(); len(got) != 0 {
		t.Fatalf("Unreached %v after links were made", got)
	}
	if !v.Reachable("b") || v.Reachable("c") {
		t.Fatalf("reachable b %v (forced: mark ended), c %v (not forced: marked)", v.Reachable("b"), v.Reachable("c"))
	}
}

// TestClientAddrs: this node's address first unless it drains, then the
// others that do not drain, sorted.
func TestClientAddrs(t *testing.T) {
	v, _ := testView("b", nil)
	v.Set([]Member{
		{Name: "b", Meta: Meta{Client: "b:1"}},
		{Name: "d", Meta: Meta{Client: "d:1"}},
		{Name: "c", Meta: Meta{Client: "c:1", Drain: true}},
		{Name: "a", Meta: Meta{Client: "a:1"}},
	})
	if got := v.ClientAddrs("self:9"); !slices.Equal(got, []string{"self:9", "a:1", "d:1"}) {
		t.Fatalf("ClientAddrs %v", got)
	}
	v.SetDraining()
	if got := v.ClientAddrs("self:9"); !slices.Equal(got, []string{"a:1", "d:1"}) {
		t.Fatalf("ClientAddrs of a draining node %v", got)
	}
}

// TestIncarnations: the live members' gossiped incarnations, this node's
// own from its Config.
func TestIncarnations(t *testing.T) {
	v, _ := testView("a", map[string]float64{"a": 0, "b": 0})
	v.Set([]Member{{Name: "b", Meta: Meta{Client: "b:1", Inst: "i-b2"}}, {Name: "c", Meta: Meta{Client: "c:1"}}})
	got := v.Incarnations()
	want := map[string]string{"a": "i-a", "b": "i-b2", "c": ""}
	if len(got) != len(want) || got["a"] != want["a"] || got["b"] != want["b"] || got["c"] != "" {
		t.Fatalf("Incarnations %v, want %v", got, want)
	}
}

// TestMarks: the down marks, and a load for each member not marked down.
func TestMarks(t *testing.T) {
	v, _ := testView("a", map[string]float64{"a": 0, "b": 5000, "c": 0}, "c")
	down, loads := v.Marks()
	if !down["c"] || len(down) != 1 {
		t.Fatalf("down %v, want c", down)
	}
	if _, ok := loads["c"]; ok || len(loads) != 2 || loads["b"] <= loads["a"] {
		t.Fatalf("loads %v, want a and b (b the busier), not c, which is down", loads)
	}
}

// TestMeta_Golden: the gossiped metadata's JSON names are shared by every
// node of a cluster (a rolling upgrade mixes versions): they must not
// change. A member without a client address, or whose metadata does not
// decode, is no member of the view.
func TestMeta_Golden(t *testing.T) {
	m := Meta{Client: "10.0.0.1:7000", Cap: 4, Streamlets: 3, Channels: 2, Conns: 9, MsgsIn: 1.5, BytesIn: 300,
		Drain: true, Inst: "i1", Raft: "10.0.0.1:7947", SID: "s1", Boot: true, Svc: true}
	const golden = `{"a":"10.0.0.1:7000","c":4,"s":3,"ch":2,"cn":9,"mi":1.5,"bi":300,"d":true,"i":"i1","r":"10.0.0.1:7947","sid":"s1","b":true,"sv":true}`
	if got := string(m.Encode()); got != golden {
		t.Fatalf("encoded %s\nwant    %s", got, golden)
	}
	if got, ok := DecodeMeta([]byte(golden)); !ok || got != m {
		t.Fatalf("decoded %+v %v, want %+v", got, ok, m)
	}
	for _, bad := range []string{`{"c":4}`, `{"a":""}`, `not json`, ``} {
		if got, ok := DecodeMeta([]byte(bad)); ok {
			t.Errorf("%q decoded as %+v", bad, got)
		}
	}
	v, _ := testView("a", nil)
	v.UpdateLocal(func(l *Meta) { *l = m })
	if string(v.EncodeLocal()) != golden || v.Local() != m {
		t.Fatalf("local metadata %s", v.EncodeLocal())
	}
}
