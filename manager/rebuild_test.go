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
	mark := func(id, first, reached uint64) role.Hosted {
		return role.Hosted{Mark: true, ID: id, Epoch: e, First: first, Reached: reached, Host: "m"}
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
		// Marks (role.Hosted.Mark): a former manager declared streamlet 1
		// lost (its host cut off) at e+100, opened 2 there unrecorded,
		// and 2's host died; 1's host came back with 1 sealed at e+27.
		{"a mark beyond the reported end: lost up to where it reached",
			[]role.Hosted{sealed(1, e, 27, 0), mark(2, e+100, e+200)}, e + 200, 0, [][2]uint64{{e + 27, e + 200}}},
		{"a mark whose streamlet was reported adds nothing",
			[]role.Hosted{sealed(1, e, 27, 0), sealed(2, e+100, 30, 0), mark(2, e+100, e+200)}, e + 130, 0, [][2]uint64{{e + 27, e + 100}}},
		{"a mark followed by a reported streamlet adds nothing",
			[]role.Hosted{sealed(1, e, 27, 0), sealed(3, e+27, 10, 0), mark(1, e, e+100)}, e + 37, 0, nil},
		{"a mark of an older epoch adds nothing",
			[]role.Hosted{sealed(1, e, 27, 0), {Mark: true, ID: 2, Epoch: e - 1, First: e + 100, Reached: e + 200}}, e + 27, 0, nil},
		{"the largest of two applicable marks",
			[]role.Hosted{sealed(1, e, 27, 0), mark(2, e+100, e+200), mark(4, e+300, e+400)}, e + 400, 0, [][2]uint64{{e + 27, e + 400}}},
		{"an open newest streamlet stays open below a mark (lost when it closes)",
			[]role.Hosted{sealed(1, e, 27, 2), {ID: 2, Epoch: e, First: e + 27, Len: 5, Host: "h", LeaseEnd: 5}, mark(3, e+127, e+227)}, e + 27, 2, nil},
		{"only a mark: what it covered is lost",
			[]role.Hosted{mark(2, e+100, e+200)}, e + 200, 0, [][2]uint64{{e + 100, e + 200}}},
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

// TestRebuildBelowAMarkCloses: a channel rebuilt with its newest
// streamlet open below a former manager's mark continues in it, and when
// it closes the range up to the mark is lost: the next streamlet starts at
// the mark, never inside what the former manager may have handed out.
func TestRebuildBelowAMarkCloses(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := role.Limits{Msgs: 100, Size: 1 << 20, Life: 4 * time.Second, TTL: time.Minute}
	const e = 1000 << 20
	cs := rebuildState(now, l, []role.Hosted{
		{ID: 2, Epoch: e, First: e + 27, Len: 5, Host: "h", LeaseEnd: 5},
		{Mark: true, ID: 3, Epoch: e, First: e + 127, Reached: e + 227, Host: "m"},
	}, time.Second)
	if s, ok := cs.open(); !ok || s.ID != 2 || cs.next != e+27 {
		t.Fatalf("open %+v %v, next %d", s, ok, cs.next)
	}
	cs.close(2, e+40, now.UnixNano())
	if cs.next != e+227 {
		t.Fatalf("next %d after the close, want %d (the mark)", cs.next, e+227)
	}
	last, _ := cs.last()
	if !last.Lost || last.First != e+40 || last.End != e+227 || !last.Closed {
		t.Fatalf("last entry %+v, want [e+40, e+227) lost", last)
	}
	// The floor applies once: a later streamlet closes normally.
	cs.addOpen(9, []string{"h"}, now.UnixNano())
	cs.close(9, e+250, now.UnixNano())
	if cs.next != e+250 {
		t.Fatalf("next %d, want %d", cs.next, e+250)
	}
}

// TestMark: what a manager keeps of a channel it stops managing.
func TestMark(t *testing.T) {
	l := role.Limits{Msgs: 100, Size: 1 << 20, Life: 4 * time.Second, TTL: time.Minute}
	const e = 1000 << 20
	cs := &chanState{epoch: e, next: e, limits: l}
	if _, ok := cs.mark(); ok {
		t.Fatal("a state that lists nothing has a mark")
	}
	cs.addOpen(1, []string{"c"}, 0)
	if mk, _ := cs.mark(); mk.ID != 1 || mk.First != e || mk.Reached != e+100 || mk.Epoch != e || !mk.Mark {
		t.Fatalf("open: mark %+v, want id 1 reaching its capacity e+100", mk)
	}
	cs.lose(1, 0) // its host is cut off: closed at e+100, lost
	cs.addOpen(2, []string{"a"}, 0)
	cs.hostDown("a", 0) // and the successor's host dies
	if mk, _ := cs.mark(); mk.ID != 2 || mk.First != e+100 || mk.Reached != e+200 {
		t.Fatalf("after two losses: mark %+v, want id 2 reaching e+200", mk)
	}
	if last, _ := cs.last(); !last.Lost || last.ID != 2 {
		t.Fatalf("last %+v, want streamlet 2 lost", last)
	}
}
