package manager

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
)

// Two managers that both believe they manage a channel nobody has written
// yet (a heartbeat flap left their views apart) each open a first
// streamlet: nothing fences the second, as a predecessor's successor
// record fences a later one.
func TestFirstStreamletOfTwoManagersIsOne(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h, m1, m2 := splitBrain(&now)
	const ch = "fresh"
	m1.Info(ch, true) // both rebuilt it from the hosts: nothing there
	now = now.Add(12 * time.Millisecond)
	m2.Info(ch, true)
	g1, err := m1.WriteGrant(ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := m2.WriteGrant(ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	p2, err2 := h.Streamlet(g2.Streamlet).Append([]byte("x"), now.UnixNano())
	p1, err1 := h.Streamlet(g1.Streamlet).Append([]byte("y"), now.UnixNano())
	t.Logf("g1 %d epoch %d first %d; g2 %d epoch %d first %d; append g2 -> %d %v, then g1 -> %d %v",
		g1.Streamlet, g1.Epoch, g1.First, g2.Streamlet, g2.Epoch, g2.First, p2, err2, p1, err1)
	if g1.Streamlet != g2.Streamlet && err1 == nil && err2 == nil {
		t.Fatalf("two first streamlets both took writes: position %d after %d", p1, p2)
	}
}

// TestDecideClaim: what a manager does after claiming a first streamlet.
func TestDecideClaim(t *testing.T) {
	gone := fmt.Errorf("x: %w", role.ErrUnknownStreamlet)
	for _, c := range []struct {
		name string
		won  bool
		held uint64
		c    claimCheck
		want claimStep
	}{
		{"won", true, 0, claimCheck{}, claimWon},
		{"too few answered", false, 0, claimCheck{}, claimNoVote},
		{"the other's node unreachable", false, 9, claimCheck{}, claimUnsure},
		{"the other's streamlet hosted", false, 9, claimCheck{reached: true, hosted: true}, claimRebuild},
		{"hosted between LEN and SEAL", false, 9, claimCheck{reached: true, sealed: true}, claimRebuild},
		{"barred", false, 9, claimCheck{reached: true, sealed: true, sealErr: gone}, claimBarred},
		{"SEAL failed otherwise", false, 9, claimCheck{reached: true, sealed: true, sealErr: errors.New("timeout")}, claimUnsure},
		{"not asked to seal", false, 9, claimCheck{reached: true}, claimUnsure},
	} {
		if got := decideClaim(c.won, c.held, c.c); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestClaimedFirstStreamletNeverHostedIsBarred: a manager that won the
// claim of a channel's first streamlet and never hosted it (it died, or
// is paused) does not block the channel: the next manager bars the
// claimed id at its node, takes the claim over it and opens its own; the
// first manager's streamlet is refused if it comes late.
func TestClaimedFirstStreamletNeverHostedIsBarred(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	h := host.New("h", clock)
	const ch = "fresh"
	stale := h.NewID()
	if id, _ := h.Claim(ch, stale, "h", 0); id != stale {
		t.Fatal("claim not held")
	}
	m := New(testConfig(h, clock))
	m.SetCluster(oneHost{h: h})
	g, err := m.WriteGrant(ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	if g.Streamlet == stale {
		t.Fatal("granted the other manager's claimed streamlet")
	}
	if id, _ := h.Claim(ch, stale, "h", 0); id != g.Streamlet {
		t.Fatalf("claim held %d, want the grant's %d", id, g.Streamlet)
	}
	late := g
	late.Streamlet = stale
	if err := h.HostStreamlet(late); !errors.Is(err, role.ErrSuccessorTaken) {
		t.Fatalf("the barred first streamlet was hosted late: %v", err)
	}
	if _, err := h.Streamlet(g.Streamlet).Append([]byte("x"), now.UnixNano()); err != nil {
		t.Fatal(err)
	}
}

// TestRecreatedChannelClaimsAgain: a channel whose streamlets all expired
// and were freed opens a first streamlet again although its old claim is
// still held (its streamlet is gone, so it is barred and claimed over),
// above every earlier position.
func TestRecreatedChannelClaimsAgain(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	h := host.New("h", clock)
	m := New(testConfig(h, clock))
	m.SetCluster(oneHost{h: h})
	const ch = "c"
	g1, err := m.WriteGrant(ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := h.Streamlet(g1.Streamlet).Append([]byte("x"), now.UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	// Every streamlet expires and is freed; the channel is dropped.
	for i := 0; i < 4; i++ {
		now = now.Add(time.Minute)
		m.Do(m.Tick(now))
	}
	if h.Streamlet(g1.Streamlet) != nil {
		t.Fatal("the first streamlet was not freed")
	}
	m2 := New(testConfig(h, clock)) // another manager, which never knew the channel
	m2.SetCluster(oneHost{h: h})
	g2, err := m2.WriteGrant(ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Streamlet == g1.Streamlet || g2.First <= p1 {
		t.Fatalf("recreated at streamlet %d first %d; the old one was %d, position %d", g2.Streamlet, g2.First, g1.Streamlet, p1)
	}
}
