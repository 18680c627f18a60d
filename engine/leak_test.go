package engine

import (
	"context"
	"fmt"
	"os"
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
// test's servers are shut down by their cleanups). The check waits up to
// leakWait for goroutines that are still ending: memberlist's probe of a
// node that stopped answering (killed, or shut down first) runs on to its
// timeout after Shutdown, since nothing cancels it (probeNode waiting for
// its ack, a probe interval of 500 ms). goleak's own retries, about half a
// second, did not cover it in one of four test processes run at once
// (load average 8); a goroutine that never ends still fails the package.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := findLeaks(leakWait, leakOptions()...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakWait bounds how long TestMain waits for goroutines to end.
const leakWait = 5 * time.Second

// findLeaks is goleak.Find, asked again every 50 ms until it finds
// nothing or d has passed; it returns what the last try found.
func findLeaks(d time.Duration, opts ...goleak.Option) error {
	deadline := time.Now().Add(d)
	tk := time.NewTicker(50 * time.Millisecond)
	defer tk.Stop()
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		<-tk.C
	}
}

// TestFindLeaks: a goroutine that ends within the wait is not a leak; one
// that outlives it is.
func TestFindLeaks(t *testing.T) {
	opts := leakOptions(goleak.IgnoreCurrent())
	stop := make(chan struct{})
	go func() { <-stop }()
	if err := findLeaks(100*time.Millisecond, opts...); err == nil {
		t.Fatal("a goroutine blocked for good was not found")
	}
	go func() {
		<-time.After(time.Second) // ends on its own within the wait
		close(stop)
	}()
	if err := findLeaks(leakWait, opts...); err != nil {
		t.Fatalf("goroutines that ended within the wait: %v", err)
	}
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
