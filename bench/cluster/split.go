package cluster

import (
	"context"
	"sync/atomic"

	"github.com/sluice-rtm/sluice/bench"
)

// Split is a bench.Driver that sends successive connections to successive
// drivers, round robin. bench's 1:1 scenarios connect the subscriber, then
// the publisher (pubsub), or both at once (latency): with two drivers for
// two nodes, the publisher and the subscriber always end on different
// nodes. Its fields must not change during a run; Connect is safe for
// concurrent use.
type Split struct {
	Drivers []bench.Driver
	next    atomic.Uint64
}

// Name returns the first driver's name.
func (s *Split) Name() string { return s.Drivers[0].Name() }

// Connect opens the next connection on the next driver.
func (s *Split) Connect(ctx context.Context) (bench.Client, error) {
	i := (s.next.Add(1) - 1) % uint64(len(s.Drivers))
	return s.Drivers[i].Connect(ctx)
}

// Reset makes the next Connect use Drivers[0] again. Not safe during a
// run.
func (s *Split) Reset() { s.next.Store(0) }
