package host

import (
	"slices"
	"testing"
)

// TestChooseExpiredOldestSealFirst: victims are taken in seal order until
// the rest fits, and all of them when it cannot.
func TestChooseExpiredOldestSealFirst(t *testing.T) {
	cands := func() []Retained {
		return []Retained{{Seq: 7, FP: 10}, {Seq: 2, FP: 30}, {Seq: 5, FP: 20}, {Seq: 9, FP: 40}}
	}
	seqs := func(v []Retained) []uint64 {
		var out []uint64
		for _, r := range v {
			out = append(out, r.Seq)
		}
		return out
	}
	for _, tc := range []struct {
		total, budget int64
		want          []uint64
	}{
		{100, 100, nil},
		{100, 99, []uint64{2}},
		{100, 70, []uint64{2}},
		{100, 69, []uint64{2, 5}},
		{150, 90, []uint64{2, 5, 7}}, // 150-30-20-10 = 90
		{150, 60, []uint64{2, 5, 7, 9}},
		{150, 10, []uint64{2, 5, 7, 9}},
		{500, 10, []uint64{2, 5, 7, 9}}, // open streamlets alone exceed it
	} {
		if got := seqs(ChooseExpired(tc.total, tc.budget, cands())); !slices.Equal(got, tc.want) {
			t.Errorf("total %d budget %d: %v, want %v", tc.total, tc.budget, got, tc.want)
		}
	}
}
