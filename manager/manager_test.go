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
type oneHost struct{ h *host.Host }

func (o oneHost) HostOf(string) role.Host { return o.h }
func (o oneHost) Choose(string, uint64, Load, []string) (string, bool) {
	return o.h.Node(), true
}
func (o oneHost) ListAll(ch string) []role.Hosted { hs, _ := o.h.List(ch); return hs }
func (o oneHost) Notify(string, []string)         {}
func (o oneHost) Managed(string) bool             { return true }
func (o oneHost) Skew() time.Duration             { return time.Second }

// testConfig is a manager's configuration over host h with fixed limits
// and clock.
func testConfig(h *host.Host, clock func() time.Time) Config {
	l := role.Limits{Msgs: 5000, Size: 2 << 20, Life: 4 * time.Second, TTL: time.Minute}
	return Config{Node: h.Node(), Host: h, NewID: h.NewID, Limits: func(string) role.Limits { return l }, Clock: clock}
}

func TestSplitBrainManagersNeverReusePositions(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	h := host.New("h", clock)
	m1 := New(testConfig(h, clock))
	m2 := New(testConfig(h, clock))
	m1.SetCluster(oneHost{h})
	m2.SetCluster(oneHost{h})
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
	// Both rotate it. The first records its successor; the second finds
	// the successor taken and must not open a streamlet at the same place.
	n1, err := m1.WriteGrant(ch, g1.Streamlet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.WriteGrant(ch, g1.Streamlet); !errors.Is(err, role.ErrChannelMoved) {
		t.Fatalf("second rotation: %v, want ErrChannelMoved", err)
	}
	// Asking again rebuilds m2's state from the host: it continues in
	// m1's successor instead of beside it.
	n2, err := m2.WriteGrant(ch, 0)
	if err != nil || n2.Streamlet != n1.Streamlet || n2.First != n1.First {
		t.Fatalf("after the rebuild m2 granted %+v, %v; want m1's %+v", n2, err, n1)
	}
	if n1.First != g1.First+3 {
		t.Fatalf("successor starts at %d, want %d", n1.First, g1.First+3)
	}
}
