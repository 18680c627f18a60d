package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// presenceKillBound is the bound docs/presence.md states for a killed
// node's members to leave every other node's picture: the membership's
// failure detection (probe, indirect probes, suspicion: about 2 s with
// the default timing at up to 10 nodes), its gossip, and the cluster's
// refresh of its view.
const presenceKillBound = 5 * time.Second

// presenceJoinBound is the bound docs/presence.md states for a join or
// leave to reach the other live nodes while the links between them work:
// a push is sent at once, or as soon as the one in flight is answered
// (two round trips between the nodes and the work at both ends).
const presenceJoinBound = time.Second

// TestPresence_ThreeNodesAndAKill: members connected to three nodes are
// listed by every node, with the node each is connected to, and an events
// subscription on one node gets the joins of the others'; when a node is
// killed (no leave, no GOAWAY), its member leaves every other node's
// picture within presenceKillBound and the watcher gets its leave; a
// join after the kill reaches the survivors.
func TestPresence_ThreeNodesAndAKill(t *testing.T) {
	nodes := startCluster3(t, nil)
	a, b, c := nodes[0], nodes[1], nodes[2]
	w := presHello(t, a.Addr())
	w.psubscribe(1, "room", wire.FlagPresenceEvents)
	var want []string
	for _, s := range nodes {
		m := presHello(t, s.Addr())
		m.psubscribe(1, "room", wire.FlagPresence)
		want = append(want, memberOf(connIDs(t, s)[len(connIDs(t, s))-1], s.opts.ServerName))
	}
	slices.Sort(want)
	var joined []string
	for len(joined) < 3 {
		for _, ch := range w.expectChanges(1) {
			joined = append(joined, ch[len("join "):])
		}
	}
	slices.Sort(joined)
	if !slices.Equal(joined, want) {
		t.Fatalf("the watcher on a saw joins %v, want %v", joined, want)
	}
	queries := map[*Server]*rawConn{}
	for _, s := range nodes {
		queries[s] = presHello(t, s.Addr())
		q := queries[s]
		eventually(t, waitFor, s.opts.ServerName+" lists the three members", func() bool {
			st := q.query("room", false)
			return slices.Equal(st.members, want) && st.occ == (wire.Occupancy{Subscribers: 4, Members: 3}) && !st.partial
		})
	}
	killed := time.Now()
	kill(c)
	var cMember string
	for _, m := range want {
		if m[len(m)-2:] == "@c" {
			cMember = m
		}
	}
	left := slices.DeleteFunc(slices.Clone(want), func(m string) bool { return m == cMember })
	for _, s := range []*Server{a, b} {
		q := queries[s]
		eventually(t, waitFor, s.opts.ServerName+" drops c's member", func() bool {
			st := q.query("room", false)
			return slices.Equal(st.members, left) && st.occ == (wire.Occupancy{Subscribers: 3, Members: 2})
		})
	}
	if d := time.Since(killed); d > presenceKillBound {
		t.Errorf("c's member left after %v, the stated bound is %v", d, presenceKillBound)
	} else {
		t.Logf("c's member left every picture %v after the kill", d)
	}
	if got := w.expectChanges(1); !slices.Equal(got, []string{"leave " + cMember}) {
		t.Fatalf("the watcher got %v", got)
	}
	late := presHello(t, b.Addr())
	joinedAt := time.Now()
	late.psubscribe(1, "room", wire.FlagPresence)
	ids := connIDs(t, b)
	lateMember := memberOf(ids[len(ids)-1], "b")
	if got := w.expectChanges(1); !slices.Equal(got, []string{"join " + lateMember}) {
		t.Fatalf("the watcher got %v for the late join", got)
	}
	if d := time.Since(joinedAt); d > presenceJoinBound {
		t.Errorf("a join on b reached a's watcher after %v, the stated bound is %v", d, presenceJoinBound)
	} else {
		t.Logf("a join on b reached a's watcher %v after the SUBSCRIBE", d)
	}
}
