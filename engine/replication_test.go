package engine

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// withReplicas sets the replica count of a test cluster.
func withReplicas(n int) func(*Options) { return func(o *Options) { o.Replicas = n } }

// TestReplication_EveryStreamletOnNDistinctNodes: with Replicas 2 every
// streamlet of a channel is held by two distinct nodes, each holding every
// acknowledged message at its position, and a subscriber on a third node
// reads them all in order.
func TestReplication_EveryStreamletOnNDistinctNodes(t *testing.T) {
	nodes := startCluster3(t, withReplicas(2))
	a, b := nodes[0], nodes[1]
	ch := channelManagedBy(t, a, "a", "repl")
	sub, _ := helloRaw(t, b.Addr())
	sub.subscribe(1, ch, wire.StartLive, 0)
	pub, _ := helloRaw(t, a.Addr())
	acked := map[uint64]int{}
	var last uint64
	for i := 0; i < 350; i++ { // several streamlets of 100
		o, err := publishTolerant(pub, ch, i)
		if err != nil || o.err != nil {
			t.Fatalf("publish %d: %v %v", i, err, o.err)
		}
		acked[o.pos], last = i, o.pos
	}
	evs, err := sub.eventsUntil(1, last)
	if err != nil {
		t.Fatal(err)
	}
	if gaps := checkSurvivor(t, evs, 1, acked); len(gaps) != 0 {
		t.Fatalf("gaps %v without a failure", gaps)
	}
	info, _ := a.route.Info(ch, false)
	byName := map[string]*Server{"a": nodes[0], "b": nodes[1], "c": nodes[2]}
	for _, r := range info.Streamlets {
		set := r.Set()
		if len(set) != 2 || set[0] == set[1] {
			t.Fatalf("streamlet %+v: replica set %v, want two distinct nodes", r, set)
		}
		if !r.Closed {
			continue
		}
		for _, n := range set {
			s := byName[n].host.Streamlet(r.ID)
			if s == nil {
				t.Fatalf("replica %s does not hold streamlet %d", n, r.ID)
			}
			// Every record, acknowledged, is on both replicas, in order.
			eventually(t, waitFor, "replica complete", func() bool { return s.Buf().Len() == int(r.End-r.First) })
			for p := r.First; p < r.End; p++ {
				if i, ok := acked[p]; ok && string(s.Buf().Get(int(p-r.First))) != string(payloadOf(i)) {
					t.Fatalf("replica %s: position %d holds %q, want %q", n, p, s.Buf().Get(int(p-r.First)), payloadOf(i))
				}
			}
		}
	}
}

// replicatedFailover publishes acknowledged messages on a and subscribes
// on b, kills victim once ready says so, and checks that b's subscriber
// got every acknowledged message exactly once, in order, with no GAP over
// any of them (a GAP may cover only positions never acknowledged).
func replicatedFailover(t *testing.T, a, b, victim *Server, ch string, ready func() bool) {
	t.Helper()
	replicatedFailoverN(t, a, b, ch, func() []*Server {
		if ready == nil || ready() {
			return []*Server{victim}
		}
		return nil
	})
}

// replicatedFailoverN is replicatedFailover killing, at once, the nodes
// victims returns once it returns any.
func replicatedFailoverN(t *testing.T, a, b *Server, ch string, victims func() []*Server) {
	t.Helper()
	sub, _ := helloRaw(t, b.Addr())
	sub.subscribe(1, ch, wire.StartLive, 0)
	pub, _ := helloRaw(t, a.Addr())
	acked := map[uint64]int{}
	var last uint64
	refused, unknown, afterKill := 0, 0, 0
	deadline := time.Now().Add(40 * time.Second)
	killed := false
	for i := 0; i < 400 || afterKill < 100 || !killed; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("publishing did not resume: killed %v, %d refused, %d acked after the kill", killed, refused, afterKill)
		}
		if !killed && i >= 130 {
			if vs := victims(); len(vs) > 0 {
				var wg sync.WaitGroup
				for _, v := range vs {
					wg.Add(1)
					go func() { defer wg.Done(); kill(v) }()
				}
				wg.Wait()
				killed = true
			}
		}
		o, err := publishTolerant(pub, ch, i)
		if err != nil {
			t.Fatal(err)
		}
		if o.err != nil {
			switch o.err.Code {
			case wire.CodeUnavailable:
				refused++
			case wire.CodeOutcomeUnknown:
				unknown++
			default:
				t.Fatalf("publish %d: %v", i, o.err)
			}
			continue
		}
		if o.pos <= last {
			t.Fatalf("position %d after %d", o.pos, last)
		}
		last = o.pos
		acked[o.pos] = i
		if killed {
			afterKill++
		}
	}
	evs, err := sub.eventsUntil(1, last)
	if err != nil {
		t.Fatal(err)
	}
	gaps := checkSurvivor(t, evs, 1, acked)
	for _, g := range gaps {
		for p := range acked {
			if p >= g.From && p <= g.To {
				t.Fatalf("acknowledged position %d announced lost in %v", p, g)
			}
		}
	}
	t.Logf("%d acked, %d refused, %d unknown outcome around the kill, gaps %v", len(acked), refused, unknown, gaps)
}

