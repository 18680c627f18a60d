package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/engine"
)

const testTimeout = 60 * time.Second

// startEngine runs an in-process Sluice server on a free loopback port.
func startEngine(t *testing.T) *SluiceDriver {
	t.Helper()
	opts := engine.DefaultOptions()
	opts.Listen = "127.0.0.1:0"
	opts.Logger = slog.New(slog.DiscardHandler)
	srv, err := engine.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return &SluiceDriver{Addr: srv.Addr()}
}

// TestScenariosReportSaneCounts runs every scenario with a tiny workload
// against an in-process engine and checks the counts (no speed
// thresholds): everything published is accounted for and, with no slow
// consumer at these sizes, everything expected is delivered.
func TestScenariosReportSaneCounts(t *testing.T) {
	d := startEngine(t)
	self := &ProcStat{}
	cases := []struct {
		name string
		cfg  Config
		pub  int64 // expected Published
		exp  int64 // expected Expected (deliveries)
	}{
		{"pub", Config{Count: 3000, Size: 16}, 3000, 0},
		{"pub", Config{Count: 1000, Pubs: 3, Channels: 2}, 3000, 0},
		{"pubsub", Config{Count: 3000}, 3000, 3000},
		{"fanout", Config{Count: 1000, Subs: 3, Size: 1024}, 1000, 3000},
		{"nm", Config{Count: 500, Pubs: 2, Subs: 3, Channels: 5}, 1000, 1000},
		{"nm", Config{Count: 500, Pubs: 2, Subs: 4, Channels: 2}, 1000, 2000},
		{"ack-sync", Config{Count: 200}, 200, 0},
		{"ack-async", Config{Count: 3000, Window: 100}, 3000, 0},
		{"latency", Config{Rate: 5000, Duration: 200 * time.Millisecond}, 1000, 1000},
		{"latency", Config{Rate: 5000, Duration: 200 * time.Millisecond, Subs: 3}, 1000, 3000},
		{"replay", Config{Count: 12_000, Size: 16}, 12_000, 12_000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			tc.cfg.Server = self
			r, err := Run(ctx, d, tc.name, tc.cfg)
			if err != nil {
				t.Fatalf("%s: %v (%+v)", tc.name, err, r)
			}
			if r.System != "sluice" || r.Scenario != tc.name {
				t.Errorf("labels %q %q", r.System, r.Scenario)
			}
			if r.Published != tc.pub {
				t.Errorf("published %d, want %d", r.Published, tc.pub)
			}
			if r.Expected != tc.exp || r.Delivered != tc.exp {
				t.Errorf("expected/delivered %d/%d, want %d", r.Expected, r.Delivered, tc.exp)
			}
			if r.PubRate <= 0 || r.Elapsed <= 0 {
				t.Errorf("rate %v over %v", r.PubRate, r.Elapsed)
			}
			if tc.exp > 0 && r.DeliverRate <= 0 {
				t.Errorf("delivery rate %v", r.DeliverRate)
			}
			if r.CPUSource == "" || r.ServerRSS <= 0 {
				t.Errorf("server stats not filled: %q rss %d", r.CPUSource, r.ServerRSS)
			}
			if v, _, _ := r.Headline(); v <= 0 {
				t.Errorf("headline %v", v)
			}
			switch tc.name {
			case "latency", "ack-sync":
				l := r.Latency
				want := tc.exp // every delivery is measured
				if tc.name == "ack-sync" {
					want = tc.pub
				}
				if l == nil || int64(l.Count) != want || l.P50 <= 0 || l.P50 > l.P99 || l.P99 > l.P999 || l.P999 > l.Max {
					t.Errorf("latency summary %+v", l)
				}
			}
		})
	}
}

