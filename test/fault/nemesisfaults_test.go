//go:build faultsuite && nemesis

package fault

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/proctest"
)

// nemesis applies a schedule to a topology from the test's goroutine:
// each fault at its time, each heal at its time (a restart that takes a
// while delays the steps after it; such delays are logged), recording the
// windows as applied.
type nemesis struct {
	t     *testing.T
	tp    *topo
	ctx   context.Context
	sched Schedule
	start time.Time

	windows    []Window
	open       map[int]int    // fault seq -> its index in windows, until healed
	busy       map[int]int    // node index -> active faults involving it (as applied)
	down       map[int]bool   // nodes stopped on purpose (killed, draining)
	bursts     []*publisher   // the kill-voter bursts' publishers
	burstChans []string       // their channels
	bwg        sync.WaitGroup // the bursts' goroutines
}

// step is a fault's application or its heal.
type step struct {
	at   time.Duration
	heal bool
	f    Fault
}

// sleepUntil waits until d after the run's start (the schedule's clock,
// not a synchronisation).
func (nm *nemesis) sleepUntil(d time.Duration) {
	if w := time.Until(nm.start.Add(d)); w > 0 {
		select {
		case <-time.After(w):
		case <-nm.ctx.Done():
			nm.t.Fatal("nemesis: the run timed out")
		}
	}
}

// run applies every fault of the schedule and heals it, in time order
// (heals first at equal times), and waits for the bursts it started.
func (nm *nemesis) run() {
	nm.open, nm.busy, nm.down = map[int]int{}, map[int]int{}, map[int]bool{}
	var steps []step
	for _, f := range nm.sched.Faults {
		steps = append(steps, step{f.At, false, f}, step{f.End(), true, f})
	}
	sort.SliceStable(steps, func(i, j int) bool {
		if steps[i].at != steps[j].at {
			return steps[i].at < steps[j].at
		}
		return steps[i].heal && !steps[j].heal
	})
	heals := map[int]func(){}
	for _, s := range steps {
		nm.sleepUntil(s.at)
		if late := time.Since(nm.start) - s.at; late > time.Second {
			nm.t.Logf("nemesis: %s of #%d %v late (an earlier step took that long)", pick(s.heal, "heal", "fault"), s.f.Seq, late.Round(100*time.Millisecond))
		}
		nm.checkRunning()
		if s.heal {
			heals[s.f.Seq]()
			w := &nm.windows[nm.open[s.f.Seq]]
			w.Until = time.Now()
			for _, i := range nodesOf(w.Target, nm.tp) {
				nm.busy[i]--
			}
			delete(nm.open, s.f.Seq)
			nm.t.Logf("nemesis +%.1fs: healed %v", time.Since(nm.start).Seconds(), w)
			continue
		}
		w := Window{Fault: s.f, From: time.Now()}
		heals[s.f.Seq] = nm.apply(s.f, &w)
		for _, i := range nodesOf(w.Target, nm.tp) {
			nm.busy[i]++
		}
		nm.open[s.f.Seq] = len(nm.windows)
		nm.windows = append(nm.windows, w)
		nm.t.Logf("nemesis +%.1fs: %v", w.From.Sub(nm.start).Seconds(), w)
	}
	nm.bwg.Wait()
}

// nodesOf returns the indexes of the nodes named in a window's target.
func nodesOf(target string, tp *topo) []int {
	var out []int
	for i, n := range tp.nodes {
		for _, f := range strings.Fields(target) {
			if f == n.name {
				out = append(out, i)
			}
		}
	}
	return out
}

// checkRunning fails the run for every node that exited though no fault
// stopped it, and starts it again.
func (nm *nemesis) checkRunning() {
	for i, n := range nm.tp.nodes {
		if !nm.down[i] && !n.p.Running() {
			nm.t.Errorf("node %s exited on its own (code %d) at +%.1fs:\n%s", n.name, n.p.ExitCode(),
				time.Since(nm.start).Seconds(), n.p.Tail(30))
			nm.tp.start(n)
		}
	}
}

