package bench

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestHistogramBucketsTileTheRange(t *testing.T) {
	last := histIndex(histMax)
	prevHi := int64(-1)
	for i := 0; i <= last; i++ {
		lo, hi := histBounds(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if histIndex(lo) != i || histIndex(hi) != i {
			t.Fatalf("bucket %d = [%d,%d] but index(lo)=%d index(hi)=%d", i, lo, hi, histIndex(lo), histIndex(hi))
		}
		if lo >= 1<<histSubBits && float64(hi-lo+1)/float64(lo) > 1.0/histHalf+1e-12 {
			t.Fatalf("bucket %d = [%d,%d] wider than 1/%d of its start", i, lo, hi, histHalf)
		}
		prevHi = hi
	}
	if prevHi != histMax {
		t.Fatalf("last bucket ends at %d, want %d", prevHi, histMax)
	}
}

// TestHistogramQuantilesMatchSorting checks every quantile against the
// exact one from a sorted copy: never below it, at most 1/128 above.
func TestHistogramQuantilesMatchSorting(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dists := map[string]func() int64{
		"uniform-small": func() int64 { return rng.Int64N(300) },
		"uniform-wide":  func() int64 { return rng.Int64N(int64(time.Second)) },
		"exponential":   func() int64 { return int64(rng.ExpFloat64() * 50_000) },
		"lognormal":     func() int64 { return int64(math.Exp(rng.NormFloat64()*2 + 10)) },
		"bimodal": func() int64 {
			if rng.IntN(100) == 0 {
				return 5_000_000 + rng.Int64N(1000)
			}
			return 30_000 + rng.Int64N(5000)
		},
	}
	for name, gen := range dists {
		t.Run(name, func(t *testing.T) {
			h := NewHistogram()
			vals := make([]int64, 20_000)
			for i := range vals {
				vals[i] = gen()
				h.Record(vals[i])
			}
			slices.Sort(vals)
			for _, q := range []float64{0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
				rank := int(math.Ceil(q * float64(len(vals))))
				exact := vals[rank-1]
				got := h.Quantile(q)
				if got < exact || float64(got-exact) > float64(exact)/histHalf {
					t.Errorf("q=%v: got %d, exact %d", q, got, exact)
				}
			}
			if h.Max() != vals[len(vals)-1] || h.Min() != vals[0] || h.Count() != uint64(len(vals)) {
				t.Errorf("max/min/count = %d/%d/%d, want %d/%d/%d", h.Max(), h.Min(), h.Count(), vals[len(vals)-1], vals[0], len(vals))
			}
		})
	}
}

func TestHistogramMergeEqualsOneHistogram(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	all, a, b := NewHistogram(), NewHistogram(), NewHistogram()
	for i := 0; i < 5000; i++ {
		v := rng.Int64N(10_000_000)
		all.Record(v)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	a.Merge(b)
	a.Merge(NewHistogram())
	if a.Summary() != all.Summary() || a.Min() != all.Min() {
		t.Fatalf("merged %+v, want %+v", a.Summary(), all.Summary())
	}
}

func TestHistogramEdges(t *testing.T) {
	h := NewHistogram()
	if h.Quantile(0.5) != 0 || h.Max() != 0 || h.Min() != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram should report zeros")
	}
	h.Record(-5)                   // counted as 0
	h.Record(int64(time.Hour) * 2) // above histMax: clamped bucket, exact max
	if h.Min() != 0 || h.Max() != int64(2*time.Hour) {
		t.Fatalf("min %d max %d", h.Min(), h.Max())
	}
	if got := h.Quantile(1); got != int64(2*time.Hour) {
		t.Fatalf("q=1: %d", got)
	}
	if got := h.Quantile(0.5); got != 0 {
		t.Fatalf("q=0.5: %d", got)
	}
}

// fakeClock is a manual clock for the pacer: Sleep advances it.
type fakeClock struct{ now time.Time }

func (f *fakeClock) Now() time.Time { return f.now }
func (f *fakeClock) Sleep(_ context.Context, d time.Duration) error {
	f.now = f.now.Add(d)
	return nil
}

// TestPacerIsOpenLoop: a stall delays the events that fell due meanwhile
// but neither drops them nor moves their due times; they are issued back to
// back, and the lag is reported.
func TestPacerIsOpenLoop(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	p := Pacer{Rate: 1000, Now: clk.Now, Sleep: clk.Sleep} // one event per ms
	start := clk.now
	var calls []time.Time // when fn ran
	var dues []time.Time
	lag, err := p.Run(context.Background(), start, 10, func(i int, due time.Time) error {
		calls = append(calls, clk.now)
		dues = append(dues, due)
		if i == 2 {
			clk.now = clk.now.Add(5500 * time.Microsecond) // the publisher stalls 5.5 ms
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 10 {
		t.Fatalf("%d calls, want 10", len(calls))
	}
	for i, d := range dues {
		if want := start.Add(time.Duration(i) * time.Millisecond); !d.Equal(want) {
			t.Fatalf("event %d due %v, want %v", i, d.Sub(start), want.Sub(start))
		}
	}
	stallEnd := start.Add(2*time.Millisecond + 5500*time.Microsecond)
	for i := 3; i <= 7; i++ { // due at 3..7 ms, all overdue when the stall ends at 7.5 ms
		if !calls[i].Equal(stallEnd) {
			t.Fatalf("event %d ran at %v, want back to back at %v", i, calls[i].Sub(start), stallEnd.Sub(start))
		}
	}
	if !calls[8].Equal(start.Add(8 * time.Millisecond)) {
		t.Fatalf("event 8 ran at %v, want back on schedule at 8ms", calls[8].Sub(start))
	}
	if want := 4500 * time.Microsecond; lag != want {
		t.Fatalf("max lag %v, want %v", lag, want)
	}
}

func TestPacerStopsOnContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := Pacer{Rate: 1e6}
	n := 0
	_, err := p.Run(ctx, time.Now(), 1000, func(int, time.Time) error {
		n++
		if n == 5 {
			cancel()
		}
		return nil
	})
	if err == nil || n != 5 {
		t.Fatalf("err %v after %d events, want context error after 5", err, n)
	}
}

// TestPacerWaitModes: PacerSpin never yields its P while there is another
// one (so the client's goroutines keep a P free to poll the network), and
// yields when it is alone; PacerYield always yields. Every wait lasts at
// least its duration.
func TestPacerWaitModes(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	for _, tc := range []struct {
		mode      PacerMode
		procs     int
		d         time.Duration
		wantYield bool
	}{
		{PacerSpin, 2, 3 * time.Millisecond, false}, // a timer
		{PacerSpin, 2, 40 * time.Microsecond, false},
		{PacerYield, 2, 3 * time.Millisecond, false}, // a timer
		{PacerSpin, 1, 30 * time.Microsecond, true},
		{PacerYield, 2, 30 * time.Microsecond, true},
	} {
		runtime.GOMAXPROCS(tc.procs)
		yields := 0
		p := Pacer{Rate: 1, Mode: tc.mode, yield: func() { yields++; runtime.Gosched() }}
		start := time.Now()
		if err := p.wait(context.Background(), tc.d); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el < tc.d {
			t.Errorf("%v with %d Ps: waited %v, want >= %v", tc.mode, tc.procs, el, tc.d)
		}
		if (yields > 0) != tc.wantYield {
			t.Errorf("%v with %d Ps, %v: yielded %d times, want yields: %v", tc.mode, tc.procs, tc.d, yields, tc.wantYield)
		}
	}
}

// TestPacerSleepTakesNoCPU: the default pacer sleeps in the kernel: 500
// waits of 100 us (the gap between events at 10k msg/s) last at least
// their time and cost the thread far less CPU than they last (a spin costs
// all of it). Each wait's syscall costs the thread a fixed few
// microseconds, tens of them under the race detector: with 20 us waits
// that alone came to half the wall time in CI, so the waits are longer.
func TestPacerSleepTakesNoCPU(t *testing.T) {
	if (Config{}).Pacer != PacerSleep {
		t.Fatal("the zero Config does not pace with PacerSleep")
	}
	p := Pacer{Rate: 50_000}
	var wall, cpu time.Duration
	_, err := p.Run(context.Background(), time.Now(), 1, func(int, time.Time) error {
		// Run has locked the goroutine to its thread: time the waits there.
		c0, start := threadCPU(t), time.Now()
		for range 500 {
			if err := p.wait(context.Background(), 100*time.Microsecond); err != nil {
				return err
			}
		}
		wall, cpu = time.Since(start), threadCPU(t)-c0
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if wall < 50*time.Millisecond {
		t.Fatalf("500 waits of 100us took %v", wall)
	}
	if cpu > wall/2 {
		t.Fatalf("500 waits of 100us: %v of CPU in %v", cpu, wall)
	}
	t.Logf("500 waits of 100us: %v, %v of CPU", wall, cpu)
}

// threadCPU is the calling thread's CPU time.
func threadCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestPacerWaitStopsOnContext(t *testing.T) {
	for _, m := range []PacerMode{PacerSleep, PacerSpin, PacerYield} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		p := Pacer{Rate: 1, Mode: m}
		if err := p.wait(ctx, time.Hour); !errors.Is(err, context.Canceled) {
			t.Fatalf("%v: wait with a cancelled context: %v", m, err)
		}
		if err := p.wait(ctx, 10*time.Microsecond); !errors.Is(err, context.Canceled) {
			t.Fatalf("%v: short wait with a cancelled context: %v", m, err)
		}
	}
}

func TestParsePacerMode(t *testing.T) {
	_, c, err := ParseSpec("latency/pacer=yield", Config{})
	if err != nil || c.Pacer != PacerYield {
		t.Fatalf("latency/pacer=yield: %v, %v", c.Pacer, err)
	}
	if _, c, err = ParseSpec("latency/pacer=spin", Config{Pacer: PacerYield}); err != nil || c.Pacer != PacerSpin {
		t.Fatalf("latency/pacer=spin: %v, %v", c.Pacer, err)
	}
	if _, c, err = ParseSpec("latency/pacer=sleep", Config{Pacer: PacerYield}); err != nil || c.Pacer != PacerSleep {
		t.Fatalf("latency/pacer=sleep: %v, %v", c.Pacer, err)
	}
	if _, _, err := ParseSpec("latency/pacer=fast", Config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("pacer=fast: %v, want ErrConfig", err)
	}
	b, err := json.Marshal(Config{Pacer: PacerYield})
	if err != nil || !strings.Contains(string(b), `"pacer":"yield"`) {
		t.Fatalf("JSON %s, %v", b, err)
	}
	var back Config
	if err := json.Unmarshal(b, &back); err != nil || back.Pacer != PacerYield {
		t.Fatalf("JSON round trip: %v, %v", back.Pacer, err)
	}
}
