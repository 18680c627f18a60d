package engine

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestCluster_PartitionedPairKeepsOneManager: a manages a channel whose
// open streamlet S is on b; a and b are then cut off from each other alone
// (c reaches both and sees both alive). a lists S lost with b and
// continues at S.First+LimitMsgs; in b's view {b, c} the channel's manager
// is b or c, to which b's gateway sends its grants. That manager must not
// act on the channel: without the confirmation of its role it sealed S at
// its real end and opened a successor there, whose range overlapped the
// one a opened (positions given twice, acknowledged twice). With it, b's
// grant is refused (UNAVAILABLE to the writer) and a goes on.
func TestCluster_PartitionedPairKeepsOneManager(t *testing.T) {
	var cut atomic.Bool
	const limitMsgs = 1000
	nodes := startCluster3(t, func(o *Options) {
		o.LimitMsgs = limitMsgs
		o.LimitLife = time.Minute // no lease ends during the test
		switch o.ServerName {
		case "a":
			o.cutPeer = func(peer string) bool { return peer == "b" && cut.Load() }
		case "b":
			o.cutPeer = func(peer string) bool { return peer == "a" && cut.Load() }
		}
	})
	a, b := nodes[0], nodes[1]
	var ch string
	var first uint64
	var s uint64
	for i := 0; i < 40 && ch == ""; i++ {
		c := channelManagedBy(t, a, "a", fmt.Sprintf("pair%d", i))
		g, err := a.mgr.WriteGrant(c, 0)
		if err != nil {
			t.Fatal(err)
		}
		if g.Host == "b" {
			ch, first, s = c, g.First, g.Streamlet
		}
	}
	if ch == "" {
		t.Fatal("no channel of a got its first streamlet on b")
	}
	for range 3 {
		if _, err := b.host.Streamlet(s).Append([]byte("x"), time.Now().UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	// b reads the channel from a, so b has a link to a (a has one to b,
	// S's host) and each notices the other's silence on it.
	if _, found := b.clu().Router().Info(ch, false); !found {
		t.Fatalf("b does not find %s at a", ch)
	}
	cut.Store(true)
	t.Cleanup(func() { cut.Store(false) })
	eventually(t, waitFor, "a and b see each other down, and a lists S lost", func() bool {
		if a.clu().Reachable("b") || b.clu().Reachable("a") {
			return false
		}
		info, _ := a.mgr.Info(ch, false)
		n := len(info.Streamlets)
		return n > 0 && info.Streamlets[n-1].ID == s && info.Streamlets[n-1].Lost
	})
	if m, _ := b.clu().ManagerOf(ch); m == "a" {
		t.Fatalf("b's view still names a the manager of %s", ch)
	}
	// b's writer asks for a new streamlet after S (S refused it, or its
	// lease ended), through b's view; then a continues after S.
	gb, errb := b.clu().Router().WriteGrant(ch, s)
	ga, erra := a.mgr.WriteGrant(ch, s)
	if erra != nil {
		t.Fatalf("a, the manager a majority names, was refused: %v", erra)
	}
	if ga.First != first+limitMsgs {
		t.Fatalf("a continued at %d, want S.First+LimitMsgs = %d", ga.First, first+limitMsgs)
	}
	if errb == nil && gb.Streamlet != ga.Streamlet && gb.First < ga.First+limitMsgs && ga.First < gb.First+limitMsgs {
		t.Fatalf("two open streamlets overlap: %d at [%d, %d) from b's view and %d at [%d, %d) from a's: positions given twice",
			gb.Streamlet, gb.First, gb.First+limitMsgs, ga.Streamlet, ga.First, ga.First+limitMsgs)
	}
	if errb == nil {
		t.Fatalf("b's view granted %+v; want a retriable refusal", gb)
	}
	if !strings.Contains(errb.Error(), "does not name this node the channel's manager") {
		t.Fatalf("b's refusal: %v; want the manager's role refused", errb)
	}
}
