package metalog

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sid is the server id of node name, incarnation inc.
func sid(name string, inc int) string { return serverID(name, fmt.Sprintf("%016x", inc)) }

func TestVotersFor(t *testing.T) {
	want := map[int]int{0: 1, 1: 1, 2: 1, 3: 3, 4: 3, 5: 5, 6: 5, 7: 5, 100: 5}
	for n, v := range want {
		if got := votersFor(n, 5); got != v {
			t.Errorf("votersFor(%d, 5) = %d, want %d", n, got, v)
		}
	}
	if got := votersFor(9, 7); got != 7 {
		t.Errorf("votersFor(9, 7) = %d", got)
	}
	if got := votersFor(9, 1); got != 1 {
		t.Errorf("votersFor(9, 1) = %d", got)
	}
}

// empty is a live member with an empty log; boot one with state.
func empty(name string) Member {
	return Member{Name: name, ServerID: sid(name, 1), Addr: "x", Alive: true}
}

func boot(name string) Member { m := empty(name); m.Bootstrapped = true; return m }

func TestShouldBootstrap(t *testing.T) {
	dead := func(m Member) Member { m.Alive = false; return m }
	leftM := func(m Member) Member { m.Alive, m.Left = false, true; return m }
	drain := func(m Member) Member { m.Draining = true; return m }
	noID := func(m Member) Member { m.ServerID = ""; return m }
	cases := []struct {
		name    string
		self    Member
		members []Member
		expect  int
		want    bool
	}{
		{"alone, expect 1", empty("a"), nil, 1, true},
		{"alone, expect 0 counts as 1", empty("a"), nil, 0, true},
		{"self listed too", empty("a"), []Member{empty("a")}, 1, true},
		{"self already has state", boot("a"), nil, 1, false},
		{"self has no id", noID(empty("a")), nil, 1, false},
		{"a member has a cluster", empty("a"), []Member{boot("b")}, 1, false},
		{"a dead member has a cluster", empty("a"), []Member{dead(boot("b"))}, 1, false},
		{"a member that left had a cluster", empty("a"), []Member{leftM(boot("b"))}, 1, true},
		{"expect 3, two live", empty("a"), []Member{empty("b")}, 3, false},
		{"expect 3, three live, smallest", empty("a"), []Member{empty("b"), empty("c")}, 3, true},
		{"expect 3, three live, not smallest", empty("b"), []Member{empty("a"), empty("c")}, 3, false},
		{"expect 3, one dead", empty("a"), []Member{empty("b"), dead(empty("c"))}, 3, false},
		{"expect 3, one draining", empty("a"), []Member{empty("b"), drain(empty("c"))}, 3, false},
		{"expect 3, one without id", empty("a"), []Member{empty("b"), noID(empty("c"))}, 3, false},
		{"smaller member dead", empty("b"), []Member{dead(empty("a")), empty("c")}, 2, true},
	}
	for _, c := range cases {
		if got := shouldBootstrap(c.self, c.members, c.expect); got != c.want {
			t.Errorf("%s: got %v", c.name, got)
		}
	}
}

