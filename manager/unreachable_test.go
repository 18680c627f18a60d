package manager

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
)

// TestDecideUnreachable: a report of an unreachable follower recovers a
// replicated streamlet that still lists the follower, open or closed; one
// recovered without it already, lost, or a single copy is answered as it
// is; an id not in the list is unknown.
func TestDecideUnreachable(t *testing.T) {
	list := []role.StreamletRef{
		{ID: 1, Host: "a", Replicas: []string{"a", "b"}, First: 100, End: 110, Closed: true},
		{ID: 2, Host: "a", Replicas: []string{"a", "c"}, First: 110, End: 120, Closed: true}, // recovered without b
		{ID: 0, First: 120, End: 125, Closed: true, Lost: true},
		{ID: 3, Host: "b", Replicas: []string{"b", "c"}, First: 125, End: 130, Closed: true, Lost: true},
		{ID: 4, Host: "c", First: 130, End: 140, Closed: true},            // a single copy
		{ID: 5, Host: "a", Replicas: []string{"a", "b", "c"}, First: 140}, // open
	}
	for _, tc := range []struct {
		name     string
		id       uint64
		follower string
		want     unreachableStep
	}{
		{"closed, still listing the follower", 1, "b", stepRecover},
		{"open, still listing the follower", 5, "c", stepRecover},
		{"recovered without the follower already", 2, "b", stepAnswer},
		{"lost", 3, "c", stepAnswer},
		{"a single copy", 4, "b", stepAnswer},
		{"not in the list", 9, "b", stepUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ref := decideUnreachable(list, tc.id, tc.follower)
			if got != tc.want || (got != stepUnknown && ref.ID != tc.id) {
				t.Fatalf("step %d ref %d, want step %d ref %d", got, ref.ID, tc.want, tc.id)
			}
		})
	}
}

