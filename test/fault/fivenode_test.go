//go:build faultsuite

package fault

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Kill cases on five nodes: two replicas of one streamlet killed at once
// (--replicas 3), and a second death after re-replication (--replicas
// 2), checked with `sluice cluster status` of the survivors.

// fiveNodeCases are the five-node kill cases (five, since a survivor
// alone, or two of four, hold no majority).
func fiveNodeCases() []faultCase {
	debug := []string{"--log-level", "debug"} // the managers log each streamlet they open
	return []faultCase{
		// --replicas 3 on five nodes (three would leave the survivor
		// without a majority of the metadata log); 20 channels; every
		// node serves a publisher or a subscriber. The two nodes that
		// share the most open streamlets when the fault strikes are
		// killed at once: those streamlets lose two of their three
		// replicas, and the one left keeps every acknowledged message.
		// Then every closed streamlet is copied back to three holders on
		// the survivors (sluice cluster status of each).
		{name: "kill-two-r3", nodes: 5, flags: append([]string{"--replicas", "3"}, debug...), noLoss: true, replay: true,
			chans: chanNames("fault.r3", 20),
			pubs:  []int{0, 2, 4}, subs: []int{1, 3},
			fault: func(tp *topo) {
				for _, r := range tp.roles() {
					tp.t.Logf("  %v", r)
				}
				x, y, both := MostShared(tp.openNow(), tp.names())
				vx, vy := tp.nodes[slices.Index(tp.names(), x)], tp.nodes[slices.Index(tp.names(), y)]
				tp.t.Logf("%d of %d channels have %s and %s among the three replicas of their open streamlet", both, len(tp.chans), vx.name, vy.name)
				if both == 0 {
					tp.t.Errorf("no open streamlet on two nodes: the case kills no two replicas of one streamlet")
				}
				var rest []*node
				for _, n := range tp.nodes {
					if n != vx && n != vy {
						rest = append(rest, n)
					}
				}
				done0 := tp.copiesDone(rest)
				tp.killAll(vx, vy)
				tp.t.Logf("killed %s and %s (-9)", vx.name, vy.name)
				tp.waitReplicated(rest, []*node{vx, vy}, done0, replicatedWithin)
			}},
		// --replicas 2 on five nodes; a and b serve the clients (a
		// forms the cluster and normally leads the metadata log). Of c,
		// d and e, which serve no client, the two that hold the most
		// streamlets alone (as their only replicas) are chosen: one is killed; once the survivors report every
		// closed streamlet back at two holders, the other is killed too.
		// Without the copies, the streamlets the two held alone would be
		// lost with the second; with them, the replay on the survivors
		// gets every acknowledged message.
		{name: "rereplicate-r2", nodes: 5, flags: append([]string{"--replicas", "2"}, debug...), noLoss: true, replay: true,
			chans: chanNames("fault.rr", nchans),
			pubs:  []int{0, 1}, subs: []int{0, 1},
			fault: func(tp *topo) {
				var ops []Opened
				for _, o := range tp.opened() {
					if slices.Contains(tp.chans, o.Channel) {
						ops = append(ops, o)
					}
				}
				x, y, only := MostAlone(ops, []string{"c", "d", "e"})
				first, second := tp.nodes[slices.Index(tp.names(), x)], tp.nodes[slices.Index(tp.names(), y)]
				tp.t.Logf("%d streamlets opened on %s and %s alone", only, x, y)
				if only == 0 {
					tp.t.Errorf("no streamlet on two of c, d and e alone: killing both would lose nothing even without re-replication")
				}
				var rest []*node
				for _, n := range tp.nodes {
					if n != first && n != second {
						rest = append(rest, n)
					}
				}
				done0 := tp.copiesDone(append(rest, second))
				first.kill(tp.t)
				took, made := tp.waitReplicated(append(rest, second), []*node{first}, done0, replicatedWithin)
				tp.t.Logf("killed %s (-9); %d copies made in %v; killing %s (-9)", first.name, made, took.Round(time.Millisecond), second.name)
				second.kill(tp.t)
				time.Sleep(faultFor / 2) // the case's schedule
			}},
	}
}

// killAll kills (-9) every node of ns at once: every SIGKILL is sent
// before any exit is awaited.
func (tp *topo) killAll(ns ...*node) {
	tp.t.Helper()
	for _, n := range ns {
		n.p.SendKill()
	}
	for _, n := range ns {
		n.kill(tp.t)
	}
}

// copiesDone sums the copies made by the managers of the nodes ns.
func (tp *topo) copiesDone(ns []*node) int64 {
	tp.t.Helper()
	var done int64
	for _, n := range ns {
		st, err := tp.status(n)
		if err != nil {
			tp.t.Fatalf("status of %s: %v", n.name, err)
		}
		done += st.Copies.Done
	}
	return done
}

// waitReplicated polls `sluice cluster status` of every node in ns until
// each sees none of the dead nodes alive, and each one's manager reports
// no streamlet under its replica count and no copy running, at two polls
// in a row, with more copies made in all than done0 (the dead nodes held
// closed streamlets: some must have been copied). It returns how long
// that took and the copies made since done0; after d it fails the case
// (and returns, so that the case still accounts its messages).
func (tp *topo) waitReplicated(ns, dead []*node, done0 int64, d time.Duration) (time.Duration, int64) {
	t := tp.t
	t.Helper()
	t0 := time.Now()
	streak := 0
	last := ""
	for {
		ok, done := true, int64(0)
		var parts []string
		for _, n := range ns {
			st, err := tp.status(n)
			if err != nil {
				ok, last = false, fmt.Sprintf("status of %s: %v", n.name, err)
				break
			}
			for _, m := range st.Members {
				for _, x := range dead {
					if m.Name == x.name && m.State == "alive" {
						ok = false
					}
				}
			}
			done += st.Copies.Done
			if st.Copies.Waiting != 0 || st.Copies.Running != 0 {
				ok = false
			}
			parts = append(parts, fmt.Sprintf("%s: done %d failed %d running %d waiting %d", n.name,
				st.Copies.Done, st.Copies.Failed, st.Copies.Running, st.Copies.Waiting))
		}
		if len(parts) == len(ns) {
			last = strings.Join(parts, "; ")
		}
		if ok && done > done0 {
			if streak++; streak == 2 {
				t.Logf("re-replicated in %v: %s", time.Since(t0).Round(time.Millisecond), last)
				return time.Since(t0), done - done0
			}
		} else {
			streak = 0
		}
		if time.Since(t0) > d {
			t.Errorf("streamlets not back at their replica count %v after the kill: %s", d, last)
			return time.Since(t0), done - done0
		}
		time.Sleep(250 * time.Millisecond) // polling other processes
	}
}

// replicatedWithin bounds re-replication after a node death: failure
// detection (two RPC timeouts, or gossip), a manager's tick, and copies
// of every closed streamlet the dead nodes held (at most 4 at a time per
// manager; each at most 500 records of 64 bytes here).
const replicatedWithin = 30 * time.Second