// apply strikes fault f, fills in w's target and note, and returns its
// heal.
func (nm *nemesis) apply(f Fault, w *Window) func() {
	tp := nm.tp
	n := tp.nodes[f.Node]
	w.Target = n.name
	switch f.Kind {
	case Isolate:
		tp.cut(n)
		return func() { tp.heal(n) }
	case PairCut:
		p := tp.nodes[f.Peer]
		w.Target = n.name + " <-> " + p.name
		undo, undoBack := tp.dropToPeers(n, p), tp.dropToPeers(p, n)
		return func() { undo(); undoBack() }
	case OneWay:
		if f.Peer < 0 {
			w.Target = n.name + " -> every peer"
			return tp.dropToPeers(n)
		}
		p := tp.nodes[f.Peer]
		w.Target = n.name + " -> " + p.name
		return tp.dropToPeers(n, p)
	case Pause:
		n.signal(nm.t, syscall.SIGSTOP)
		return func() { n.signal(nm.t, syscall.SIGCONT) }
	case Drain:
		nm.down[f.Node] = true
		n.signal(nm.t, syscall.SIGTERM)
		return func() { nm.drained(f.Node); nm.restart(f.Node, false) }
	case KillLeader, KillVoter:
		i, note := nm.resolve(f)
		n, w.Target, w.Note = tp.nodes[i], tp.nodes[i].name, note
		if f.Kind == KillVoter {
			nm.burst(f, i)
			nm.sleepUntil(f.At + f.BurstLead)
		}
		nm.down[i] = true
		n.kill(nm.t)
		return func() { nm.restart(i, f.Wipe) }
	default: // Kill
		nm.down[f.Node] = true
		n.kill(nm.t)
		return func() { nm.restart(f.Node, f.Wipe) }
	}
}

// drained waits (at most 40 s) for node i to exit after its SIGTERM; a
// drain that does not end or ends with an error fails the run.
func (nm *nemesis) drained(i int) {
	n := nm.tp.nodes[i]
	select {
	case <-n.p.Exited():
		if code := n.p.ExitCode(); code != 0 {
			nm.t.Errorf("node %s exited with %d after SIGTERM:\n%s", n.name, code, n.p.Tail(20))
		}
	case <-time.After(40 * time.Second):
		nm.t.Errorf("node %s still running 40 s after SIGTERM (killed):\n%s", n.name, n.p.Tail(20))
		n.kill(nm.t)
	}
}

// wipeData gives node n a fresh data directory from its next start on:
// it lost its state.
func (tp *topo) wipeData(n *node) {
	_ = os.RemoveAll(tp.dataDir(n))
	tp.wipes[n.name]++
}

// restart starts node i again, with a fresh data directory when wipe.
func (nm *nemesis) restart(i int, wipe bool) {
	n := nm.tp.nodes[i]
	if wipe {
		nm.tp.wipeData(n)
	}
	nm.tp.start(n)
	nm.down[i] = false
}

// resolve chooses the node a KillLeader or KillVoter kills: the Raft
// leader, or a voter other than it, as the status of a node that no fault
// involves names them, when that node is not under a fault itself and no
// other fault of the schedule strikes it while this one holds (the
// schedule kept the fallback apart from those, not the leader: seed 201
// of 5 nodes, combined, paused the leader the first fault had killed);
// else the schedule's fallback (f.Node), with a note saying why.
func (nm *nemesis) resolve(f Fault) (int, string) {
	tp := nm.tp
	names := tp.names()
	taken := nm.takenDuring(f)
	free := func(i int) bool { return i == f.Node || !taken[i] }
	for _, k := range nm.order(f.Node) {
		raw, err := proctest.StatusJSON(tp.bin, tp.nodes[k].client(), secret, 3*time.Second)
		if err != nil {
			continue
		}
		leader, voters, ok := RaftRoles(raw, names)
		if !ok {
			return f.Node, "not a leader or voter: the status names no Raft leader or voters"
		}
		if f.Kind == KillLeader {
			if leader >= 0 && nm.busy[leader] == 0 && free(leader) {
				return leader, "the Raft leader"
			}
			return f.Node, fmt.Sprintf("not the leader: the leader %q is under another fault, due for one, or unknown", nodeName(names, leader))
		}
		for _, v := range nm.order(f.Node) {
			if containsInt(voters, v) && v != leader && free(v) {
				return v, fmt.Sprintf("a voter (leader %s)", nodeName(names, leader))
			}
		}
		return f.Node, fmt.Sprintf("not a voter: no free voter besides the leader among %v", voters)
	}
	return f.Node, "not a leader or voter: no node answered its status"
}

