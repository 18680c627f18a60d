package engine

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-rtm/sluice/wire"
)

// leakOptions ignore the goroutines that are not the server's: those the
// test binary starts, and gnet's worker pool (ants' default pool, a
// package-level singleton that lives as long as the process).
func leakOptions(extra ...goleak.Option) []goleak.Option {
	return append([]goleak.Option{
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*goWorker).run.func1"),
	}, extra...)
}

// TestMain fails the package when any goroutine outlives the tests (every
// test's servers are shut down by their cleanups).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakOptions()...)
}

// TestShutdown_NoGoroutineOutlivesTheServers: after Shutdown of a single
// node and of a three-node cluster that published, replicated reads
// across nodes and answered node requests, no goroutine the servers
// started is left (event loops, ticker, cluster pool and workers,
// membership, links).
func TestShutdown_NoGoroutineOutlivesTheServers(t *testing.T) {
	before := goleak.IgnoreCurrent()
	shutdown := func(s *Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}
	single := startTest(t, nil)
	c, _ := helloRaw(t, single.Addr())
	if _, err := c.publishBatch("leak", [][]byte{[]byte("x")}); err != nil {
		t.Fatal(err)
	}
	c.nc.Close()
	shutdown(single)

	nodes := startCluster3(t, nil)
	pub, _ := helloRaw(t, nodes[0].Addr())
	sub, _ := helloRaw(t, nodes[2].Addr())
	sub.subscribe(1, "leak.cluster", wire.StartLive, 0)
	pos, err := pub.publishBatch("leak.cluster", [][]byte{payloadOf(1), payloadOf(2)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.eventsUntil(1, pos[1]); err != nil {
		t.Fatal(err)
	}
	pub.nc.Close()
	sub.nc.Close()
	for _, s := range nodes {
		shutdown(s)
	}
	goleak.VerifyNone(t, leakOptions(before)...)
}