func TestIdleReportsMemoryPerConnection(t *testing.T) {
	d := startEngine(t)
	d.Dial = LoopbackDialer(4)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r, err := Run(ctx, d, "idle", Config{Conns: 50, Server: &ProcStat{}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Conns != 50 || r.ConnRate <= 0 || r.ServerRSS <= 0 {
		t.Fatalf("idle result %+v", r)
	}
}

func TestRunRejectsBadInput(t *testing.T) {
	d := &SluiceDriver{Addr: "127.0.0.1:1"}
	ctx := context.Background()
	if _, err := Run(ctx, d, "nope", Config{}); !errors.Is(err, ErrUnknownScenario) {
		t.Fatalf("unknown scenario: %v", err)
	}
	for _, c := range []Config{{Size: -1}, {Count: -1}, {Window: -2}, {Rate: -1}} {
		if _, err := Run(ctx, d, "pub", c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", c, err)
		}
	}
	if _, err := Run(ctx, d, "latency", Config{Size: 4}); !errors.Is(err, ErrConfig) {
		t.Errorf("latency with 4-byte payload: %v", err)
	}
}

// TestStalledDeliveryIsIncomplete: a subscriber that cannot get what it
// expects is reported as incomplete after the stall timeout, with what it
// did get, instead of hanging.
func TestStalledDeliveryIsIncomplete(t *testing.T) {
	k := newCounter(10, nil)
	for range 4 {
		k.handle(nil)
	}
	start := time.Now()
	_, ok := waitDeliveries(context.Background(), []*counter{k}, 10, 50*time.Millisecond)
	if ok || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("ok=%v after %v", ok, time.Since(start))
	}
	for range 6 {
		k.handle(nil)
	}
	at, ok := waitDeliveries(context.Background(), []*counter{k}, 10, time.Second)
	if !ok || at.Before(start) {
		t.Fatalf("complete run: ok=%v at=%v", ok, at)
	}
}

func TestOutputs(t *testing.T) {
	rs := []Result{
		{System: "sluice", Scenario: "pubsub", Config: Config{Size: 128, Pubs: 1, Subs: 1}, PubRate: 1e6, DeliverRate: 9e5, Expected: 10, Delivered: 9, Dropped: 1, CPUPerMsgNs: 250, Load1: [2]float64{0.5, 2}},
		{System: "nats", Scenario: "pubsub", Config: Config{Size: 128, Pubs: 1, Subs: 1}, PubRate: 2e6, DeliverRate: 1.8e6, Expected: 10, Delivered: 10},
		{System: "nats", Scenario: "pubsub", Config: Config{Size: 128, Pubs: 1, Subs: 1}, PubRate: 2e6, DeliverRate: 1.2e6, Expected: 10, Delivered: 10},
		{System: "nats", Scenario: "pubsub", Config: Config{Size: 128, Pubs: 1, Subs: 1}, PubRate: 2e6, DeliverRate: 2.4e6, Expected: 10, Delivered: 10, Err: "boom"},
		{System: "sluice", Scenario: "latency", Config: Config{Size: 128, Rate: 50000}, Latency: &LatencySummary{P50: 30_000, P99: 100_000, P999: 2_000_000, Max: 3_000_000_000}},
	}
	var tb bytes.Buffer
	if err := WriteTable(&tb, rs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pubsub 1:1 128B", "900.0k", "1.80M", "250ns", "lost", "of which gap", "0.50->2.00", "latency @50.0k/s 128B", "30us", "2ms", "3s", "note: pubsub 1:1 128B on nats: boom"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}
	var jb bytes.Buffer
	if err := WriteJSON(&jb, rs); err != nil {
		t.Fatal(err)
	}
	var back []Result
	if err := json.Unmarshal(jb.Bytes(), &back); err != nil || len(back) != len(rs) || back[4].Latency.P99 != 100_000 {
		t.Fatalf("json round trip: %v %+v", err, back)
	}
	c := Compare(rs[:1], rs[1:4])
	if c.ValueB != 1.8e6 || c.Ratio != 0.5 || !c.HigherBetter || c.System != [2]string{"sluice", "nats"} {
		t.Fatalf("comparison %+v", c)
	}
	var mb bytes.Buffer
	lat := Compare(rs[4:5], []Result{{System: "nats", Scenario: "latency", Config: rs[4].Config,
		Latency: &LatencySummary{P50: 20_000, P99: 50_000, P999: 1_000_000, Max: 2_000_000}}})
	if err := WriteMarkdown(&mb, []Comparison{c, lat, Compare(rs[:1], nil)}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(mb.String(), "| p99 | ") {
		t.Errorf("latency headline p99 repeated:\n%s", mb.String())
	}
	for _, want := range []string{"### pubsub 1:1 128B", "| msg/s delivered (median, higher is better) | 900.0k | 1.80M | 0.50 |",
		"| lost deliveries, all runs (of which GAP-announced) | 1 (1) | 0 (0) | |", "| load average (1 min), over the runs | 0.00..2.00 | | |", "### latency @50.0k/s 128B", "| p50 | 30us | 20us | 1.50 |", "| p99 (median, lower is better) | 100us | 50us | 2.00 |"} {
		if !strings.Contains(mb.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, mb.String())
		}
	}
	if _, err := json.Marshal(Compare(rs[:1], nil)); err != nil {
		t.Fatalf("comparison with an empty side does not encode: %v", err)
	}
	var cb bytes.Buffer
	if err := WriteComparison(&cb, []Comparison{c}); err != nil {
		t.Fatal(err)
	}
	if c.RangeB != [2]float64{1.2e6, 2.4e6} || c.RangeA != [2]float64{9e5, 9e5} {
		t.Fatalf("ranges %v %v", c.RangeA, c.RangeB)
	}
	if c.LostA != 1 || c.GapA != 1 || c.LostB != 0 || c.Load1 != [2]float64{0, 2} {
		t.Fatalf("comparison lost %d (gap %d) / %d, load %v", c.LostA, c.GapA, c.LostB, c.Load1)
	}
	if !strings.Contains(cb.String(), "0.50") || !strings.Contains(cb.String(), "ratio sluice/nats") || !strings.Contains(cb.String(), "1.20M..2.40M") ||
		!strings.Contains(cb.String(), "sluice lost") || !strings.Contains(cb.String(), "1 (gap 1)") || !strings.Contains(cb.String(), "0.00..2.00") {
		t.Fatalf("comparison table:\n%s", cb.String())
	}
}

func TestProgressLine(t *testing.T) {
	l := progressLine("deliver", 50, 100, 1.5e6, 2500*time.Millisecond)
	if len(l) > 79 || !strings.Contains(l, " 50%") || !strings.Contains(l, "1.50M/s") || !strings.Contains(l, "2.5s") {
		t.Fatalf("line %q", l)
	}
	if l := progressLine("x", 500, 100, 0, 0); !strings.Contains(l, "100%") || strings.Contains(l, ">") {
		t.Fatalf("overshoot line %q", l)
	}
	if l := progressLine("nats fanout 1:1000 128B deliver", 1, 2, 1e6, time.Hour); len(l) > 79 {
		t.Fatalf("long label: %d columns: %q", len(l), l)
	}
	var p *Progress
	p.SetLabel("x")
	p.add(1) // a nil Progress counts nothing
	p.reset("x", 1)
	if _, d, _ := p.Snapshot(); d != 0 {
		t.Fatal("nil progress counted")
	}
}

// syncBuffer is a bytes.Buffer safe for the drawing goroutine and the test.
type syncBuffer struct {
	ch chan string
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	select {
	case s.ch <- string(p):
	default:
	}
	return len(p), nil
}

func TestShowProgressDrawsAndErases(t *testing.T) {
	p := &Progress{}
	p.SetLabel("sluice pub")
	p.reset("publish", 10)
	p.add(5)
	w := &syncBuffer{ch: make(chan string, 1000)}
	stop := ShowProgress(w, p, 0, time.Millisecond)
	first := <-w.ch
	stop()
	close(w.ch)
	var all strings.Builder
	all.WriteString(first)
	for s := range w.ch {
		all.WriteString(s)
	}
	out := all.String()
	if !strings.Contains(out, "sluice pub publish") || !strings.Contains(out, " 50%") || !strings.HasSuffix(out, "\r") {
		t.Fatalf("progress output %q", out)
	}
	stop2 := ShowProgress(w, p, time.Hour, time.Millisecond) // never draws
	stop2()
}

func TestParseSpec(t *testing.T) {
	base := Config{Size: 64, Count: 7}
	name, c, err := ParseSpec("fanout/size=1024,subs=100,rate=5e4,duration=2s", base)
	if err != nil || name != "fanout" || c.Size != 1024 || c.Subs != 100 || c.Count != 7 || c.Rate != 5e4 || c.Duration != 2*time.Second {
		t.Fatalf("%q %+v %v", name, c, err)
	}
	for _, bad := range []string{"nope", "pub/size", "pub/size=x", "pub/colour=red"} {
		if _, _, err := ParseSpec(bad, base); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, s := range append(append([]string{}, QuickSuite...), FullSuite...) {
		name, c, err := ParseSpec(s, Config{})
		if err != nil {
			t.Fatalf("suite spec %q: %v", s, err)
		}
		sc, _ := Lookup(name)
		if _, err := sc.Normalize(c); err != nil {
			t.Fatalf("suite spec %q: %v", s, err)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	got, err := ParseCPUList("0,2-4")
	if err != nil || len(got) != 4 || got[0] != 0 || got[3] != 4 {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "0-99999"} {
		if _, err := ParseCPUList(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestIdleRefusesBeyondFileLimit(t *testing.T) {
	d := &SluiceDriver{Addr: "127.0.0.1:1"}
	lim := fileLimit()
	if lim == 0 || lim > 900_000 {
		t.Fatalf("file limit %d: cannot build a config above it", lim)
	}
	_, err := Run(context.Background(), d, "idle", Config{Conns: int(lim), Server: &ProcStat{}})
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("idle beyond the file limit: %v, want ErrConfig", err)
	}
}

// TestDurationCutsPublishingExactly: a run cut short by Duration expects
// exactly what was published, per channel and subscriber, and gets it.
func TestDurationCutsPublishingExactly(t *testing.T) {
	d := startEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r, err := Run(ctx, d, "nm", Config{Count: 50_000_000, Pubs: 2, Subs: 2, Channels: 3, Size: 16, Duration: 150 * time.Millisecond})
	if err != nil {
		t.Fatalf("%v (%+v)", err, r)
	}
	if r.Published == 0 || r.Published >= 100_000_000 {
		t.Fatalf("published %d", r.Published)
	}
	// 3 channels over 2 subscribers: channels 0 and 2 to subscriber 0,
	// channel 1 to subscriber 1; every message has exactly one subscriber.
	if r.Expected != r.Published || r.Delivered != r.Expected {
		t.Fatalf("published %d expected %d delivered %d", r.Published, r.Expected, r.Delivered)
	}
}

// TestReceivePathsAndRegimes: the SDK's three receive paths deliver every
// message, in both regimes; the live regime keeps every subscriber's
// backlog within its window (MaxBacklog, sampled by the flow monitor) and
// a latency run's warm-up is left out of its histogram.
func TestReceivePathsAndRegimes(t *testing.T) {
	base := startEngine(t)
	for _, recv := range []RecvMode{RecvFunc, RecvNext, RecvEvents} {
		for _, live := range []int{0, 64} {
			t.Run(fmt.Sprintf("%v/live=%d", recv, live), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				defer cancel()
				d := &SluiceDriver{Addr: base.Addr, NoAck: true, Recv: recv, SDKDefaults: true}
				r, err := Run(ctx, d, "fanout", Config{Count: 5000, Subs: 3, Size: 100, Live: live, OverMark: 1 << 30})
				if err != nil {
					t.Fatalf("%v (%+v)", err, r)
				}
				if r.Delivered != 15000 || r.Lost() != 0 || r.Overload != 0 {
					t.Fatalf("delivered %d lost %d overload %v", r.Delivered, r.Lost(), r.Overload)
				}
				// The window plus what a publisher sends between two
				// samples of the monitor (one step of live/8).
				if live > 0 && r.MaxBacklog > int64(live+live/8)*100 {
					t.Fatalf("live backlog %d bytes over the window of %d messages", r.MaxBacklog, live)
				}
			})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	d := &SluiceDriver{Addr: base.Addr, NoAck: true, Recv: RecvNext}
	r, err := Run(ctx, d, "latency", Config{Rate: 5000, Duration: 400 * time.Millisecond, Warmup: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// 2000 due over 400 ms; those due in the first 200 ms are not recorded.
	if r.Delivered != 2000 || r.Latency == nil || r.Latency.Count < 900 || r.Latency.Count > 1100 {
		t.Fatalf("delivered %d, recorded %+v", r.Delivered, r.Latency)
	}
}
