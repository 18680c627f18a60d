package manager

import (
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
)

// sealTakes is a host whose Seal takes the time take adds to the test's
// clock, as a round trip to a slow or loaded peer does.
type sealTakes struct {
	*host.Host
	take func()
}

func (h sealTakes) Seal(id, succ uint64, succHost string) (uint64, error) {
	h.take()
	return h.Host.Seal(id, succ, succHost)
}

// TestWriteGrant_LeaseStartsAfterThePredecessorIsSealed: opening the next
// streamlet seals the one that refused the writer and records the
// successor on its replicas, two round trips to its host; the new grant's
// write lease starts after them. When it started before, a lease shorter
// than those round trips (250 ms leases on a loaded machine, where they
// took 300 ms) had ended before the grant reached the writer, the append
// was refused, and so was every grant after it:
// TestCluster_OneLoopPerNodeNeverStalls failed UNAVAILABLE after 8 grants.
func TestWriteGrant_LeaseStartsAfterThePredecessorIsSealed(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	const life = 250 * time.Millisecond
	h := host.New("h", clock)
	cfg := testConfig(h, clock)
	cfg.Host = sealTakes{Host: h, take: func() { mu.Lock(); now = now.Add(2 * life); mu.Unlock() }}
	limits := role.Limits{Msgs: 20, Size: 1 << 20, Life: life, TTL: time.Minute}
	cfg.Limits = func(string) role.Limits { return limits }
	m := New(cfg)
	m.SetCluster(oneHost{h: h})
	g, err := m.WriteGrant("ch", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		// The writer's streamlet refused a write: it asks after it.
		if g, err = m.WriteGrant("ch", g.Streamlet); err != nil {
			t.Fatal(err)
		}
		at := clock().UnixNano()
		if left := time.Duration(g.LeaseEnd - at); left < life {
			t.Fatalf("grant %d of streamlet %d arrived with %v of its %v lease left", i+2, g.Streamlet, left, life)
		}
		if _, err := h.Streamlet(g.Streamlet).Append([]byte("m"), at); err != nil {
			t.Fatalf("grant %d: the host refused the first write: %v", i+2, err)
		}
	}
}
