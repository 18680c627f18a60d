package manager

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
)

// oneHost is a Cluster whose only node is the shared host h: two managers
// over it act like two nodes that both believe they manage a channel (a
// split brain), without sockets.
type oneHost struct {
	noCopies
	h      *host.Host
	cutOff *bool // when set and true, the node has no quorum
}

func (o oneHost) HostOf(string) role.Host { return o.h }
func (o oneHost) Choose(string, uint64, Load, []string) (string, bool) {
	return o.h.Node(), true
}
func (o oneHost) ListAll(ch string) []role.Hosted { hs, _ := o.h.List(ch); return hs }
func (o oneHost) Notify(string, []string)         {}
func (o oneHost) Managed(string) bool             { return true }
func (o oneHost) Skew() time.Duration             { return time.Second }
func (o oneHost) Quorate() bool                   { return o.cutOff == nil || !*o.cutOff }

// Claim: the one host is the cluster's majority.
func (o oneHost) Claim(ch string, id uint64, node string, over uint64) (bool, uint64, string) {
	held, at := o.h.Claim(ch, id, node, over)
	if held == id {
		return true, 0, ""
	}
	return false, held, at
}

// noCopies is the copy side of a test Cluster whose nodes never drain.
type noCopies struct{}

func (noCopies) Usable(string) bool { return true }
func (noCopies) Copy(string, string, uint64, role.StreamletRef) error {
	return errors.New("test cluster: no copies")
}
func (noCopies) Go(f func()) bool { f(); return true }

// Claim: a test cluster whose first streamlets nobody contests (only the
// manager under test opens any).
func (noCopies) Claim(string, uint64, string, uint64) (bool, uint64, string) { return true, 0, "" }

// Confirm: a test cluster whose nodes all name the manager under test.
func (noCopies) Confirm(string) (bool, string) { return true, "" }

// testConfig is a manager's configuration over host h with fixed limits
// and clock.
func testConfig(h *host.Host, clock func() time.Time) Config {
	l := role.Limits{Msgs: 5000, Size: 2 << 20, Life: 4 * time.Second, TTL: time.Minute}
	return Config{Node: h.Node(), Host: h, NewID: h.NewID, Limits: func(string) role.Limits { return l }, Clock: clock}
}

// splitBrain is two managers of one host "h" that both believe they
// manage every channel (a heartbeat flap left their nodes' views apart),
// on a clock that reads *now, which the test moves.
func splitBrain(now *time.Time) (h *host.Host, m1, m2 *Manager) {
	clock := func() time.Time { return *now }
	h = host.New("h", clock)
	m1 = New(testConfig(h, clock))
	m2 = New(testConfig(h, clock))
	m1.SetCluster(oneHost{h: h})
	m2.SetCluster(oneHost{h: h})
	return h, m1, m2
}

func TestSplitBrainManagersNeverReusePositions(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h, m1, m2 := splitBrain(&now)
	const ch = "split"

	g1, err := m1.WriteGrant(ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := h.Streamlet(g1.Streamlet).Append([]byte("a"), now.UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	// m2 takes the channel over: it continues in the open streamlet.
	g2, err := m2.WriteGrant(ch, 0)
	if err != nil || g2.Streamlet != g1.Streamlet {
		t.Fatalf("takeover granted %+v, %v; want the open streamlet %d", g2, err, g1.Streamlet)
	}
	m2.Interest(ch, "reader-node", 1)
	// Both rotate it. The first records its successor; the second finds
	// the successor taken and must not open a streamlet at the same place:
	// it rebuilds its state from the host, keeping its readers, and
	// continues in m1's successor instead of beside it.
	n1, err := m1.WriteGrant(ch, g1.Streamlet)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := m2.WriteGrant(ch, g1.Streamlet)
	if err != nil || n2.Streamlet != n1.Streamlet || n2.First != n1.First {
		t.Fatalf("after the rebuild m2 granted %+v, %v; want m1's %+v", n2, err, n1)
	}
	mc := m2.lockLive(ch, false)
	readers := mc.st.rnodes["reader-node"]
	mc.mu.Unlock()
	if readers != 1 {
		t.Fatalf("the rebuilt state has %d readers on reader-node, want the 1 registered before", readers)
	}
	if n1.First != g1.First+3 {
		t.Fatalf("successor starts at %d, want %d", n1.First, g1.First+3)
	}
}

// TestNoQuorumNoGrant: a manager whose node sees no majority of its
// cluster grants nothing, not even the open streamlet, and grants again
// once the majority is back.
func TestNoQuorumNoGrant(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	h := host.New("h", clock)
	m := New(testConfig(h, clock))
	cut := false
	m.SetCluster(oneHost{h: h, cutOff: &cut})
	g, err := m.WriteGrant("q", 0)
	if err != nil {
		t.Fatal(err)
	}
	cut = true
	if _, err := m.WriteGrant("q", 0); !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("without quorum: %v, want ErrNoQuorum", err)
	}
	if _, err := m.WriteGrant("other", 0); !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("new channel without quorum: %v, want ErrNoQuorum", err)
	}
	cut = false
	if g2, err := m.WriteGrant("q", 0); err != nil || g2.Streamlet != g.Streamlet {
		t.Fatalf("quorum back: %+v, %v; want the open streamlet %d", g2, err, g.Streamlet)
	}
}

// TestSuccessorClaim: the id recorded as a streamlet's successor is used
// again for the next streamlet after it until one is opened, so that the
// host's compare-and-set accepts the retry instead of reporting another
// manager.
func TestSuccessorClaim(t *testing.T) {
	var cs chanState
	n := uint64(100)
	fresh := func() uint64 { n++; return n }
	if id := cs.successorID(7, fresh); id != 101 {
		t.Fatalf("first id %d", id)
	}
	cs.claim(7, 101)
	if id := cs.successorID(7, fresh); id != 101 {
		t.Fatalf("after a claim: %d, want the claimed 101", id)
	}
	if id := cs.successorID(8, fresh); id != 102 {
		t.Fatalf("another predecessor: %d, want a fresh id", id)
	}
	cs.claim(0, 0)
	if id := cs.successorID(7, fresh); id != 103 {
		t.Fatalf("claim cleared: %d, want a fresh id", id)
	}
}

// claimAt is Cluster.Claim over the test cluster's hosts: every host not
// down votes, and a majority of all of them must hold the claim.
func claimAt(hosts map[string]*host.Host, down map[string]bool, ch string, id uint64, node string, over uint64) (bool, uint64, string) {
	votes := 0
	var held uint64
	var heldAt string
	for name, h := range hosts {
		if down[name] {
			continue
		}
		if got, at := h.Claim(ch, id, node, over); got == id {
			votes++
		} else if held == 0 {
			held, heldAt = got, at
		}
	}
	if 2*votes > len(hosts) {
		return true, 0, ""
	}
	return false, held, heldAt
}
