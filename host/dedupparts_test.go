package host

import (
	"slices"
	"testing"

	"github.com/sluice-rtm/sluice/role"
)

// TestDedupParts: which of a channel's earlier streamlets complete a new
// streamlet's dedup window, from which record, and when the window is
// partial (a hole before the new streamlet's first position).
func TestDedupParts(t *testing.T) {
	closed := func(id, first, end uint64) role.StreamletRef {
		return role.StreamletRef{ID: id, Host: "a", First: first, End: end, Closed: true}
	}
	type want struct {
		id    uint64
		start int
	}
	for _, tc := range []struct {
		name        string
		prior       []role.StreamletRef
		from, first uint64
		want        []want
		partial     bool
	}{
		{"none", nil, 0, 1, nil, false},
		{"contiguous, rebuilt from the oldest", []role.StreamletRef{closed(1, 1, 11), closed(2, 11, 21)}, 0, 21,
			[]want{{1, 0}, {2, 0}}, false},
		{"extended from the window's next position", []role.StreamletRef{closed(1, 1, 11), closed(2, 11, 21)}, 15, 21,
			[]want{{2, 4}}, false},
		{"a hole between two", []role.StreamletRef{closed(1, 1, 11), closed(2, 15, 21)}, 0, 21,
			[]want{{1, 0}, {2, 0}}, true},
		{"a hole before the new streamlet", []role.StreamletRef{closed(1, 1, 11)}, 0, 21,
			[]want{{1, 0}}, true},
		{"lost and unnamed streamlets left out, a hole", []role.StreamletRef{closed(1, 1, 11),
			{ID: 2, First: 11, End: 21, Closed: true, Lost: true}, {First: 21, End: 25, Closed: true}}, 0, 25,
			[]want{{1, 0}}, true},
		{"an open one read up to the new first position", []role.StreamletRef{closed(1, 1, 11),
			{ID: 2, Host: "b", First: 11}}, 0, 21, []want{{1, 0}, {2, 0}}, false},
		{"the new streamlet and later ones left out", []role.StreamletRef{closed(1, 1, 11), closed(2, 11, 21),
			closed(3, 21, 31)}, 0, 21, []want{{1, 0}, {2, 0}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts, partial := dedupParts(tc.prior, tc.from, tc.first)
			var got []want
			for _, p := range parts {
				got = append(got, want{p.ref.ID, p.start})
			}
			if !slices.Equal(got, tc.want) || partial != tc.partial {
				t.Fatalf("parts %v partial %v, want %v partial %v", got, partial, tc.want, tc.partial)
			}
		})
	}
}