// TestBootstrapVoters: a new cluster's first configuration names as
// voters the bootstrapping node and the members it counted, smallest
// names first, an odd number up to the cap; members that are dead,
// draining, have state or no Raft address are left to be added later.
func TestBootstrapVoters(t *testing.T) {
	dead := func(m Member) Member { m.Alive = false; return m }
	drain := func(m Member) Member { m.Draining = true; return m }
	noAddr := func(m Member) Member { m.Addr = ""; return m }
	ids := func(vs []cfgServer) string {
		var out []string
		for _, v := range vs {
			if !v.Voter || v.Addr == "" {
				return "a server without vote or address"
			}
			out = append(out, nodeOf(v.ID))
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		name    string
		self    Member
		members []Member
		max     int
		want    string
	}{
		{"alone", empty("a"), nil, 5, "a"},
		{"three", empty("a"), []Member{empty("c"), empty("b"), empty("a")}, 5, "a,b,c"},
		{"two: one voter", empty("a"), []Member{empty("b")}, 5, "a"},
		{"four: three voters", empty("a"), []Member{empty("d"), empty("b"), empty("c")}, 5, "a,b,c"},
		{"seven, cap 5", empty("a"), []Member{empty("b"), empty("c"), empty("d"), empty("e"), empty("f"), empty("g")}, 5, "a,b,c,d,e"},
		{"the unfit left out", empty("a"), []Member{dead(empty("b")), drain(empty("c")), boot("d"), noAddr(empty("e")), empty("f"), empty("g")}, 5, "a,f,g"},
	} {
		if got := ids(bootstrapVoters(c.self, c.members, c.max)); got != c.want {
			t.Errorf("%s: voters %s, want %s", c.name, got, c.want)
		}
	}
}

var t0 = time.Unix(1_000_000, 0)

// planCase describes a cluster around leader a: the configuration, the
// members (by name, Since already filled) and the leader's peer states.
type planCase struct {
	name    string
	servers []cfgServer
	members []Member
	peers   map[string]peerState
	want    []change
}

func voter(name string) cfgServer    { return cfgServer{ID: sid(name, 1), Addr: "x", Voter: true} }
func nonvoter(name string) cfgServer { return cfgServer{ID: sid(name, 1), Addr: "x"} }

// up is a peer reachable and caught up since long ago; lagging one
// reachable but behind; silent one not answering.
func up() peerState      { return peerState{Reachable: true, CaughtUpSince: t0.Add(-time.Hour)} }
func lagging() peerState { return peerState{Reachable: true} }
func fresh() peerState   { return peerState{Reachable: true, CaughtUpSince: t0.Add(-time.Millisecond)} }

func deadFor(m Member, d time.Duration) Member { m.Alive, m.Since = false, t0.Add(-d); return m }

func ups(names ...string) map[string]peerState {
	m := make(map[string]peerState)
	for _, n := range names {
		m[sid(n, 1)] = up()
	}
	return m
}

func with(m map[string]peerState, name string, p peerState) map[string]peerState {
	m[sid(name, 1)] = p
	return m
}

func ch(k changeKind, name, addr, reason string) change {
	return change{Kind: k, ID: sid(name, 1), Addr: addr, Reason: reason}
}

func planCases() []planCase {
	const dead, grace = 20 * time.Second, 2 * time.Second
	replacedC := empty("c")
	replacedC.ServerID = sid("c", 2)
	leftC := empty("c")
	leftC.Alive, leftC.Left = false, true
	drainB := empty("b")
	drainB.Draining = true
	drainA := empty("a")
	drainA.Draining = true
	movedB := empty("b")
	movedB.Addr = "y"
	const caught, missing = "caught up, and voters are missing", "more voters than members call for"
	return []planCase{
		{"alone", []cfgServer{voter("a")}, []Member{empty("a")}, nil, nil},
		{"new members join as non-voters", []cfgServer{voter("a")},
			[]Member{empty("a"), empty("c"), empty("b")}, nil,
			[]change{ch(addNonvoter, "b", "x", "a new member"), ch(addNonvoter, "c", "x", "a new member")}},
		{"two caught-up non-voters promoted to three voters", []cfgServer{voter("a"), nonvoter("b"), nonvoter("c")},
			[]Member{empty("a"), empty("b"), empty("c")}, ups("b", "c"),
			[]change{ch(promote, "b", "x", caught), ch(promote, "c", "x", caught)}},
		{"one caught up of two: no even voter count", []cfgServer{voter("a"), nonvoter("b"), nonvoter("c")},
			[]Member{empty("a"), empty("b"), empty("c")}, with(ups("b"), "c", lagging()), nil},
		{"not stable long enough", []cfgServer{voter("a"), nonvoter("b"), nonvoter("c")},
			[]Member{empty("a"), empty("b"), empty("c")}, with(with(ups(), "b", fresh()), "c", fresh()), nil},
		{"two members: one voter", []cfgServer{voter("a"), nonvoter("b")},
			[]Member{empty("a"), empty("b")}, ups("b"), nil},
		{"dead voter replaced by a caught-up non-voter", []cfgServer{voter("a"), voter("b"), voter("c"), nonvoter("d")},
			[]Member{empty("a"), empty("b"), deadFor(empty("c"), dead), empty("d")}, ups("b", "d"),
			[]change{ch(promote, "d", "x", caught), ch(remove, "c", "", "its node is dead")}},
		{"voter dead within the bound keeps its seat", []cfgServer{voter("a"), voter("b"), voter("c"), nonvoter("d")},
			[]Member{empty("a"), empty("b"), deadFor(empty("c"), grace), empty("d")}, ups("b", "d"), nil},
		{"voter dead for gossip but answering the leader stays", []cfgServer{voter("a"), voter("b"), voter("c")},
			[]Member{empty("a"), empty("b"), deadFor(empty("c"), dead)}, ups("b", "c"), nil},
		{"a majority dead: only a minority goes per round", []cfgServer{voter("a"), voter("b"), voter("c"), voter("d"), voter("e")},
			[]Member{empty("a"), empty("b"), deadFor(empty("c"), dead), deadFor(empty("d"), dead), deadFor(empty("e"), dead)}, ups("b"),
			[]change{ch(remove, "c", "", "its node is dead"), ch(remove, "d", "", "its node is dead")}},
		{"dead non-voter removed", []cfgServer{voter("a"), nonvoter("b")},
			[]Member{empty("a"), deadFor(empty("b"), dead)}, nil,
			[]change{ch(remove, "b", "", "its node is dead")}},
		{"draining voter demoted, successor promoted first", []cfgServer{voter("a"), voter("b"), voter("c"), nonvoter("d")},
			[]Member{empty("a"), drainB, empty("c"), empty("d")}, ups("b", "c", "d"),
			[]change{ch(promote, "d", "x", caught), ch(demote, "b", "", "its node is draining")}},
		{"draining non-voter stays", []cfgServer{voter("a"), nonvoter("b")},
			[]Member{empty("a"), drainB}, ups("b"), nil},
		{"draining leader hands over", []cfgServer{voter("a"), voter("b"), voter("c")},
			[]Member{drainA, empty("b"), empty("c")}, ups("b", "c"),
			[]change{{Kind: transfer, ID: sid("b", 1), Addr: "x", Reason: "this node is draining"}}},
		{"draining leader with no one to hand over to", []cfgServer{voter("a"), voter("b"), voter("c")},
			[]Member{drainA, empty("b"), empty("c")}, with(with(ups(), "b", lagging()), "c", peerState{}), nil},
		{"lost directory: old id removed, new one added", []cfgServer{voter("a"), voter("b"), voter("c")},
			[]Member{empty("a"), empty("b"), replacedC}, ups("b"),
			[]change{ch(remove, "c", "", "its node came back as a new server"), {Kind: addNonvoter, ID: sid("c", 2), Addr: "x", Reason: "a new member"}}},
		{"left voter removed", []cfgServer{voter("a"), voter("b"), voter("c")},
			[]Member{empty("a"), empty("b"), leftC}, ups("b"),
			[]change{ch(remove, "c", "", "its node left"), ch(demote, "b", "", missing)}},
		{"four voters for four members: the largest name demoted", []cfgServer{voter("a"), voter("b"), voter("c"), voter("d")},
			[]Member{empty("a"), empty("b"), empty("c"), empty("d")}, ups("b", "c", "d"),
			[]change{ch(demote, "d", "", missing)}},
		{"two voters for two members: one demoted", []cfgServer{voter("a"), voter("b")},
			[]Member{empty("a"), empty("b")}, ups("b"),
			[]change{ch(demote, "b", "", missing)}},
		{"a new address changes nothing", []cfgServer{voter("a"), voter("b"), voter("c")},
			[]Member{empty("a"), movedB, empty("c")}, ups("b", "c"), nil},
		{"at most five voters", []cfgServer{voter("a"), voter("b"), voter("c"), nonvoter("d"), nonvoter("e"), nonvoter("f"), nonvoter("g")},
			[]Member{empty("a"), empty("b"), empty("c"), empty("d"), empty("e"), empty("f"), empty("g")}, ups("b", "c", "d", "e", "f", "g"),
			[]change{ch(promote, "d", "x", caught), ch(promote, "e", "x", caught)}},
		{"member without a server id is not added", []cfgServer{voter("a")},
			[]Member{empty("a"), {Name: "b", Alive: true}}, nil, nil},
	}
}

func TestPlan(t *testing.T) {
	for _, c := range planCases() {
		members := make(map[string]Member)
		for _, m := range c.members {
			if m.Since.IsZero() {
				m.Since = t0.Add(-time.Hour)
			}
			members[m.Name] = m
		}
		got := plan(planInput{
			Self: sid("a", 1), Now: t0, Servers: c.servers, Members: members, Peers: c.peers,
			DeadAfter: 10 * time.Second, StableAfter: time.Second, MaxVoters: 5,
		})
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got  %v\n want %v", c.name, got, c.want)
		}
	}
}

