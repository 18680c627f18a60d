package manager

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/role"
)

// reverseGate holds the first k OPENs proposed until all k are there (each
// read the state before any of them applied, as proposals that reach one
// batch of the log have), then lets them apply last first; later ones pass.
type reverseGate struct {
	mu      sync.Mutex
	cond    *sync.Cond
	k       int
	arrived int
	next    int // the arrival whose turn it is; -1 until all k arrived
	opens   int // OPENs proposed
}

func newReverseGate(k int) *reverseGate {
	g := &reverseGate{k: k, next: -1}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *reverseGate) enter(cmd []byte) func() {
	if meta.Kind(cmd[0]) != meta.KindOpen {
		return func() {}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opens++
	if g.arrived >= g.k {
		return func() {}
	}
	me := g.arrived
	g.arrived++
	if g.arrived == g.k {
		g.next = g.k - 1
		g.cond.Broadcast()
	}
	for g.next != me {
		g.cond.Wait()
	}
	return func() {
		g.mu.Lock()
		g.next--
		g.cond.Broadcast()
		g.mu.Unlock()
	}
}

// New channels asked for at once each take one commit: their OPENs, which
// propose the same epoch and reach the log in any order, all apply (the
// epoch floor, meta). With every epoch given out as the floor, one applied
// per commit and every other conflicted and was proposed again (2k-1
// OPENs for k; under load, grants failed after their tries).
func TestWriteGrant_ConcurrentNewChannelsEachCommitOnce(t *testing.T) {
	e := newEnv(t, 1, "a", "b", "c")
	const k = 8
	gate := newReverseGate(k)
	e.log.gate = gate.enter
	var wg sync.WaitGroup
	errs := make([]error, k)
	for i := range k {
		wg.Add(1)
		go func() { // awaited below
			defer wg.Done()
			_, errs[i] = e.m.WriteGrant(fmt.Sprintf("new.%d", i), 0)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		if c := e.channel(fmt.Sprintf("new.%d", i)); len(c.List) != 1 || c.List[0].First != 1 {
			t.Fatalf("new.%d: %+v", i, c.List)
		}
	}
	if gate.opens != k {
		t.Fatalf("%d OPENs proposed for %d new channels, want one each", gate.opens, k)
	}
}

// A close the tick started but that still waits for a worker of the
// cluster's pool does not hold the channel: a grant asked meanwhile (on a
// worker of the same pool, in a cluster) closes and opens itself instead
// of waiting for it. Before, the grant waited for the queued close, and
// grants waiting so on every worker stopped the leader for good.
func TestTick_QueuedCloseDoesNotHoldTheChannel(t *testing.T) {
	e := newEnv(t, 1, "a", "b")
	g := e.grant("c", 0)
	e.publish(g, 3)
	e.clock.advance(life)
	e.cl.mu.Lock()
	e.cl.hold = true
	e.cl.mu.Unlock()
	e.m.Tick(e.clock.now()) // queues the close of g's streamlet
	e.cl.mu.Lock()
	queued := len(e.cl.held)
	e.cl.mu.Unlock()
	if queued == 0 {
		t.Fatal("the tick queued no close")
	}
	done := make(chan role.Grant, 1)
	go func() { done <- e.grant("c", g.Streamlet) }() // the grant below is awaited
	var g2 role.Grant
	select {
	case g2 = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the grant waits for the close still queued in the pool")
	}
	if g2.Streamlet == g.Streamlet || g2.First != 4 {
		t.Fatalf("grant after the lease: %+v (was %+v)", g2, g)
	}
	e.cl.runHeld() // the close runs late and finds nothing to do
	c := e.channel("c")
	if len(c.List) != 2 || c.List[0].End != 4 || c.List[1].ID != g2.Streamlet || c.List[1].Closed {
		t.Fatalf("list after the late close: %+v", c.List)
	}
}
