package bench

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkHistogramRecord: the cost the latency scenario adds per
// message on the subscriber's goroutine (must not allocate).
func BenchmarkHistogramRecord(b *testing.B) {
	b.ReportAllocs()
	h := NewHistogram()
	rng := rand.New(rand.NewPCG(1, 1))
	vals := make([]int64, 4096)
	for i := range vals {
		vals[i] = int64(rng.ExpFloat64() * 50_000)
	}
	for i := 0; b.Loop(); i++ {
		h.Record(vals[i&4095])
	}
}

func BenchmarkHistogramQuantile(b *testing.B) {
	b.ReportAllocs()
	h := NewHistogram()
	for i := int64(0); i < 100_000; i++ {
		h.Record(i * 997 % 10_000_000)
	}
	for b.Loop() {
		_ = h.Quantile(0.999)
	}
}
