package cluster

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestCompareReplicas: one small run of each replica count completes,
// every acknowledged publish counted (no speed is asserted). With
// SLUICE_BENCH_REPLICAS=runs it is the measurement of BENCHMARKS.md
// (100,000 messages per publisher, the given number of runs) and logs the
// medians and their ratios.
func TestCompareReplicas(t *testing.T) {
	cfg := ReplicasConfig{Runs: 1, Count: 2000, Window: 256}
	if v := os.Getenv("SLUICE_BENCH_REPLICAS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		cfg = ReplicasConfig{Runs: n, Log: os.Stderr}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	runs, err := CompareReplicas(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.Err != "" || r.Result.Published != int64(4*cfg.defaultsCount()) {
			t.Fatalf("replicas=%d: %d acked, %s", r.Replicas, r.Result.Published, r.Err)
		}
	}
	m := ReplicasMedians(runs)
	t.Logf("acked msg/s: N=1 %.0f, N=2 %.0f (%.2fx), N=3 %.0f (%.2fx)", m[1], m[2], m[2]/m[1], m[3], m[3]/m[1])
}

func (c ReplicasConfig) defaultsCount() int { c.defaults(); return c.Count }
