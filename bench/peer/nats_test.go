package peer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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

// TestJetStreamStreamNodeReadsTheStream: JetStreamStreamNode's live
// subscriptions start at the stream's next message and see only what the
// stream stored, in order: a publish the stream refuses (over its
// MaxMsgSize) is never delivered to them, while JetStreamNode's core
// subscription gets it.
func TestJetStreamStreamNodeReadsTheStream(t *testing.T) {
	e := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, err := nats.Connect(e.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LIVE", Subjects: []string{"live.>"},
		Storage: jetstream.MemoryStorage, MaxMsgSize: 64}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 { // stored before the subscription: not delivered
		if _, err := js.Publish(ctx, "live.a", []byte{byte(100 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var fromStream, fromCore []byte
	all := make(chan struct{}) // closed once both have what they should
	var once sync.Once
	subscribe := func(d *NATSDriver, got *[]byte) bench.Client {
		c, err := d.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Subscribe(ctx, "live.a", bench.StartLive, func(p []byte) {
			mu.Lock()
			defer mu.Unlock()
			*got = append(*got, p[0])
			if len(fromStream) >= 11 && len(fromCore) >= 12 {
				once.Do(func() { close(all) })
			}
		}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	subscribe(JetStreamStreamNode(e.URL(), "LIVE"), &fromStream)
	pub := subscribe(JetStreamNode(e.URL()), &fromCore)
	big := make([]byte, 100) // over MaxMsgSize: refused by the stream
	big[0] = 99
	if err := pub.PublishAcked(ctx, "live.a", big); err == nil {
		t.Fatal("the stream stored a message over its MaxMsgSize")
	}
	for i := range 11 {
		if err := pub.PublishAcked(ctx, "live.a", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("stream subscriber got %v, core subscriber %v", fromStream, fromCore)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(fromStream, want) {
		t.Fatalf("stream subscriber got %v, want %v", fromStream, want)
	}
	if fromCore[0] != 99 {
		t.Fatalf("core subscriber's first message %d, want the refused one (99)", fromCore[0])
	}
}