// TestAnswerOf: a closed streamlet answers its length and set, a lost one
// only that it is lost, an open one nothing (its recovery did not happen).
func TestAnswerOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		ref  role.StreamletRef
		want Recovered
		ok   bool
	}{
		{"closed", role.StreamletRef{ID: 1, Host: "a", Replicas: []string{"a", "b"}, First: 100, End: 107, Closed: true},
			Recovered{Len: 7, Replicas: []string{"a", "b"}}, true},
		{"closed, down to one copy", role.StreamletRef{ID: 1, Host: "c", First: 100, End: 103, Closed: true},
			Recovered{Len: 3, Replicas: []string{"c"}}, true},
		{"lost", role.StreamletRef{ID: 1, Host: "a", First: 100, End: 200, Closed: true, Lost: true}, Recovered{Lost: true}, true},
		{"open", role.StreamletRef{ID: 1, Host: "a", Replicas: []string{"a", "b"}, First: 100}, Recovered{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := answerOf(tc.ref)
			if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v %v, want %+v %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestCuts: a cut counts both ways until it expires, a report renews it,
// and the pairs remembered are bounded (the oldest goes first).
func TestCuts(t *testing.T) {
	var c cuts
	c.note("b", "c", 0, 100)
	c.note("a", "c", 0, 50)
	for _, tc := range []struct {
		node string
		now  int64
		want []string
	}{
		{"c", 10, []string{"a", "b"}},
		{"b", 10, []string{"c"}},
		{"a", 10, []string{"c"}},
		{"c", 60, []string{"b"}}, // a-c expired
		{"b", 100, nil},          // expired at its expiry
		{"d", 10, nil},
	} {
		if got := c.from(tc.node, tc.now); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("from(%s) at %d: %v, want %v", tc.node, tc.now, got, tc.want)
		}
	}
	c.note("c", "b", 60, 200) // renewed, either order
	if got := c.from("b", 150); !reflect.DeepEqual(got, []string{"c"}) {
		t.Fatalf("renewed cut: %v", got)
	}
	for i := 0; i < maxCuts+10; i++ {
		c.note("x", string(rune('A'+i%26))+string(rune('a'+i/26)), 0, int64(1000+i))
	}
	if len(c.m) > maxCuts {
		t.Fatalf("%d cuts remembered, at most %d", len(c.m), maxCuts)
	}
}

// TestUnreachable_RecoversWithoutTheLink: the orderer a reports that its
// follower b acknowledged nothing of what a wrote: the manager fences
// both, seals them at what both hold (b reached from the manager), closes
// the streamlet there and answers that; a's waiting acknowledgements are
// released at that length. The next streamlet never pairs a and b as
// orderer and follower while the report holds (fewer replicas than
// configured would be counted as degraded; here c is left), and may
// again once it expired.
func TestUnreachable_RecoversWithoutTheLink(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	c, m, g := fiveHeldThree(t, "m", clock)
	r, err := m.Unreachable("ch", g.Streamlet, "a", "b")
	if err != nil || !reflect.DeepEqual(r, Recovered{Len: 3, Replicas: []string{"a", "b"}}) {
		t.Fatalf("answer %+v %v, want len 3 on [a b]", r, err)
	}
	info, _ := m.Info("ch", false)
	if ref := info.Streamlets[0]; !ref.Closed || ref.Lost || ref.End != g.First+3 {
		t.Fatalf("listed %+v, want closed at +3", ref)
	}
	for _, n := range []string{"a", "b"} {
		if k, final := c.hs[n].Streamlet(g.Streamlet).Durable(); k != 3 || !final {
			t.Fatalf("replica %s: durable %d final %v, want 3 final", n, k, final)
		}
	}
	// Asked again (the orderer did not hear the answer): the same answer.
	if r2, err := m.Unreachable("ch", g.Streamlet, "a", "b"); err != nil || !reflect.DeepEqual(r2, r) {
		t.Fatalf("repeated report: %+v %v", r2, err)
	}
	g2, err := m.WriteGrant("ch", g.Streamlet)
	if err != nil || g2.First != g.First+3 || !reflect.DeepEqual(g2.Set(), []string{"a", "c"}) {
		t.Fatalf("next grant %+v %v, want at +3 on [a c]", g2, err)
	}
	now = now.Add(cutHold)
	g3, err := m.WriteGrant("ch", g2.Streamlet)
	if err != nil || !reflect.DeepEqual(g3.Set(), []string{"a", "b"}) {
		t.Fatalf("grant after the cut expired %+v %v, want [a b]", g3, err)
	}
	if _, err := m.Unreachable("ch", 12345, "a", "b"); !errors.Is(err, role.ErrUnknownStreamlet) {
		t.Fatalf("unknown streamlet: %v", err)
	}
	if _, err := m.Unreachable("nope", g.Streamlet, "a", "b"); !errors.Is(err, role.ErrUnknownStreamlet) {
		t.Fatalf("unknown channel: %v", err)
	}
}

// TestUnreachable_SealedPastWhatAllHold: a streamlet its orderer sealed
// (a writer's new grant) at what it wrote, 5 records, of which the
// follower got 3, is recovered at 3 when the orderer reports the follower
// unreachable: the list ends it at 3 and lists the two positions after as
// lost (never acknowledged; readers get GAP lost, not a wait for records
// nobody holds), and the next streamlet still starts after them.
func TestUnreachable_SealedPastWhatAllHold(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	_, m, g := fiveHeldThree(t, "m", clock)
	g2, err := m.WriteGrant("ch", g.Streamlet) // seals g at its orderer: 5
	if err != nil || g2.First != g.First+5 {
		t.Fatalf("next grant %+v %v", g2, err)
	}
	r, err := m.Unreachable("ch", g.Streamlet, "a", "b")
	if err != nil || r.Len != 3 || r.Lost {
		t.Fatalf("answer %+v %v, want len 3", r, err)
	}
	info, _ := m.Info("ch", false)
	want := []role.StreamletRef{
		{ID: g.Streamlet, First: g.First, End: g.First + 3, Closed: true},
		{ID: 0, First: g.First + 3, End: g.First + 5, Closed: true, Lost: true},
		{ID: g2.Streamlet, First: g.First + 5},
	}
	if len(info.Streamlets) != len(want) {
		t.Fatalf("list %+v", info.Streamlets)
	}
	for i, w := range want {
		got := info.Streamlets[i]
		if got.ID != w.ID || got.First != w.First || got.Closed != w.Closed || got.Lost != w.Lost || (w.Closed && got.End != w.End) {
			t.Fatalf("entry %d: %+v, want %+v", i, got, w)
		}
	}
	if info.Next != g.First+5 {
		t.Fatalf("next %d, want %d", info.Next, g.First+5)
	}
}

// fiveHeldThree is where the recovery tests start: hosts a, b and c, a
// manager on node self of its own with N = 2, and its first streamlet of
// "ch" on [a b], five records written at a, of which b holds the first
// three, acknowledged (replicatedWith).
func fiveHeldThree(t *testing.T, self string, clock func() time.Time) (hosts, *Manager, role.Grant) {
	t.Helper()
	c := newHosts(clock, "a", "b", "c")
	m := replicaManager(t, c, 2, clock)
	m.cfg.Node = self // the manager on a node of its own
	return c, m, replicatedWith(t, m, c, 5, 3)
}

// replicatedWith grants a streamlet of "ch" on [a b], appends n records
// at a, replicates held of them to b and acknowledges them.
func replicatedWith(t *testing.T, m *Manager, c hosts, n, held int) role.Grant {
	t.Helper()
	g, err := m.WriteGrant("ch", 0)
	if err != nil || !reflect.DeepEqual(g.Set(), []string{"a", "b"}) {
		t.Fatalf("grant %+v %v", g, err)
	}
	a, b := c.hs["a"].Streamlet(g.Streamlet), c.hs["b"].Streamlet(g.Streamlet)
	for i := 0; i < n; i++ {
		if _, err := a.Append([]byte{byte(i)}, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Replicate("a", g.Epoch, 0, held, 0, false, func(i int) ([]byte, bool, int64) {
		p, ext := a.Buf().GetHeldExt(i)
		return p, ext, 1
	}); err != nil {
		t.Fatal(err)
	}
	a.Acked("b", held)
	return g
}
