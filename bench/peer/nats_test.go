package peer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/bench"
)

func startNATS(t *testing.T) *Embedded {
	t.Helper()
	e, err := StartEmbedded("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// TestCoreScenarios runs the core scenarios with tiny workloads against an
// embedded nats-server and checks the counts (no speed thresholds).
func TestCoreScenarios(t *testing.T) {
	e := startNATS(t)
	d := &NATSDriver{URL: e.URL()}
	for _, tc := range []struct {
		name     string
		cfg      bench.Config
		pub, exp int64
	}{
		{"pub", bench.Config{Count: 5000, Size: 16}, 5000, 0},
		{"pubsub", bench.Config{Count: 3000}, 3000, 3000},
		{"fanout", bench.Config{Count: 1000, Subs: 3}, 1000, 3000},
		{"nm", bench.Config{Count: 500, Pubs: 2, Subs: 3, Channels: 5}, 1000, 1000},
		{"latency", bench.Config{Rate: 5000, Duration: 200 * time.Millisecond}, 1000, 1000},
		{"idle", bench.Config{Conns: 30}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := bench.Run(ctx, d, tc.name, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.System != "nats" || r.Published != tc.pub || r.Expected != tc.exp || r.Delivered != tc.exp {
				t.Fatalf("%s: system %s published %d expected %d delivered %d", tc.name, r.System, r.Published, r.Expected, r.Delivered)
			}
		})
	}
}

// TestCoreRefusesDurableScenarios: NATS core has no acknowledged publish or
// history; the driver says so instead of faking it.
func TestCoreRefusesDurableScenarios(t *testing.T) {
	e := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{"ack-sync", "ack-async", "replay"} {
		if _, err := bench.Run(ctx, &NATSDriver{URL: e.URL()}, name, bench.Config{Count: 10}); !errors.Is(err, bench.ErrUnsupported) {
			t.Errorf("%s on core: %v, want ErrUnsupported", name, err)
		}
	}
}

// TestJetStreamScenarios runs acked publish and replay on the memory
// stream, and checks that closing the driver deletes the stream.
func TestJetStreamScenarios(t *testing.T) {
	e := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := NewJetStreamDriver(ctx, e.URL())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		cfg      bench.Config
		pub, exp int64
	}{
		{"ack-sync", bench.Config{Count: 200}, 200, 0},
		{"ack-async", bench.Config{Count: 3000, Window: 256}, 3000, 0},
		{"replay", bench.Config{Count: 5000, Size: 16}, 5000, 5000},
	} {
		r, err := bench.Run(ctx, d, tc.name, tc.cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if r.System != "nats-js" || r.Published != tc.pub || r.Delivered != tc.exp {
			t.Fatalf("%s: %+v", tc.name, r)
		}
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	d2, err := NewJetStreamDriver(ctx, e.URL()) // recreating works and starts empty
	if err != nil {
		t.Fatal(err)
	}
	info, err := d2.js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if si, err := info.Info(ctx); err != nil || si.State.Msgs != 0 {
		t.Fatalf("recreated stream: %v, %+v", err, si)
	}
	if err := d2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
