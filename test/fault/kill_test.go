//go:build faultsuite

package fault

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/proctest"
)

// The kill cases with replicated streamlets: which node has which role
// for the case's channels when the fault strikes (read from the nodes'
// debug logs and, for the manager, `sluice cluster status`: the metadata
// log's leader manages every channel), killing several nodes at once, and
// waiting for re-replication.

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
// manager of which (the metadata log's leader manages every channel), the
// orderer or a follower of which open streamlet, the gateway of which
// publishers and subscribers. It fails the test when the logs do not name
// an open streamlet for every channel (debug logging is off, or the log
// line changed), or no node names a leader.
func (tp *topo) roles() []Roles {
	tp.t.Helper()
	ops := tp.opened()
	open := tp.openNow()
	leader := tp.leaderName()
	mgr := func(string) string { return leader }
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

// leaderName returns the metadata log's leader as a node's status names
// it, asking the live nodes in turn for up to 15 s (an election may be
// under way).
func (tp *topo) leaderName() string {
	tp.t.Helper()
	names := tp.names()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, n := range tp.nodes {
			raw, err := proctest.StatusJSON(tp.bin, n.client(), secret, 3*time.Second)
			if err != nil {
				continue
			}
			if l, _, ok := RaftRoles(raw, names); ok && l >= 0 {
				return names[l]
			}
		}
		if time.Now().After(deadline) {
			tp.t.Fatal("no node's status names a leader of the metadata log")
		}
		time.Sleep(200 * time.Millisecond) // polling other processes
	}
}

// chanNames returns a case's channels: prefix.0 .. prefix.n-1 (the
// leader manages every channel; the names choose nothing).
func chanNames(prefix string, n int) func(*testing.T, []string) []string {
	return func(*testing.T, []string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s.%d", prefix, i)
		}
		return out
	}
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
// The metadata log's leader manages every channel; hosts are chosen by
// load among all nodes, and which replica orders moves with the loads, so
// the cases choose their victim from the status and the managers' logs
// when the fault strikes, and check that it has the role the case is
// about.
func killCases() []faultCase {
	debug := []string{"--log-level", "debug"} // the managers log each streamlet they open
	r2 := append([]string{"--replicas", replicasFlag()}, debug...)
	clients := func(r Roles) int { return r.Pubs + r.Subs }
	leads := func(r Roles) bool { return r.Managed > 0 }
	leader := func(rs []Roles) int { return slices.IndexFunc(rs, leads) }
	return []faultCase{
		// a serves every client; of b and c, the one that does not lead
		// (or, if neither does, the one ordering more open streamlets)
		// is killed: a host, and nothing else.
		{name: "kill-replicated/host", flags: r2, noLoss: true, replay: true, chans: chanNames("fault.kh", nchans),
			pubs: []int{0, 0}, subs: []int{0},
			fault: killRole(func(rs []Roles) int {
				switch {
				case leads(rs[1]):
					return 2
				case leads(rs[2]):
					return 1
				}
				return pick(rs[2].Ordered > rs[1].Ordered, 2, 1)
			}, func(r Roles) string {
				if r.Ordered == 0 || leads(r) || clients(r) > 0 {
					return "want the orderer of open streamlets, not the leader, gateway of none"
				}
				return ""
			})},
		// The metadata log's leader, which manages every channel (and
		// holds replicas like any node), is killed; clients on every
		// node.
		{name: "kill-replicated/leader", flags: r2, noLoss: true, replay: true, chans: chanNames("fault.kl", nchans),
			pubs: []int{0, 1, 2}, subs: []int{0, 1, 2},
			fault: killRole(leader, func(r Roles) string {
				if r.Managed != nchans {
					return "want the leader of the metadata log (the manager of every channel)"
				}
				return ""
			})},
		// Four nodes: d has --cluster-capacity 0.01, so placement gives
		// it no streamlet while a, b and c can take them; it serves a
		// publisher and a subscriber, b the others. d is killed: a
		// gateway and nothing else.
		{name: "kill-replicated/gateway", nodes: 4, caps: map[string]float64{"d": 0.01}, flags: r2, noLoss: true, replay: true,
			chans: chanNames("fault.kg", nchans),
			pubs:  []int{3, 1}, subs: []int{3, 1, 0},
			fault: killRole(func([]Roles) int { return 3 }, func(r Roles) string {
				if leads(r) || r.Held > 0 || r.Pubs == 0 || r.Subs == 0 {
					return "want the gateway of a publisher and a subscriber, not the leader, holder of no streamlet"
				}
				return ""
			})},
		// 21 channels, publishers and live subscribers on a, b and c,
		// --replicas 3: the leader holds a replica of every streamlet
		// (it hosts only when the others cannot, and with three copies
		// on three nodes they cannot), so killing it kills the manager
		// of every channel, a replica of every open streamlet and a
		// gateway of publishers and subscribers at once.
		{name: "kill-replicated/all", flags: append([]string{"--replicas", "3"}, debug...), noLoss: true, replay: true,
			chans: chanNames("fault.r3", 21),
			pubs:  []int{0, 1, 2}, subs: []int{0, 1, 2},
			fault: killRole(leader, func(r Roles) string {
				if !leads(r) || r.Ordered+r.Followed == 0 || r.Pubs == 0 || r.Subs == 0 {
					return "want the leader, a replica of open streamlets and a gateway of publishers and subscribers at once"
				}
				return ""
			})},
	}
}
