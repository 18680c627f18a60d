package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client"
	"github.com/sluice-rtm/sluice/wire"
)

// A client whose gateway dies reconnects to a node it learned from
// WELCOME and resumes its subscription where it was.
func TestCluster_SDKReconnectsToAnotherNodeAndResumes(t *testing.T) {
	nodes := startCluster3(t, nil)
	a, b := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eventually(t, waitFor, "b advertises 3 nodes", func() bool { return len(b.welcomeNow().Nodes) == 3 })
	sc, err := client.Dial(ctx, b.Addr(), client.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if got := len(sc.Addrs()); got != 3 {
		t.Fatalf("client knows %d addresses %v, want 3", got, sc.Addrs())
	}
	ch := channelManagedBy(t, a, "a", "sdkfailover")
	sub, err := sc.Subscribe(ctx, ch, client.FromLive())
	if err != nil {
		t.Fatal(err)
	}
	pc, err := client.Dial(ctx, a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	acked := map[uint64]string{}
	var last uint64
	for i := 0; i < 400; i++ {
		if i == 150 {
			kill(b)
		}
		p, err := pc.Publish(ctx, ch, payloadOf(i))
		if err != nil {
			var we wire.Error
			if errors.As(err, &we) && we.Code == wire.CodeUnavailable {
				continue
			}
			t.Fatalf("publish %d: %v", i, err)
		}
		acked[p] = string(payloadOf(i))
		last = p
	}
	got := map[uint64]string{}
	var gaps []client.GapInfo
	var prev uint64
	for prev < last {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d messages: %v", len(got), err)
		}
		switch ev.Kind {
		case client.KindMessage:
			if ev.Position <= prev {
				t.Fatalf("position %d after %d: duplicate or out of order", ev.Position, prev)
			}
			got[ev.Position] = string(ev.Payload)
			prev = ev.Position
		case client.KindGap:
			if ev.Gap.Reason != wire.GapLost {
				t.Fatalf("unexpected gap %+v", ev.Gap)
			}
			gaps = append(gaps, ev.Gap)
			prev = ev.Gap.To
		case client.KindEpochChanged:
			t.Fatalf("epoch changed: %+v", ev)
		}
	}
	for p, pl := range acked {
		if got[p] == pl {
			continue
		}
		in := false
		for _, g := range gaps {
			in = in || (p >= g.From && p <= g.To)
		}
		if !in {
			t.Fatalf("acked position %d neither delivered nor in a lost gap (%d delivered, gaps %v)", p, len(got), gaps)
		}
	}
	t.Logf("%d of %d acked messages delivered after the gateway died; gaps %v", len(got), len(acked), gaps)
}
