package engine

import (
	"fmt"
	"sync"
	"testing"

	"github.com/sluice-rtm/sluice/role"
)

// TestCluster_TwoManagersOpenOneFirstStreamlet: the managers of two nodes
// that both believe they manage a new channel (views apart after a flap)
// ask for its first write grant at once, over real links: CLAIM lets at
// most one first streamlet be opened, so two grants that both succeed name
// the same streamlet. Without the claim each opened its own.
func TestCluster_TwoManagersOpenOneFirstStreamlet(t *testing.T) {
	nodes := startCluster3(t, nil)
	a, b := nodes[0], nodes[1]
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
		if err[0] == nil && err[1] == nil && g[0].Streamlet != g[1].Streamlet {
			t.Fatalf("%s: two first streamlets granted: %d on %s (first %d) and %d on %s (first %d)",
				ch, g[0].Streamlet, g[0].Host, g[0].First, g[1].Streamlet, g[1].Host, g[1].First)
		}
		if err[0] != nil && err[1] != nil {
			t.Fatalf("%s: neither grant: %v; %v", ch, err[0], err[1])
		}
	}
}
