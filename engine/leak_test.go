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
// node (with TLS, WebSocket and metrics listeners) and of a three-node
// cluster that published, replicated reads across nodes and answered node
// requests, no goroutine the servers started is left. Checked twice: the
// server's and its cluster layer's own goroutines (ticker, gnet runner,
// listeners and bridges, write watch, metrics, the cluster's pool,
// workers, heartbeat, failure handlers) by a hand count taken the instant
// Shutdown returns, with no grace period (internal/owned: an owner that
// does not wait for one fails it even when the goroutine would end a
// moment later); then every goroutine, the libraries' included (gnet's
// loops, memberlist), with goleak, whose retries allow such a moment.
// (startTest's cleanup applies the hand count to every test's servers.)
func TestShutdown_NoGoroutineOutlivesTheServers(t *testing.T) {
	before := goleak.IgnoreCurrent()
	shutdown := func(s *Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		if n := s.ownedRunning(); n != 0 {
			t.Fatalf("%s: %d of the server's own goroutines still run when Shutdown returned", s.opts.ServerName, n)
		}
	}
	set := newCerts(t)
	single := startTLSTest(t, set, func(o *Options) {
		o.WSListen = "127.0.0.1:0"
		o.MetricsListen = "127.0.0.1:0"
	})
	c, _ := helloRaw(t, single.Addr())
	if _, err := c.publishBatch("leak", [][]byte{[]byte("x")}); err != nil {
		t.Fatal(err)
	}
	tc, err := dialTLS(t, single.TLSAddr(), set.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	tc.write(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "leak"}))
	if h, body := tc.next(); h.Type != wire.TypeWelcome {
		t.Fatalf("TLS HELLO: %s", describe(h, body))
	}
	c.nc.Close()
	shutdown(single) // the TLS client is still connected: its bridge ends with the server

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
	// A control-plane call in progress when the node shuts down (the 200
	// ms stand for a request waiting for the network): Shutdown waits for
	// it. Had the cluster not waited for its pool, the call would end
	// inside goleak's retries, and only the hand count would catch it.
	if !nodes[0].clu().Go(func() { time.Sleep(200 * time.Millisecond) }) {
		t.Fatal("the cluster's pool refused a call")
	}
	for _, s := range nodes {
		shutdown(s)
	}
	goleak.VerifyNone(t, leakOptions(before)...)
}
