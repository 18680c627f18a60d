package bench

import (
	"math"
	"slices"
)

// Paired is the comparison of two systems measured in alternated pairs
// (ABBA: A B, B A, A B, ...): run i of A and run i of B ran next to each
// other, under nearly the same load from the rest of the machine, so the
// ratio of each pair cancels most of that load, where the ratio of two
// medians over a whole session does not.
type Paired struct {
	Label  string    `json:"label"`
	System [2]string `json:"systems"`
	Unit   string    `json:"unit"`
	// HigherBetter: the headline is a rate (higher is better), not a
	// latency or a size.
	HigherBetter bool `json:"higher_is_better"`
	// Ratios are the pairs' A/B headline ratios, in run order; a pair where
	// either run measured nothing has none.
	Ratios []float64 `json:"ratios"`
	// Ratio is the median of Ratios, RatioRange their [min, max].
	Ratio      float64    `json:"ratio"`
	RatioRange [2]float64 `json:"ratio_range"`
	// Median and Range of each side's headline over its runs.
	Median [2]float64    `json:"median"`
	Range  [2][2]float64 `json:"range"`
	// Lost sums Result.Lost over each side's runs, Announced the part the
	// system said it dropped (Result.Dropped: GAP ranges, slow-consumer
	// drops), Ended the subscriptions it ended early (disconnects).
	Lost      [2]int64 `json:"lost"`
	Announced [2]int64 `json:"announced"`
	Ended     [2]int64 `json:"ended"`
	// Overload is each side's shortest Result.Overload over its runs.
	Overload [2]float64 `json:"overload_s"`
	// Load1 is the lowest and highest 1-minute load average over all runs.
	Load1 [2]float64 `json:"load1"`
	// Errors counts runs that ended with an error, per side.
	Errors [2]int `json:"errors"`
}

// ComparePaired builds the Paired comparison of a and b, where a[i] and
// b[i] ran next to each other.
func ComparePaired(a, b []Result) Paired {
	p := Paired{Load1: [2]float64{math.Inf(1), 0}, Overload: [2]float64{math.Inf(1), math.Inf(1)}}
	for side, rs := range [][]Result{a, b} {
		vals := make([]float64, 0, len(rs))
		for _, r := range rs {
			if p.Label == "" {
				p.Label = r.Label()
				_, p.Unit, p.HigherBetter = r.Headline()
			}
			if p.System[side] == "" {
				p.System[side] = r.System
			}
			if v, _, _ := r.Headline(); v > 0 {
				vals = append(vals, v)
			}
			p.Lost[side] += r.Lost()
			p.Announced[side] += r.Dropped
			p.Ended[side] += r.SubsEnded
			p.Overload[side] = min(p.Overload[side], r.Overload.Seconds())
			p.Load1[0] = min(p.Load1[0], r.Load1[0], r.Load1[1])
			p.Load1[1] = max(p.Load1[1], r.Load1[0], r.Load1[1])
			if r.Err != "" {
				p.Errors[side]++
			}
		}
		p.Median[side], p.Range[side] = medianRange(vals)
		if math.IsInf(p.Overload[side], 1) {
			p.Overload[side] = 0
		}
	}
	if math.IsInf(p.Load1[0], 1) {
		p.Load1[0] = 0
	}
	for i := range min(len(a), len(b)) {
		va, _, _ := a[i].Headline()
		vb, _, _ := b[i].Headline()
		if va > 0 && vb > 0 {
			p.Ratios = append(p.Ratios, va/vb)
		}
	}
	p.Ratio, p.RatioRange = medianRange(p.Ratios)
	return p
}

// Spread returns how far A's runs spread around their median: the larger
// of max/median and median/min (1 when every run measured the same).
func (p Paired) Spread() float64 {
	m, r := p.Median[0], p.Range[0]
	if m <= 0 || r[0] <= 0 {
		return 0
	}
	return max(r[1]/m, m/r[0])
}

// medianRange returns the median (the mean of the middle two for an even
// count) and [min, max] of vs; zeros for none.
func medianRange(vs []float64) (float64, [2]float64) {
	if len(vs) == 0 {
		return 0, [2]float64{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return m, [2]float64{s[0], s[len(s)-1]}
}
