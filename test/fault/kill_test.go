//go:build faultsuite

package fault

import (
	"bufio"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/placement"
)

// The kill cases with replicated streamlets: which node has which role
// for the case's channels when the fault strikes (read from the nodes'
// debug logs and the placement ring), killing several nodes at once, and
// waiting for re-replication (`sluice cluster status`).

// opened returns every streamlet opening that the nodes' managers logged
// (the nodes run with --log-level debug).
func (tp *topo) opened() []Opened {
	var out []Opened
	for _, n := range tp.nodes {
		f, err := os.Open(n.log)
		if err != nil {
			tp.t.Fatalf("log of node %s: %v", n.name, err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if o, ok := ParseOpened(sc.Text()); ok {
				out = append(out, o)
			}
		}
		f.Close()
	}
	return out
}

// roles returns what every node is for the case's channels now: the
// manager of which (the ring over every node of the topology, all alive),
// the orderer or a follower of which open streamlet, the gateway of which
// publishers and subscribers. It fails the test when the logs do not name
// an open streamlet for every channel (debug logging is off, or the log
// line changed).
func (tp *topo) roles() []Roles {
	tp.t.Helper()
	ops := tp.opened()
	open := tp.openNow()
	ring := tp.ring()
	mgr := func(ch string) string { return managerAmong(tp.t, ch, ring) }
	pubs, subs := tp.nameList(tp.pubs), tp.nameList(tp.subs)
	var out []Roles
	for _, n := range tp.names() {
		out = append(out, RolesOf(n, tp.chans, mgr, ops, open, pubs, subs))
	}
	return out
}

// openNow returns the replica set of each channel's open streamlet now
// (OpenSets); it fails the test when the logs name none for a channel
// (debug logging is off, or the log line changed).
func (tp *topo) openNow() map[string][]string {
	tp.t.Helper()
	open := OpenSets(tp.opened(), time.Now())
	for _, ch := range tp.chans {
		if len(open[ch]) == 0 {
			tp.t.Fatalf("no streamlet opening of %s in the nodes' logs (they need --log-level debug)", ch)
		}
	}
	return open
}

func (r Roles) String() string {
	return fmt.Sprintf("%s: manager of %d channels, orderer of %d open streamlets, follower of %d (%d streamlets held so far), gateway of %d publishers and %d subscribers",
		r.Node, r.Managed, r.Ordered, r.Followed, r.Held, r.Pubs, r.Subs)
}

// killRole is the fault of a kill-replicated case: at the end of the warm
// phase it reads every node's roles, kills (-9) the node pick chooses,
// fails the case when check says the victim lacks the role the case is
// about, and lets publishing go on for half the fault's length.
func killRole(pick func(rs []Roles) int, check func(r Roles) string) func(tp *topo) {
	return func(tp *topo) {
		rs := tp.roles()
		v := pick(rs)
		for _, r := range rs {
			tp.t.Logf("  %v", r)
		}
		if why := check(rs[v]); why != "" {
			tp.t.Errorf("the victim %s is not what the case kills: %s", tp.nodes[v].name, why)
		}
		tp.t.Logf("killing %s (-9)", tp.nodes[v].name)
		tp.nodes[v].kill(tp.t)
		time.Sleep(faultFor / 2) // the case's schedule
	}
}

// killCases are the cases that kill (-9) nodes holding replicated
// streamlets during acknowledged publishing. Every acknowledged message
// must reach every live subscriber once, in order, none announced lost
// (a subscriber of a killed node resumes on a survivor), and subscribers
// that replay every channel from its start on every survivor afterwards
// must get them all too.
//
// With --replicas 2 on three nodes, a channel's streamlets are held by
// the two nodes other than its manager (a manager chooses hosts among the
// other nodes when there are any), so a node never manages and hosts one
// channel at once: the manager case's victim hosts nothing of its
// channels and the host case's victim manages none and serves no client.
// The gateway case has a fourth node of tiny capacity, which placement
// gives no streamlet and almost no channel: it only serves clients. The
// all-roles victim manages a third of the channels, orders open
// streamlets of others and serves a publisher and a subscriber of every
// channel. Which replica orders moves with the nodes' loads, so the host
// and all-roles cases choose their victim from the managers' logs when
// the fault strikes.
func killCases() []faultCase {
	debug := []string{"--log-level", "debug"} // the managers log each streamlet they open
	r2 := append([]string{"--replicas", replicasFlag()}, debug...)
	byA := func(t *testing.T, names []string) []string { return managedBy(t, "fault.ka", nchans, names, "a") }
	byC := func(t *testing.T, names []string) []string { return managedBy(t, "fault.kc", nchans, names, "c") }
	c := func([]Roles) int { return 2 }
	clients := func(r Roles) int { return r.Pubs + r.Subs }
	return []faultCase{
		// a manages every channel and serves every client; of b and c,
		// which hold the replicas, the one ordering more open streamlets
		// is killed: a host, and nothing else.
		{name: "kill-replicated/host", flags: r2, noLoss: true, replay: true, chans: byA, pubs: []int{0, 0}, subs: []int{0},
			fault: killRole(func(rs []Roles) int {
				return pick(rs[2].Ordered > rs[1].Ordered, 2, 1)
			}, func(r Roles) string {
				if r.Ordered == 0 || r.Managed > 0 || clients(r) > 0 {
					return "want the orderer of open streamlets, manager of none, gateway of none"
				}
				return ""
			})},
		// c manages every channel; the clients are on a and b, which
		// hold the replicas.
		{name: "kill-replicated/manager", flags: r2, noLoss: true, replay: true, chans: byC, pubs: []int{0, 1}, subs: []int{0, 1},
			fault: killRole(c, func(r Roles) string {
				if r.Managed != nchans || r.Held > 0 || clients(r) > 0 {
					return "want the manager of every channel, holder of no streamlet, gateway of none"
				}
				return ""
			})},
		// Four nodes: d has --cluster-capacity 0.01, so placement gives
		// it no streamlet while a, b and c can take them, and it manages
		// none of the channels (managed by a): it only serves clients, a
		// publisher and a subscriber; b serves the others. d is killed:
		// a gateway and nothing else.
		{name: "kill-replicated/gateway", nodes: 4, caps: map[string]float64{"d": 0.01}, flags: r2, noLoss: true, replay: true,
			chans: func(t *testing.T, names []string) []string {
				return managedAmong(t, "fault.kg", nchans, []placement.Node{{ID: "a", Capacity: 1}, {ID: "b", Capacity: 1},
					{ID: "c", Capacity: 1}, {ID: "d", Capacity: 0.01}}, "a")
			},
			pubs: []int{3, 1}, subs: []int{3, 1, 0},
			fault: killRole(func([]Roles) int { return 3 }, func(r Roles) string {
				if r.Managed > 0 || r.Held > 0 || r.Pubs == 0 || r.Subs == 0 {
					return "want the gateway of a publisher and a subscriber, manager of none, holder of no streamlet"
				}
				return ""
			})},
		// 21 channels managed by a, b and c; publishers on all three,
		// live subscribers on a and c. Of a and c, the one ordering more
		// open streamlets is killed (one of them orders b's channels);
		// b has no live subscriber, so its replay reads the surviving
		// replicas (with --replicas 1 it gets GAP lost for what the victim
		// held, and the case fails).
		{name: "kill-replicated/all", flags: r2, noLoss: true, replay: true,
			chans: func(t *testing.T, names []string) []string { return managedBy(t, "fault.r2", 21, names, "a", "b", "c") },
			pubs:  []int{0, 1, 2}, subs: []int{0, 2},
			fault: killRole(func(rs []Roles) int {
				return pick(rs[2].Ordered >= rs[0].Ordered, 2, 0)
			}, func(r Roles) string {
				if r.Managed == 0 || r.Ordered == 0 || r.Pubs == 0 || r.Subs == 0 {
					return "want a manager, an orderer and a gateway of publishers and subscribers at once"
				}
				return ""
			})},
	}
}
