package engine

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client"
	"github.com/sluice-rtm/sluice/wire"
)

// TestSDKResumeAcrossIncarnation: a Go SDK subscriber that is away while
// its single node restarts, and while the new incarnation's first
// messages expire, resumes with the epoch change, then exactly the new
// incarnation's positions 1..3 as lost, then its messages from 4
// (behaviour 15: every incarnation numbers from 1).
func TestSDKResumeAcrossIncarnation(t *testing.T) {
	const ch = "incarnation"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	limits := func(o *Options) { o.LimitMsgs, o.LimitLife, o.TTL = 3, time.Minute, 100*time.Millisecond }
	a := startTest(t, limits)
	// The subscriber's every dial goes to target, or fails while it is
	// empty (whatever address the SDK picks, seeds or WELCOME's nodes).
	var target atomic.Value
	target.Store(a.Addr())
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		addr := target.Load().(string)
		if addr == "" {
			return nil, errors.New("held off by the test")
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	sc, err := client.Dial(ctx, a.Addr(), client.WithDialer(dial), client.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	sub, err := sc.Subscribe(ctx, ch, client.FromEarliest())
	if err != nil {
		t.Fatal(err)
	}
	publishAll(ctx, t, a.Addr(), ch, "m1", "m2")
	for p := uint64(1); p <= 2; p++ {
		if ev, err := sub.Next(ctx); err != nil || ev.Kind != client.KindMessage || ev.Position != p {
			t.Fatalf("event %+v %v, want message %d", ev, err, p)
		}
	}
	oldEpoch := sub.Info().Epoch

	target.Store("")
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	b := startTest(t, limits)
	watch, err := client.Dial(ctx, b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	if _, err := watch.Subscribe(ctx, ch, client.FromLive()); err != nil { // a reader: the channel is not dropped
		t.Fatal(err)
	}
	if ps := publishAll(ctx, t, b.Addr(), ch, "n1", "n2", "n3", "n4"); ps[0] != 1 || ps[3] != 4 {
		t.Fatalf("the new incarnation's positions %v, want 1..4", ps)
	}
	eventually(t, waitFor, "positions 1..3 of the new incarnation expire", func() bool {
		info, _ := stateInfo(b, ch)
		return info.Earliest == 4
	})
	target.Store(b.Addr())

	ev, err := sub.Next(ctx)
	info, _ := stateInfo(b, ch)
	if err != nil || ev.Kind != client.KindEpochChanged || ev.Position != 1 || ev.Epoch != info.Epoch || ev.Epoch == oldEpoch {
		t.Fatalf("event %+v %v, want the epoch change to %d (was %d) from 1", ev, err, info.Epoch, oldEpoch)
	}
	if ev, err := sub.Next(ctx); err != nil || ev.Kind != client.KindGap || ev.Gap != (client.GapInfo{From: 1, To: 3, Reason: wire.GapLost}) {
		t.Fatalf("event %+v %v, want gap 1-3 lost", ev, err)
	}
	if ev, err := sub.Next(ctx); err != nil || ev.Kind != client.KindMessage || ev.Position != 4 || string(ev.Payload) != "n4" {
		t.Fatalf("event %+v %v, want message 4 n4", ev, err)
	}
	if got := sub.Info(); got.Epoch != info.Epoch || got.First != 4 {
		t.Fatalf("Info %+v after the resume", got)
	}
}

// publishAll publishes payloads to ch at addr, acknowledged, in order,
// and returns their positions.
func publishAll(ctx context.Context, t *testing.T, addr, ch string, payloads ...string) []uint64 {
	t.Helper()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ps []uint64
	for _, p := range payloads {
		pos, err := c.Publish(ctx, ch, []byte(p))
		if err != nil {
			t.Fatalf("publish %q: %v", p, err)
		}
		ps = append(ps, pos)
	}
	return ps
}