// takenDuring returns the nodes that other faults of the schedule involve
// at some moment while f holds.
func (nm *nemesis) takenDuring(f Fault) map[int]bool {
	out := map[int]bool{}
	for _, g := range nm.sched.Faults {
		if g.Seq != f.Seq && g.At < f.End() && f.At < g.End() {
			for _, i := range g.Involved() {
				out[i] = true
			}
		}
	}
	return out
}

// order returns the nodes that no active fault involves, starting at
// from and going round.
func (nm *nemesis) order(from int) []int {
	var out []int
	for k := 0; k < len(nm.tp.nodes); k++ {
		i := (from + k) % len(nm.tp.nodes)
		if nm.busy[i] == 0 && !nm.down[i] {
			out = append(out, i)
		}
	}
	return out
}

func nodeName(names []string, i int) string {
	if i < 0 {
		return "none"
	}
	return names[i]
}

// burst starts fault f's burst: a publisher on a node that no fault
// involves (other than victim) publishes 2 messages to each of
// burstChans new channels, as fast as its window allows.
func (nm *nemesis) burst(f Fault, victim int) {
	via := -1
	for _, i := range nm.order(victim + 1) {
		if i != victim {
			via = i
			break
		}
	}
	if via < 0 {
		nm.t.Logf("nemesis: #%d: no node to publish the burst through", f.Seq)
		return
	}
	n := nm.tp.nodes[via]
	p := &publisher{id: 100 + f.Seq, conn: dial(nm.ctx, nm.t, n, fmt.Sprintf("burst%d-%s", f.Seq, n.name))}
	var chans []string
	for k := 0; k < burstChans; k++ {
		chans = append(chans, fmt.Sprintf("nem.burst%d.%d", f.Seq, k))
	}
	nm.bursts = append(nm.bursts, p)
	nm.burstChans = append(nm.burstChans, chans...)
	nm.bwg.Add(1)
	go func() {
		defer nm.bwg.Done()
		for round := 0; round < 2; round++ {
			for _, ch := range chans {
				p.send(nm.ctx, ch)
			}
		}
	}()
}

// converge waits until every node sees every node alive, at most d; a
// cluster that does not converge fails the run, which goes on to its
// replay and counts.
func (nm *nemesis) converge(d time.Duration) {
	t0 := time.Now()
	last := ""
	for time.Since(t0) < d {
		ok := true
		for _, n := range nm.tp.nodes {
			st, err := nm.tp.status(n)
			if alive := proctest.Alive(st); err != nil || alive != len(nm.tp.nodes) {
				ok, last = false, fmt.Sprintf("%s sees %d alive (%v)", n.name, alive, err)
				break
			}
		}
		if ok {
			nm.t.Logf("nemesis: every node sees every node alive %v after the end", time.Since(t0).Round(100*time.Millisecond))
			return
		}
		time.Sleep(250 * time.Millisecond) // polling other processes
	}
	nm.t.Errorf("nemesis: the cluster did not converge within %v after the end: %s", d, last)
}

// logOutcomes logs what the publishes that were not acknowledged were
// told, by kind of answer.
func (nm *nemesis) logOutcomes(all []Publish) {
	why := map[string]int{}
	for _, e := range all {
		switch e.Outcome {
		case Acked:
		case Pending:
			why["no outcome by the end of the run"]++
		default:
			why[longNumber.ReplaceAllString(e.Err, "N")]++
		}
	}
	for text, n := range why {
		nm.t.Logf("  %d not acknowledged: %s", n, text)
	}
}
