package manager

import (
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
)

func TestRebuildState(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	skew := time.Second
	l := role.Limits{Msgs: 100, Size: 1 << 20, Life: 4 * time.Second, TTL: time.Minute}
	clockBase := positionBase(now.Add(skew))
	const e = 1000 << 20 // an epoch far below clockBase
	sealed := func(id, first uint64, n uint32, succ uint64) role.Hosted {
		return role.Hosted{ID: id, Epoch: e, First: first, Len: n, Sealed: true, Succ: succ, Host: "h", LimitMsgs: 100}
	}
	cases := []struct {
		name     string
		in       []role.Hosted
		wantNext uint64
		wantOpen uint64 // id of the open streamlet, 0 if none
		lost     [][2]uint64
	}{
		{"nothing found: a new incarnation at the clock base", nil, clockBase, 0, nil},
		{"a complete chain continues exactly",
			[]role.Hosted{sealed(2, e+100, 100, 0), sealed(1, e, 100, 2)}, e + 200, 0, nil},
		{"a hole between live streamlets is lost",
			[]role.Hosted{sealed(1, e, 100, 2), sealed(3, e+200, 50, 0)}, e + 250, 0, [][2]uint64{{e + 100, e + 200}}},
		{"a missing successor is lost and the next position jumps",
			[]role.Hosted{sealed(1, e, 40, 9)}, clockBase, 0, [][2]uint64{{e + 40, clockBase}}},
		{"the newest open streamlet stays open",
			[]role.Hosted{sealed(1, e, 100, 2), {ID: 2, Epoch: e, First: e + 100, Len: 7, Host: "h", LeaseEnd: 5}}, e + 100, 2, nil},
		{"a streamlet lost at takeover ends at its capacity",
			[]role.Hosted{sealed(1, e, 100, 2), {ID: 2, Epoch: e, First: e + 100, Len: 7, Host: "h", Lost: true, LimitMsgs: 100}}, e + 200, 0, [][2]uint64{{e + 100, e + 200}}},
		{"only the newest epoch counts",
			[]role.Hosted{sealed(1, e, 100, 0), {ID: 5, Epoch: e + 5000, First: e + 5000, Len: 3, Sealed: true, Host: "h"}}, e + 5003, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := rebuildState(now, l, c.in, skew)
			if cs.next != c.wantNext {
				t.Fatalf("next %d, want %d (list %+v)", cs.next, c.wantNext, cs.list)
			}
			open, ok := cs.open()
			if (c.wantOpen != 0) != ok || (ok && open.ID != c.wantOpen) {
				t.Fatalf("open %+v %v, want id %d", open, ok, c.wantOpen)
			}
			var lost [][2]uint64
			for i, r := range cs.list {
				if r.Lost {
					lost = append(lost, [2]uint64{r.First, r.End})
				}
				if i > 0 && cs.list[i-1].End != r.First {
					t.Fatalf("list not contiguous at %d: %+v", i, cs.list)
				}
			}
			if len(lost) != len(c.lost) {
				t.Fatalf("lost ranges %v, want %v", lost, c.lost)
			}
			for i := range lost {
				if lost[i] != c.lost[i] {
					t.Fatalf("lost ranges %v, want %v", lost, c.lost)
				}
			}
		})
	}
}