// openOn reports whether the channel's open streamlet, as manager m sees
// it, has node among its replicas and holds some messages but is not full.
func openOn(m *Server, ch, node string, orderer bool) func() bool {
	return func() bool {
		info, _ := m.mgr.Info(ch, false)
		n := len(info.Streamlets)
		if n == 0 {
			return false
		}
		open := info.Streamlets[n-1]
		held := info.Next - open.First
		on := slices.Contains(open.Set(), node) && (!orderer || open.Host == node)
		return !open.Closed && on && held > 5 && held < 80
	}
}

// TestReplication_OrdererDiesNothingAckedLost: N = 2, kill -9 of the node
// ordering the open streamlet during acknowledged publishing: the
// subscriber on a survivor gets every acknowledged message once, in order.
func TestReplication_OrdererDiesNothingAckedLost(t *testing.T) {
	nodes := startCluster3(t, withReplicas(2))
	a, b, c := nodes[0], nodes[1], nodes[2]
	ch := channelManagedBy(t, a, "a", "ordererdeath")
	replicatedFailover(t, a, b, c, ch, openOn(a, ch, "c", true))
}

// TestReplication_FollowerDiesNothingAckedLost: the same with the node
// holding the open streamlet's second replica.
func TestReplication_FollowerDiesNothingAckedLost(t *testing.T) {
	nodes := startCluster3(t, withReplicas(2))
	a, b, c := nodes[0], nodes[1], nodes[2]
	ch := channelManagedBy(t, a, "a", "followerdeath")
	replicatedFailover(t, a, b, c, ch, func() bool {
		info, _ := a.mgr.Info(ch, false)
		n := len(info.Streamlets)
		return openOn(a, ch, "c", false)() && info.Streamlets[n-1].Host != "c"
	})
}

// TestReplication_ManagerDiesNothingAckedLost: the channel's manager dies
// (it also holds replicas of the channel's streamlets).
func TestReplication_ManagerDiesNothingAckedLost(t *testing.T) {
	nodes := startCluster3(t, withReplicas(2))
	a, b, c := nodes[0], nodes[1], nodes[2]
	ch := channelManagedBy(t, a, "c", "mgrdeath")
	replicatedFailover(t, a, b, c, ch, nil)
}

// TestReplication_N3TwoNodesDieAtOnce: N = 3 on five nodes (so that three
// survivors keep the majority): the two replicas of the open streamlet
// that neither publisher nor subscriber is connected to are killed at
// once during acknowledged publishing; the subscriber gets every
// acknowledged message once, in order, none announced lost.
func TestReplication_N3TwoNodesDieAtOnce(t *testing.T) {
	mutate := withReplicas(3)
	a := startNode(t, "a", nil, mutate)
	seed := []string{a.clu().GossipAddr()}
	nodes := map[string]*Server{"a": a}
	for _, n := range []string{"b", "c", "d", "e"} {
		nodes[n] = startNode(t, n, seed, mutate)
	}
	eventually(t, waitFor, "five members everywhere", func() bool {
		for _, s := range nodes {
			if s.clu().Alive() != 5 {
				return false
			}
		}
		return true
	})
	ch := channelManagedBy(t, a, "a", "n3")
	replicatedFailoverN(t, a, nodes["b"], ch, func() []*Server {
		info, _ := a.mgr.Info(ch, false)
		n := len(info.Streamlets)
		if n == 0 {
			return nil
		}
		open := info.Streamlets[n-1]
		held := info.Next - open.First
		var vs []*Server
		for _, r := range open.Set() {
			if r != "a" && r != "b" {
				vs = append(vs, nodes[r])
			}
		}
		if open.Closed || len(open.Set()) != 3 || len(vs) != 2 || held < 5 || held > 80 {
			return nil
		}
		return vs
	})
}
