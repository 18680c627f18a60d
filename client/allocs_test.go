//go:build !race

package client

import (
	"runtime"
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

// TestSubscribeFuncZeroAllocs: a SubscribeFunc callback receives messages
// without an allocation per frame (Subscribe copies each frame once).
func TestSubscribeFuncZeroAllocs(t *testing.T) {
	c, fc := connect(t, newFakeServer(t), testWelcome())
	got := make(chan struct{}, 1)
	var n int
	const frames = 2000
	wait := make(chan *Subscription, 1)
	go func() {
		s, err := c.SubscribeFunc(ctxT(t), "ch", func(ev Event) {
			if n++; n%frames == 0 {
				got <- struct{}{}
			}
		})
		if err != nil {
			t.Error(err)
		}
		wait <- s
	}()
	id, s := fc.expectSubscribe()
	fc.write(wire.AppendSubscribed(nil, id, wire.Subscribed{SubID: s.SubID, First: 1, Earliest: 1, Next: 1, Epoch: 7}))
	<-wait
	var frame []byte
	for i := range frames {
		frame = wire.AppendData(frame, s.SubID, uint64(i+1), []byte("0123456789abcdef"))
	}
	fc.write(frame) // warm up
	<-got
	frame = frame[:0]
	for i := range frames {
		frame = wire.AppendData(frame, s.SubID, uint64(frames+i+1), []byte("0123456789abcdef"))
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	fc.write(frame)
	<-got
	runtime.ReadMemStats(&m1)
	// Global counts (the fake and the test allocate a little too).
	if per := float64(m1.Mallocs-m0.Mallocs) / frames; per > 0.25 {
		t.Errorf("%.2f allocations per DATA frame", per)
	}
}
