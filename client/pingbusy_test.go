package client

import (
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// TestPingBehindABacklogIsNotATimeout: a publisher that writes faster than
// the server reads queues its PINGs behind megabytes of publishes, so the
// PONGs come late although the server is alive and reading. The fake
// server reads about 8 MB/s and answers every PING when it reaches it;
// the client publishes 24 MiB as fast as it can with a ping interval of
// 100 ms, so each PING waits a few hundred ms behind the client's queue
// and both socket buffers. Before, two unanswered intervals (200 ms)
// failed the connection (ErrPingTimeout) in the middle of the stream; now
// an interval in which the server acknowledged at least busyProgress bytes
// does not count, and the session survives to an acknowledged publish.
func TestPingBehindABacklogIsNotATimeout(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the server's progress is read from TCP_INFO, Linux only")
	}
	f := newFakeServer(t)
	w := testWelcome()
	w.PingInterval = 200 * time.Millisecond
	c, fc := connect(t, f, w, WithReconnect(false))
	if tc, ok := fc.nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(256 << 10) // a fixed receive buffer: the backlog does not depend on autotuning
	}
	served := make(chan error, 1)
	go func() {
		// Read about 64 KiB per 8 ms tick, answering PINGs and the
		// acknowledged publish as they come.
		tick := time.NewTicker(8 * time.Millisecond)
		defer tick.Stop()
		budget := 0
		for {
			if budget <= 0 {
				<-tick.C
				budget = 64 << 10
			}
			h, body, err := fc.rd.Next()
			if err != nil {
				served <- err
				return
			}
			budget -= wire.HeaderLen + len(body)
			var out []byte
			switch h.Type {
			case wire.TypePing:
				out = wire.AppendPong(nil, h.ID)
			case wire.TypePublish:
				if h.Flags&wire.FlagAck != 0 {
					out = wire.AppendPubAck(nil, []wire.Ack{{ID: h.ID, Position: 1}})
				}
			}
			if out != nil {
				if _, err := fc.nc.Write(out); err != nil {
					served <- err
					return
				}
			}
		}
	}()
	payload := make([]byte, 1024)
	ctx := ctxT(t)
	for i := 0; i < 24<<10; i++ {
		if err := c.PublishNoAck(ctx, "ch", payload); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	done := make(chan error, 1)
	go func() { _, err := c.Publish(ctx, "ch", []byte("last")); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("acknowledged publish after the backlog: %v", err)
		}
	case err := <-served:
		t.Fatalf("the fake server stopped reading: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no acknowledgement")
	}
	if err := c.Close(); err != nil && !errors.Is(err, ErrClosed) {
		t.Logf("close: %v", err)
	}
	_ = fc.nc.Close()
	<-served // the fake's goroutine has returned
}

// TestAnsweredPingsReadNoTCPInfo: a connection whose PONGs come within
// the ping interval never reads TCP_INFO (the measure is needed only to
// judge an unanswered PING; with 10,000 connections in one process every
// tick's getsockopt was a system call 2,000 times a second).
func TestAnsweredPingsReadNoTCPInfo(t *testing.T) {
	f := newFakeServer(t)
	w := testWelcome()
	w.PingInterval = 100 * time.Millisecond
	c, fc := connect(t, f, w, WithReconnect(false))
	s := c.cur.Load()
	const pings = 6
	for n := 0; n < pings; {
		h, _ := fc.read()
		if h.Type != wire.TypePing {
			t.Fatalf("unexpected %v", h.Type)
		}
		n++
		fc.write(wire.AppendPong(nil, h.ID))
	}
	c.Close()
	<-s.writerDone
	// A PONG delayed past a tick (a loaded machine) costs one measure.
	if s.tcpInfoReads > pings/3 {
		t.Fatalf("%d TCP_INFO reads over %d answered PINGs, want about none", s.tcpInfoReads, pings)
	}
}
