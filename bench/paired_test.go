package bench

import (
	"math"
	"testing"
	"time"
)

// TestComparePaired: the ratio is the median of the pairs' ratios, not
// the ratio of the medians; its range, each side's median and range, the
// losses, the shortest overload and the load range are summed or taken
// over the runs, and a run that measured nothing makes no pair.
func TestComparePaired(t *testing.T) {
	run := func(sys string, rate float64, load float64, lost, dropped int64, over time.Duration) Result {
		return Result{System: sys, Scenario: "pubsub", Config: Config{Pubs: 1, Subs: 1, Size: 128},
			DeliverRate: rate, Expected: 100, Delivered: 100 - lost, Dropped: dropped,
			Load1: [2]float64{load, load + 1}, Overload: over}
	}
	// Pair ratios 2, 3, 1, 4 (A's load moves with B's): median 2.5. The
	// ratio of the medians would be 300/(100) = 3.
	a := []Result{run("sluice", 200, 3, 0, 0, 12*time.Second), run("sluice", 600, 9, 0, 0, 11*time.Second),
		run("sluice", 100, 2, 5, 2, 15*time.Second), run("sluice", 400, 4, 0, 0, 10*time.Second), run("sluice", 0, 5, 0, 0, 0)}
	b := []Result{run("nats", 100, 3, 1, 1, 13*time.Second), run("nats", 200, 9, 0, 0, 14*time.Second),
		run("nats", 100, 2, 0, 0, 12*time.Second), run("nats", 100, 4, 0, 0, 12*time.Second), run("nats", 100, 5, 0, 0, 12*time.Second)}
	b[1].SubsEnded = 1
	p := ComparePaired(a, b)
	if p.Ratio != 2.5 || p.RatioRange != [2]float64{1, 4} || len(p.Ratios) != 4 {
		t.Fatalf("ratio %v range %v ratios %v", p.Ratio, p.RatioRange, p.Ratios)
	}
	if p.Median != [2]float64{300, 100} || p.Range[0] != [2]float64{100, 600} || p.Range[1] != [2]float64{100, 200} {
		t.Fatalf("median %v range %v", p.Median, p.Range)
	}
	if p.Lost != [2]int64{5, 1} || p.Announced != [2]int64{2, 1} || p.Ended != [2]int64{0, 1} {
		t.Fatalf("lost %v announced %v ended %v", p.Lost, p.Announced, p.Ended)
	}
	if p.Overload != [2]float64{0, 12} || p.Load1 != [2]float64{2, 10} {
		t.Fatalf("overload %v load %v", p.Overload, p.Load1)
	}
	if s := p.Spread(); math.Abs(s-3) > 1e-9 { // median 300, min 100: 3; max 600: 2
		t.Fatalf("spread %v", s)
	}
	if p.System != [2]string{"sluice", "nats"} || !p.HigherBetter || p.Unit != "msg/s delivered" {
		t.Fatalf("header %+v", p)
	}
}

// TestComparePairedLatency: for a lower-is-better headline the pairs'
// ratios are still A/B (below 1: A is better).
func TestComparePairedLatency(t *testing.T) {
	lat := func(p99 time.Duration) Result {
		return Result{System: "x", Scenario: "latency", Latency: &LatencySummary{P99: int64(p99)}}
	}
	p := ComparePaired([]Result{lat(time.Millisecond), lat(3 * time.Millisecond)},
		[]Result{lat(2 * time.Millisecond), lat(2 * time.Millisecond)})
	if p.HigherBetter || p.Ratio != 1 || p.RatioRange != [2]float64{0.5, 1.5} {
		t.Fatalf("%+v", p)
	}
}
