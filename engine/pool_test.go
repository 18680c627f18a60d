package engine

import (
	"fmt"
	"testing"
)

// A node whose pool of calls is full (every worker waiting for another
// node, as a gateway's grants wait for the leader, and the queue full)
// still serves its peers' requests: they run on a pool of their own. With
// one pool, the leader's SEAL and HOST to such a gateway queued behind
// grants that waited for that very leader, and only the request timeouts
// broke the cycle (BenchmarkClusterLeases).
func TestCluster_PeersServedWhileTheCallsPoolIsFull(t *testing.T) {
	nodes := startCluster3(t, nil)
	a, b := nodes[0], nodes[1]
	lead(t, a, "a")
	var id uint64
	for i := 0; id == 0; i++ {
		if i == 100 {
			t.Fatal("no streamlet placed on b in 100 channels")
		}
		g, err := a.mgr.WriteGrant(fmt.Sprintf("pool.%d", i), 0)
		if err != nil {
			t.Fatal(err)
		}
		if g.Host == "b" {
			id = g.Streamlet
		}
	}
	release := make(chan struct{})
	defer close(release)
	queued := 0
	for b.clu().Go(func() { <-release }) { // the jobs end with the test
		queued++
	}
	if queued == 0 {
		t.Fatal("b's pool took no job")
	}
	h := a.clu().Hooks().HostOf("b")
	if h == nil {
		t.Fatal("no link from a to b")
	}
	if _, ok := h.Len(id); !ok {
		t.Fatalf("b did not answer LEN of its streamlet %d with its pool of calls full (%d jobs)", id, queued)
	}
}
