package cluster

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/bench"
)

// TestCompare_Tiny runs a tiny Compare: every setup is measured and
// delivers every message (cross-node too: engine versions before 4fb6d35
// deadlocked there, see bench-cluster.md), cluster runs report where the
// channel lived, and the report has its tables. It checks what was
// delivered, not how fast, so its timing is one a loaded machine keeps
// (under the race detector at load average 23, eight instances at once,
// 18 of 24 runs failed with the benchmark's timing): a run may see no
// delivery for 45 s, not 3 s (runs ended at 0 or 4096 of 5000 delivered),
// node links close after 10 s of silence, not 4 s (OUTCOME_UNKNOWN
// "nothing received for 4s"; a stalled copy is still noticed after 10 s,
// well inside the 45), and the whole run may take 5 minutes, not 1 (9 of
// the 18; passes took up to 96 s).
func TestCompare_Tiny(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Compare(ctx, CompareConfig{Runs: 1, Count: 5000, Rate: 2000, Duration: 500 * time.Millisecond, PlainLinks: true,
		Stall: 45 * time.Second, RPCTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(Setups) + 1; len(rep.Throughput) != n || len(rep.Latency) != n {
		t.Fatalf("%d throughput and %d latency runs, want %d each (with the plain-links cluster)", len(rep.Throughput), len(rep.Latency), n)
	}
	for _, r := range append(append([]Run{}, rep.Throughput...), rep.Latency...) {
		res := r.Result
		complete := res.Expected > 0 && res.Delivered == res.Expected
		t.Logf("%s %s: %d/%d delivered, place %v, err %q", r.Setup, res.Scenario, res.Delivered, res.Expected, r.Place, r.Err)
		if !complete || r.Err != "" {
			t.Errorf("%s %s: %d of %d delivered, error %q", r.Setup, res.Scenario, res.Delivered, res.Expected, r.Err)
		}
		if (r.Setup == SetupSingle || r.Setup == SetupCrossPlain) != (r.Place == nil) {
			t.Errorf("%s %s: placement %v", r.Setup, res.Scenario, r.Place)
		}
		if r.Place != nil {
			var held int64
			for _, n := range r.Place.Msgs {
				held += n
			}
			if held < res.Published {
				t.Errorf("%s %s: hosts hold %d messages, %d were published", r.Setup, res.Scenario, held, res.Published)
			}
		}
	}
	var out bytes.Buffer
	WriteCompare(&out, rep)
	for _, want := range []string{"single", "cluster-same", "cluster-cross", "throughput ratio"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestSpread_Tiny runs a short Spread: every hot and cold message is
// acknowledged and delivered, and the hot channel's streamlets rotated over
// at least two nodes (never its manager).
func TestSpread_Tiny(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := Spread(ctx, SpreadConfig{HotRate: 4000, Duration: 2 * time.Second, Cold: 20, ColdRate: 2,
		LimitLife: 300 * time.Millisecond, LimitMsgs: 500})
	if err != nil {
		t.Fatal(err)
	}
	if rep.HotPublished != rep.HotScheduled || rep.HotDelivered != rep.HotPublished || rep.ColdDelivered != rep.ColdScheduled {
		t.Fatalf("hot %d/%d/%d cold %d/%d/%d (scheduled/acked/delivered)", rep.HotScheduled, rep.HotPublished,
			rep.HotDelivered, rep.ColdScheduled, rep.ColdPublished, rep.ColdDelivered)
	}
	if rep.HotHosts() < 2 {
		t.Fatalf("hot channel hosted on %d node(s): %+v", rep.HotHosts(), rep.Nodes)
	}
	var hot int64
	managed := 0
	for _, n := range rep.Nodes {
		hot += n.HotMsgs
		managed += n.Managed
		if n.Name == rep.HotManager && n.HotStreamlets > 0 {
			t.Errorf("manager %s hosts %d hot streamlets", n.Name, n.HotStreamlets)
		}
	}
	if hot != rep.HotPublished {
		t.Errorf("hot streamlets hold %d messages, %d were published", hot, rep.HotPublished)
	}
	if managed != rep.Config.Cold+1 {
		t.Errorf("%d channels managed in all, want %d", managed, rep.Config.Cold+1)
	}
	if rep.Samples == 0 {
		t.Error("no load samples")
	}
	var out bytes.Buffer
	WriteSpread(&out, rep)
	if !strings.Contains(out.String(), "max/mean") {
		t.Errorf("report lacks the imbalance row:\n%s", out.String())
	}
}

// TestSplit_Alternates checks that successive connections go to
// successive drivers.
func TestSplit_Alternates(t *testing.T) {
	var got []string
	mk := func(name string) bench.Driver { return recDriver{name, &got} }
	s := &Split{Drivers: []bench.Driver{mk("b"), mk("a")}}
	for i := 0; i < 3; i++ {
		_, _ = s.Connect(context.Background())
	}
	s.Reset()
	_, _ = s.Connect(context.Background())
	if strings.Join(got, "") != "bab"+"b" {
		t.Fatalf("connections went to %v, want b a b, then b after Reset", got)
	}
}

// recDriver records which driver Connect was called on.
type recDriver struct {
	name string
	log  *[]string
}

func (d recDriver) Name() string { return d.name }

func (d recDriver) Connect(context.Context) (bench.Client, error) {
	*d.log = append(*d.log, d.name)
	return nil, nil
}
