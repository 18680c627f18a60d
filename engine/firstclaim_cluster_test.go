package engine

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
)

// TestCluster_TwoManagersOpenOneFirstStreamlet: the managers of two nodes
// that both believe they manage a new channel (views apart after a flap)
// ask for its first write grant at once, over real links: CLAIM lets at
// most one first streamlet be opened, so two grants that both succeed name
// the same streamlet, or one of them was sealed before it took a write
// (or neither succeeds, and a manager asking alone then does).
// Without the claim each opened its own, and both took writes.
func TestCluster_TwoManagersOpenOneFirstStreamlet(t *testing.T) {
	nodes := startCluster3(t, nil)
	a, b := nodes[0], nodes[1]
	byName := map[string]*Server{"a": nodes[0], "b": nodes[1], "c": nodes[2]}
	for i := 0; i < 8; i++ {
		ch := fmt.Sprintf("first.%d", i)
		var g [2]role.Grant
		var err [2]error
		var wg sync.WaitGroup
		for k, s := range []*Server{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g[k], err[k] = s.mgr.WriteGrant(ch, 0)
			}()
		}
		wg.Wait()
		if err[0] != nil && err[1] != nil {
			// Both lost (each barred the other's claimed streamlet before
			// it was hosted, or neither is the manager the majority names:
			// c is): safe, and the channel's manager asking alone then
			// gets a grant within a few asks, as a writer asks again.
			mgr, _ := a.clu().ManagerOf(ch)
			m := byName[mgr]
			if m == nil {
				t.Fatalf("%s: no node manages it (%q)", ch, mgr)
			}
			for try := 0; try < 4 && err[0] != nil; try++ {
				g[0], err[0] = m.mgr.WriteGrant(ch, 0)
			}
			if err[0] != nil {
				t.Fatalf("%s: no grant after the contention: %v", ch, err[0])
			}
			continue
		}
		if err[0] != nil || err[1] != nil || g[0].Streamlet == g[1].Streamlet {
			continue
		}
		// Two streamlets: fine only if one no longer takes writes (the
		// loser met the winner's streamlet just hosted, sealed it and
		// continued after it).
		var pos [2]uint64
		var aerr [2]error
		for k := range g {
			h := byName[g[k].Host]
			st := h.host.Streamlet(g[k].Streamlet)
			if st == nil {
				t.Fatalf("%s: granted streamlet %d is not on %s", ch, g[k].Streamlet, g[k].Host)
			}
			pos[k], aerr[k] = st.Append([]byte("x"), time.Now().UnixNano())
		}
		if aerr[0] == nil && aerr[1] == nil {
			t.Fatalf("%s: two first streamlets take writes: %d on %s (position %d) and %d on %s (position %d)",
				ch, g[0].Streamlet, g[0].Host, pos[0], g[1].Streamlet, g[1].Host, pos[1])
		}
	}
}
