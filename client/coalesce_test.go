package client

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// countingConn counts Write calls.
type countingConn struct {
	net.Conn
	writes atomic.Int32
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestPublishesCoalesceIntoOneWrite: publishes queued while the writer is
// busy go out together in one Write call. Over net.Pipe, a Write blocks until
// the server reads it, and the server reads only after all publishes were
// queued; so besides HELLO there are at most two writes.
func TestPublishesCoalesceIntoOneWrite(t *testing.T) {
	cli, srv := net.Pipe()
	cc := &countingConn{Conn: cli}
	t.Cleanup(func() { _ = srv.Close() })
	fc := &fakeConn{t: t, nc: srv, rd: wire.NewReader(srv, wire.MaxBodyFor(1<<20))}
	go func() {
		h, _, err := fc.rd.Next()
		if err != nil {
			return
		}
		_, _ = srv.Write(wire.AppendWelcome(nil, h.ID, testWelcome()))
	}()
	c, err := Dial(ctxT(t), "pipe", WithDialer(func(context.Context, string) (net.Conn, error) { return cc, nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	const n = 100
	for range n {
		if err := c.PublishFunc(ctxT(t), "ch", []byte("m"), func(uint64, error) {}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		fc.expectPublish()
	}
	if w := cc.writes.Load(); w > 3 {
		t.Fatalf("%d writes for HELLO and %d publishes, want at most 3", w, n)
	}
}
