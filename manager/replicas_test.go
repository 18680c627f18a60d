package manager

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
)

// hosts is a Cluster of in-process hosts, one per node: Choose takes the
// first live node not excluded, in the order given (a stand-in for the
// load-weighted placement, which package cluster tests); a node in dead has
// no Host role.
type hosts struct {
	noCopies
	order []string
	hs    map[string]*host.Host
	dead  map[string]bool
	// chosen records every Choose answer.
	chosen *[]string
}

func newHosts(clock func() time.Time, names ...string) hosts {
	c := hosts{order: names, hs: make(map[string]*host.Host), dead: make(map[string]bool), chosen: new([]string)}
	for _, n := range names {
		c.hs[n] = host.New(n, clock)
	}
	return c
}

func (c hosts) HostOf(n string) role.Host {
	if c.dead[n] || c.hs[n] == nil {
		return nil
	}
	return c.hs[n]
}
func (c hosts) Choose(_ string, _ uint64, _ Load, exclude []string) (string, bool) {
	for _, n := range c.order {
		if !c.dead[n] && !slices.Contains(exclude, n) {
			*c.chosen = append(*c.chosen, n)
			return n, true
		}
	}
	return "", false
}
func (c hosts) ListAll(ch string) []role.Hosted {
	var out []role.Hosted
	for _, n := range c.order {
		if !c.dead[n] {
			hs, _ := c.hs[n].List(ch)
			out = append(out, hs...)
		}
	}
	return out
}
func (c hosts) Notify(string, []string) {}
func (c hosts) Managed(string) bool     { return true }
func (c hosts) Skew() time.Duration     { return time.Second }
func (c hosts) Quorate() bool           { return true }

func replicaManager(t *testing.T, c hosts, replicas int, clock func() time.Time) *Manager {
	t.Helper()
	self := c.hs[c.order[0]]
	cfg := testConfig(self, clock)
	l := cfg.Limits("")
	l.Replicas = replicas
	cfg.Limits = func(string) role.Limits { return l }
	m := New(cfg)
	m.SetCluster(c)
	return m
}

// TestWriteGrant_ReplicasOnDistinctNodes: a channel with Replicas N gets
// each new streamlet on N distinct nodes, chosen one by one with the ones
// already chosen excluded (never two replicas on one node), the first
// ordering; every replica hosts it with the whole set; N = 1 is a single
// copy with no replica set, as before replication.
func TestWriteGrant_ReplicasOnDistinctNodes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	for _, n := range []int{1, 2, 3} {
		c := newHosts(clock, "a", "b", "c")
		m := replicaManager(t, c, n, clock)
		g, err := m.WriteGrant("ch", 0)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"a", "b", "c"}[:n]
		if got := g.Set(); !reflect.DeepEqual(got, want) || g.Host != "a" {
			t.Fatalf("N=%d: grant set %v host %q, want %v", n, got, g.Host, want)
		}
		if n == 1 && g.Replicas != nil {
			t.Fatalf("N=1: grant carries a replica set %v", g.Replicas)
		}
		for _, node := range []string{"a", "b", "c"} {
			s := c.hs[node].Streamlet(g.Streamlet)
			if held := slices.Contains(want, node); (s != nil) != held {
				t.Fatalf("N=%d: node %s holds the streamlet: %v, want %v", n, node, s != nil, held)
			}
			if s != nil && n > 1 && !reflect.DeepEqual(s.Replicas(), want) {
				t.Fatalf("N=%d: node %s hosts it with set %v, want %v", n, node, s.Replicas(), want)
			}
		}
		info, _ := m.Info("ch", false)
		if got := info.Streamlets[0].Set(); !reflect.DeepEqual(got, want) {
			t.Fatalf("N=%d: info lists set %v, want %v", n, got, want)
		}
		if m.Degraded() != 0 {
			t.Fatalf("N=%d: %d degraded with enough nodes", n, m.Degraded())
		}
	}
}

// TestWriteGrant_FewerLiveNodesThanReplicas: with fewer live nodes than
// Replicas the streamlet gets every live node (visibly: Degraded counts
// it) rather than being refused, and never a dead node.
func TestWriteGrant_FewerLiveNodesThanReplicas(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	c := newHosts(clock, "a", "b", "c")
	c.dead["b"] = true
	m := replicaManager(t, c, 3, clock)
	g, err := m.WriteGrant("ch", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Set(); !reflect.DeepEqual(got, []string{"a", "c"}) {
		t.Fatalf("set %v, want [a c]", got)
	}
	if m.Degraded() != 1 {
		t.Fatalf("Degraded %d, want 1", m.Degraded())
	}
}

// TestMergeReplicas: the reports of one streamlet by its replicas fold
// into one entry: the orderer's when it answered, else the longest, a
// final one above all; the set keeps the orderer first and only the
// followers that reported.
func TestMergeReplicas(t *testing.T) {
	set := []string{"a", "b", "c"}
	rep := func(node string, n uint32, final bool) role.Hosted {
		return role.Hosted{ID: 7, Epoch: 1, First: 100, Host: node, Len: n, Replicas: set, Final: final, Sealed: final}
	}
	for _, tc := range []struct {
		name    string
		in      []role.Hosted
		wantLen uint32
		wantSet []string
	}{
		{"all three: the orderer's report", []role.Hosted{rep("b", 9, false), rep("a", 10, false), rep("c", 8, false)}, 10, set},
		{"orderer missing: the longest, orderer still first", []role.Hosted{rep("c", 8, false), rep("b", 9, false)}, 9, set},
		{"one follower missing", []role.Hosted{rep("a", 10, false), rep("c", 8, false)}, 10, []string{"a", "c"}},
		{"a final report wins", []role.Hosted{rep("a", 10, false), rep("b", 6, true)}, 6, []string{"a", "b"}},
		{"only the orderer: a single copy", []role.Hosted{rep("a", 10, false)}, 10, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := mergeReplicas(tc.in)
			if len(out) != 1 {
				t.Fatalf("%d entries, want 1: %+v", len(out), out)
			}
			if out[0].Len != tc.wantLen || out[0].Host != "a" || !reflect.DeepEqual(out[0].Replicas, tc.wantSet) {
				t.Fatalf("got len %d host %q set %v, want len %d host a set %v", out[0].Len, out[0].Host, out[0].Replicas, tc.wantLen, tc.wantSet)
			}
		})
	}
	single := []role.Hosted{{ID: 1, Host: "x", Len: 3}, {ID: 2, Host: "y", Len: 4}}
	if out := mergeReplicas(single); !reflect.DeepEqual(out, single) {
		t.Fatalf("single copies changed: %+v", out)
	}
}

func (c hosts) Claim(ch string, id uint64, node string, over uint64) (bool, uint64, string) {
	return claimAt(c.hs, c.dead, ch, id, node, over)
}
