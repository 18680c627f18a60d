//go:build !race

package client

import (
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// Allocation counts are only meaningful without the race detector, which
// allocates on its own; hence the build constraint.

// TestPublishZeroAllocs: the publish paths do not allocate per message in
// steady state (PublishAsync with Release, PublishFunc, PublishNoAck).
func TestPublishZeroAllocs(t *testing.T) {
	c, fc := connect(t, newFakeServer(t), testWelcome(), WithMaxPending(4096))
	stop := make(chan struct{})
	defer close(stop)
	go func() { // acknowledge everything with FlagAck
		var acks []wire.Ack
		var pos uint64
		for {
			_ = fc.nc.SetReadDeadline(time.Now().Add(testTimeout))
			h, _, err := fc.rd.Next()
			if err != nil {
				return
			}
			if h.Type == wire.TypePublish && h.Flags&wire.FlagAck != 0 {
				pos++
				acks = append(acks, wire.Ack{ID: h.ID, Position: pos})
			}
			if fc.rd.Buffered() == 0 && len(acks) > 0 {
				if _, err := fc.nc.Write(wire.AppendPubAck(nil, acks)); err != nil {
					return
				}
				acks = acks[:0]
			}
		}
	}()
	ctx := ctxT(t)
	payload := []byte("0123456789abcdef")
	done := func(uint64, error) {}
	// Fill the PubAck pool with more than the measured publishes can
	// hold at once: a synchronous Publish returns after every earlier
	// PUBACK was read (the fake answers in order).
	for range 4000 {
		a, err := c.PublishAsync(ctx, "ch", payload)
		if err != nil {
			t.Fatal(err)
		}
		a.Release()
	}
	if _, err := c.Publish(ctx, "ch", payload); err != nil {
		t.Fatal(err)
	}
	for name, fn := range map[string]func(){
		"PublishAsync": func() {
			a, err := c.PublishAsync(ctx, "ch", payload)
			if err != nil {
				t.Fatal(err)
			}
			a.Release() // recycled when its PUBACK arrives
		},
		"PublishFunc": func() {
			if err := c.PublishFunc(ctx, "ch", payload, done); err != nil {
				t.Fatal(err)
			}
		},
		"PublishNoAck": func() {
			if err := c.PublishNoAck(ctx, "ch", payload); err != nil {
				t.Fatal(err)
			}
		},
	} {
		// Averaged: a sync.Pool may be emptied by a GC.
		if got := testing.AllocsPerRun(2000, fn); got > 0.05 {
			t.Errorf("%s: %.3f allocs per publish", name, got)
		}
	}
}
