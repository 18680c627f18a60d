package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram is a log-linear histogram of non-negative durations in
// nanoseconds (an HDR-style histogram): values below 2^histSubBits are
// counted exactly; above, each power of two is split into 2^(histSubBits-1)
// equal buckets, so a reported quantile is at most 1/128 (0.8%) above the
// exact one, and never below it. Values above histMax are counted as
// histMax; the exact maximum and minimum are kept apart.
//
// A Histogram is not safe for concurrent use: give each recording goroutine
// its own and Merge them afterwards. The zero value is not usable; use
// NewHistogram.
type Histogram struct {
	counts   []uint64
	n        uint64
	min, max int64
	sum      float64
}

const (
	histSubBits = 8
	histHalf    = 1 << (histSubBits - 1) // buckets per power of two above 2^histSubBits
	histMax     = int64(1)<<40 - 1       // ~18 minutes
)

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{counts: make([]uint64, histIndex(histMax)+1), min: math.MaxInt64}
}

// histIndex maps v (0 <= v <= histMax) to its bucket.
func histIndex(v int64) int {
	l := bits.Len64(uint64(v))
	if l <= histSubBits {
		return int(v)
	}
	shift := l - histSubBits
	return shift*histHalf + int(uint64(v)>>shift)
}

// histBounds returns the lowest and highest value of bucket i.
func histBounds(i int) (lo, hi int64) {
	if i < 1<<histSubBits {
		return int64(i), int64(i)
	}
	shift := i/histHalf - 1
	sub := int64(i - shift*histHalf)
	return sub << shift, (sub+1)<<shift - 1
}

// Record adds one value, in nanoseconds; negative values count as 0.
func (h *Histogram) Record(ns int64) {
	if ns < 0 {
		ns = 0
	}
	if ns < h.min {
		h.min = ns
	}
	if ns > h.max {
		h.max = ns
	}
	h.sum += float64(ns)
	h.n++
	if ns > histMax {
		ns = histMax
	}
	h.counts[histIndex(ns)]++
}

// RecordDuration adds one duration.
func (h *Histogram) RecordDuration(d time.Duration) { h.Record(int64(d)) }

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// Count returns the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest recorded value exactly (0 if empty).
func (h *Histogram) Max() int64 {
	if h.n == 0 {
		return 0
	}
	return h.max
}

// Min returns the smallest recorded value exactly (0 if empty).
func (h *Histogram) Min() int64 {
	if h.n == 0 {
		return 0
	}
	return h.min
}

// Mean returns the arithmetic mean (0 if empty).
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile returns the value at quantile q (0 < q <= 1): the highest value
// of the bucket that holds the ceil(q*Count())-th smallest value, capped at
// Max. So the result is >= the exact quantile and within 0.8% of it.
// It returns 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	rank = min(rank, h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			if rank == h.n || i == len(h.counts)-1 {
				return h.max // the top value, or one clamped into the last bucket
			}
			_, hi := histBounds(i)
			return min(max(hi, h.min), h.max)
		}
	}
	return h.max
}

// LatencySummary is the usual digest of a latency Histogram, in
// nanoseconds.
type LatencySummary struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_ns"`
	P50   int64   `json:"p50_ns"`
	P90   int64   `json:"p90_ns"`
	P99   int64   `json:"p99_ns"`
	P999  int64   `json:"p99_9_ns"`
	Max   int64   `json:"max_ns"`
}

// Summary returns h's digest.
func (h *Histogram) Summary() LatencySummary {
	return LatencySummary{Count: h.n, Mean: h.Mean(), P50: h.Quantile(0.5), P90: h.Quantile(0.9),
		P99: h.Quantile(0.99), P999: h.Quantile(0.999), Max: h.Max()}
}
