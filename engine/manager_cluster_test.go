package engine

import (
	"errors"
	"testing"
	"time"
)

// oneHost is a managerCluster whose only node is the shared host h: two
// managers over it act like two nodes that both believe they manage a
// channel (a split brain), without sockets.
type oneHost struct{ h *localHost }

func (o oneHost) hostOf(string) Host { return o.h }
func (o oneHost) choose(string, uint64, chanLoad, []string) (string, bool) {
	return o.h.node, true
}
func (o oneHost) listAll(ch string) []Hosted { hs, _ := o.h.List(ch); return hs }
func (o oneHost) notify(string, []string)    {}
func (o oneHost) managed(string) bool        { return true }
func (o oneHost) skew() time.Duration        { return time.Second }

func TestSplitBrainManagersNeverReusePositions(t *testing.T) {
	opts := DefaultOptions()
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	h := newLocalHost("h")
	m1 := newLocalManager(&opts, h, clock)
	m2 := newLocalManager(&opts, h, clock)
	m1.cl, m2.cl = oneHost{h}, oneHost{h}
	const ch = "split"

	g1, err := m1.WriteGrant(ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := h.Streamlet(g1.Streamlet).append([]byte("a"), now.UnixNano()); err != nil {
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
	if _, err := m2.WriteGrant(ch, g1.Streamlet); !errors.Is(err, errChannelMoved) {
		t.Fatalf("second rotation: %v, want errChannelMoved", err)
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

func TestSealRecordsOneSuccessor(t *testing.T) {
	h := newLocalHost("h")
	g := Grant{Channel: "c", Streamlet: h.newID(), First: 10, LimitMsgs: 10, LimitSize: 1 << 20, LeaseEnd: 1 << 62}
	if err := h.HostStreamlet(g); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Seal(g.Streamlet, 5, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Seal(g.Streamlet, 5, "x"); err != nil {
		t.Fatalf("the same successor again: %v", err)
	}
	if _, err := h.Seal(g.Streamlet, 0, ""); err != nil {
		t.Fatalf("a plain seal: %v", err)
	}
	if _, err := h.Seal(g.Streamlet, 6, "y"); !errors.Is(err, errSuccessorTaken) {
		t.Fatalf("another successor: %v, want errSuccessorTaken", err)
	}
	hs, _ := h.List("c")
	if len(hs) != 1 || hs[0].Succ != 5 || hs[0].SuccHost != "x" || !hs[0].Sealed {
		t.Fatalf("listed %+v", hs)
	}
}