func TestPeerStates(t *testing.T) {
	seen := map[string]peerSeen{
		"near":  {lastLog: 95, at: t0.Add(-50 * time.Millisecond)},
		"far":   {lastLog: 10, at: t0},
		"quiet": {lastLog: 100, at: t0.Add(-2 * time.Second)},
		"still": {lastLog: 100, at: t0},
	}
	since := map[string]time.Time{"still": t0.Add(-time.Minute), "far": t0.Add(-time.Minute)}
	states, next := peerStates(seen, since, t0, 100, 10, time.Second)
	want := map[string]peerState{
		"near":  {Reachable: true, CaughtUpSince: t0},
		"far":   {Reachable: true},
		"quiet": {},
		"still": {Reachable: true, CaughtUpSince: t0.Add(-time.Minute)},
	}
	if !reflect.DeepEqual(states, want) {
		t.Fatalf("states %v", states)
	}
	if !reflect.DeepEqual(next, map[string]time.Time{"near": t0, "still": t0.Add(-time.Minute)}) {
		t.Fatalf("next %v", next)
	}
}

// TestMemberClock: a member without Since is stamped when first seen in a
// state and keeps the stamp while the state holds; a configured node the
// membership does not list counts as dead since the first round that
// missed it.
func TestMemberClock(t *testing.T) {
	var c memberClock
	servers := []cfgServer{voter("a"), voter("z")}
	m := c.fill([]Member{{Name: "a", Alive: true}, {Name: "b"}}, servers, t0)
	if !m["a"].Since.Equal(t0) || !m["b"].Since.Equal(t0) || m["z"].Alive || !m["z"].Since.Equal(t0) {
		t.Fatalf("first round %v", m)
	}
	t1 := t0.Add(time.Second)
	m = c.fill([]Member{{Name: "a", Alive: true}, {Name: "b", Alive: true}}, servers, t1)
	if !m["a"].Since.Equal(t0) || !m["b"].Since.Equal(t1) || !m["z"].Since.Equal(t0) {
		t.Fatalf("second round %v", m)
	}
	given := t0.Add(-time.Hour)
	m = c.fill([]Member{{Name: "a", Since: given}, {Name: "z", Alive: true}}, servers, t1)
	if !m["a"].Since.Equal(given) || !m["z"].Alive || !m["z"].Since.Equal(t1) {
		t.Fatalf("third round %v", m)
	}
	if _, ok := m["b"]; ok {
		t.Fatal("an unlisted node that is not configured was kept")
	}
}
