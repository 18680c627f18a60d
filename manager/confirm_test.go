package manager

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
)

// unconfirmed is a cluster of one shared host whose nodes name another
// manager for every channel unless *ok: this manager is the one a
// partial view names (its node and the real manager are cut off from each
// other; the third node, which sees both, names the real one).
type unconfirmed struct {
	oneHost
	ok *bool
}

func (u unconfirmed) Confirm(string) (bool, string) {
	if *u.ok {
		return true, ""
	}
	return false, "a"
}

// TestUnconfirmedManagerOpensNothing: a manager that a majority of the
// nodes does not name seals, bars and opens nothing and forgets its state;
// its writer gets a retriable refusal (ErrNotManager). It may only grant
// the open streamlet the real manager's rebuilt list holds (its host
// orders the writes). Without the confirmation it sealed the real
// manager's streamlet at its end and opened a successor there, which the
// real manager, which had listed the streamlet lost with its host (cut
// off from it), never learnt of: it continued at First+LimitMsgs, and the
// two overlapped (the fault suite's partition-manager: positions
// acknowledged twice).
func TestUnconfirmedManagerOpensNothing(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	h := host.New("h", clock)
	real := New(testConfig(h, clock))
	real.SetCluster(oneHost{h: h})
	ok := false
	other := New(testConfig(h, clock))
	other.SetCluster(unconfirmed{oneHost: oneHost{h: h}, ok: &ok})
	const ch = "cut"

	g, err := real.WriteGrant(ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := h.Streamlet(g.Streamlet).Append([]byte("a"), now.UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	// The partial view's manager may grant the open streamlet it finds.
	if og, err := other.WriteGrant(ch, 0); err != nil || og.Streamlet != g.Streamlet {
		t.Fatalf("the other manager granted %+v, %v; want the open streamlet %d", og, err, g.Streamlet)
	}
	// Asked for a new one, it is refused and touches nothing.
	if og, err := other.WriteGrant(ch, g.Streamlet); !errors.Is(err, ErrNotManager) {
		t.Fatalf("the unconfirmed manager granted %+v, %v; want ErrNotManager", og, err)
	}
	hs, _ := h.List(ch)
	if len(hs) != 1 || hs[0].ID != g.Streamlet || hs[0].Sealed || hs[0].Succ != 0 {
		t.Fatalf("after the refusal the host lists %+v; want only streamlet %d, open, with no successor", hs, g.Streamlet)
	}
	if mc := other.lockExisting(ch); mc != nil {
		mc.mu.Unlock()
		t.Fatal("the refused manager keeps its state of the channel; want it forgotten")
	}
	if asked, refused := other.Confirms(); asked != 1 || refused != 1 {
		t.Fatalf("confirmations %d asked, %d refused; want 1 and 1", asked, refused)
	}
	// The real manager continues its own streamlet.
	n, err := real.WriteGrant(ch, g.Streamlet)
	if err != nil || n.First != g.First+3 {
		t.Fatalf("the real manager granted %+v, %v; want a successor at %d", n, err, g.First+3)
	}
	// Once the majority names it (the cut healed and the views moved the
	// channel), it rebuilds and continues after the real manager's list.
	ok = true
	if og, err := other.WriteGrant(ch, n.Streamlet); err != nil || og.First != n.First {
		t.Fatalf("confirmed, the other manager granted %+v, %v; want the successor at %d", og, err, n.First)
	}
}
