package manager

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func testLimits() role.Limits {
	return role.Limits{Msgs: 10, Size: 1 << 20, Life: time.Second, TTL: 10 * time.Second}
}

// checkInvariants verifies the invariants documented on chanState.
func checkInvariants(t *testing.T, cs *chanState) {
	t.Helper()
	for i, s := range cs.list {
		if i < len(cs.list)-1 && !s.Closed {
			t.Fatalf("entry %d of %d is open", i, len(cs.list))
		}
		if i > 0 {
			prev := cs.list[i-1]
			if prev.End != s.First {
				t.Fatalf("entry %d starts at %d, previous ends at %d", i, s.First, prev.End)
			}
			if s.Closed && s.Expires < prev.Expires {
				t.Fatalf("entry %d expires at %d, before its predecessor (%d)", i, s.Expires, prev.Expires)
			}
		}
	}
	if n := len(cs.list); n > 0 {
		last := cs.list[n-1]
		if !last.Closed && cs.next != last.First {
			t.Fatalf("next %d, open streamlet starts at %d", cs.next, last.First)
		}
		if last.Closed && cs.next != last.End {
			t.Fatalf("next %d, last streamlet ends at %d", cs.next, last.End)
		}
	}
}

func TestChanState_NewStartsAtPositionBase(t *testing.T) {
	cs := newChanState(t0, testLimits())
	if cs.epoch != positionBase(t0) || cs.next != cs.epoch || len(cs.list) != 0 {
		t.Fatalf("new state %+v, want epoch = next = %d", cs, positionBase(t0))
	}
	info := cs.info(0)
	if info.Earliest != cs.next || info.Next != cs.next || len(info.Streamlets) != 0 || info.Epoch != cs.epoch {
		t.Fatalf("info of an empty channel %+v", info)
	}
	if _, ok := cs.open(); ok {
		t.Fatal("a new channel has an open streamlet")
	}
}

func TestChanState_OpenCloseExpireLifecycle(t *testing.T) {
	l := testLimits()
	cs := newChanState(t0, l)
	base := cs.next
	ns := t0.UnixNano()
	ttl := int64(l.TTL)

	a := cs.addOpen(1, []string{"h"}, ns)
	if a.First != base || a.LeaseEnd != ns+int64(l.Life) || a.Closed {
		t.Fatalf("opened %+v", a)
	}
	if g := cs.grantFor("ch", a); g.Streamlet != 1 || g.First != base || g.Epoch != cs.epoch ||
		g.LimitMsgs != l.Msgs || g.LimitSize != l.Size || g.LeaseEnd != a.LeaseEnd || g.Channel != "ch" {
		t.Fatalf("grant %+v", g)
	}
	if info := cs.info(4); info.Next != base+4 || info.Earliest != base {
		t.Fatalf("info with 4 messages: %+v", info)
	}
	if _, over := cs.leaseOver(a.LeaseEnd - 1); over {
		t.Fatal("lease over before its end")
	}
	if s, over := cs.leaseOver(a.LeaseEnd); !over || s.ID != 1 {
		t.Fatal("lease not over at its end")
	}

	cs.close(1, base+4, ns+10)
	checkInvariants(t, cs)
	if cs.next != base+4 || !cs.list[0].Closed || cs.list[0].Expires != ns+10+ttl {
		t.Fatalf("after close: next %d, %+v", cs.next, cs.list[0])
	}
	if _, over := cs.leaseOver(ns + 1<<40); over {
		t.Fatal("a closed streamlet's lease reported")
	}
	cs.close(1, base+9, ns+20) // already closed: no-op
	cs.close(7, base+9, ns+20) // unknown: no-op
	if cs.next != base+4 || cs.list[0].End != base+4 {
		t.Fatalf("closing twice changed the state: %+v", cs.list)
	}

	b := cs.addOpen(2, []string{"h"}, ns+30)
	if b.First != base+4 {
		t.Fatalf("second streamlet starts at %d, want %d", b.First, base+4)
	}
	// The clock went backwards: b's expiry is clamped to a's.
	cs.close(2, base+9, ns+5)
	checkInvariants(t, cs)
	if cs.list[1].Expires != cs.list[0].Expires {
		t.Fatalf("later streamlet expires at %d, earlier at %d", cs.list[1].Expires, cs.list[0].Expires)
	}
	c := cs.addOpen(3, []string{"h"}, ns+40)
	cs.close(3, c.First, ns+50) // closed empty
	d := cs.addOpen(4, []string{"h"}, ns+60)
	checkInvariants(t, cs)
	if d.First != base+9 {
		t.Fatalf("streamlet after an empty one starts at %d, want %d", d.First, base+9)
	}

	// Expiry removes a prefix, in order, never the open streamlet.
	if got := cs.expireRefs(ns+10+ttl-1, nil); len(got) != 0 {
		t.Fatalf("expired %v before any TTL passed", got)
	}
	got := cs.expireRefs(ns+10+ttl, nil)
	if len(got) != 2 || got[0].ID != 1 || got[1].ID != 2 {
		t.Fatalf("expired %v, want [1 2]", got)
	}
	checkInvariants(t, cs)
	got = cs.expireRefs(ns+1<<50, got[:0])
	if len(got) != 1 || got[0].ID != 3 || len(cs.list) != 1 || cs.list[0].ID != 4 {
		t.Fatalf("expired %v, left %+v; want [3] and the open streamlet", got, cs.list)
	}
	if info := cs.info(0); info.Earliest != base+9 || info.Next != base+9 {
		t.Fatalf("info %+v", info)
	}
	cs.close(4, base+12, ns+70)
	cs.expireRefs(ns+1<<50, nil)
	if info := cs.info(0); len(info.Streamlets) != 0 || info.Earliest != base+12 || info.Next != base+12 {
		t.Fatalf("all expired: %+v, want earliest = next = %d", info, base+12)
	}
	if !cs.droppable(ns + 70 + ttl) {
		t.Fatal("an empty, unread channel unused for a TTL is not droppable")
	}
	if cs.droppable(ns + 70 + ttl - 1) {
		t.Fatal("droppable before a TTL of disuse")
	}
	cs.readers = 1
	if cs.droppable(ns + 1<<50) {
		t.Fatal("a channel with readers is droppable")
	}
}

func TestChanState_ExpiryNeverSkipsAnEarlierStreamlet(t *testing.T) {
	// Even if a later entry claims an earlier expiry (which close never
	// produces), expire stops at the first entry that has not expired.
	cs := newChanState(t0, testLimits())
	cs.list = []role.StreamletRef{
		{ID: 1, First: 10, End: 20, Closed: true, Expires: 500},
		{ID: 2, First: 20, End: 30, Closed: true, Expires: 100},
		{ID: 3, First: 30, End: 40, Closed: true, Expires: 600},
	}
	cs.next = 40
	if got := cs.expireRefs(200, nil); len(got) != 0 {
		t.Fatalf("expired %v: a later streamlet went before an earlier one", got)
	}
	if got := cs.expireRefs(550, nil); len(got) != 2 || got[0].ID != 1 || got[1].ID != 2 {
		t.Fatalf("expired %v, want [1 2]", got)
	}
}

func TestChanState_CloseClampsEnd(t *testing.T) {
	cs := newChanState(t0, testLimits())
	a := cs.addOpen(1, []string{"h"}, 0)
	cs.close(1, a.First-5, 1)
	if cs.list[0].End != a.First || cs.next != a.First {
		t.Fatalf("end before first not clamped: %+v next %d", cs.list[0], cs.next)
	}
}

func TestPositionBase_Monotonic(t *testing.T) {
	prev := positionBase(t0)
	if prev == 0 || prev&(1<<20-1) != 0 {
		t.Fatalf("base %d is zero or not a multiple of 2^20", prev)
	}
	for _, d := range []time.Duration{time.Millisecond, time.Second, time.Hour, 24 * time.Hour * 365 * 30} {
		b := positionBase(t0.Add(d))
		if b <= prev {
			t.Fatalf("base at +%v is %d, not above %d", d, b, prev)
		}
		prev = b
	}
	// Within one millisecond the base is the same; a channel recreated a
	// millisecond later starts 2^20 positions higher.
	if positionBase(t0.Add(999*time.Microsecond)) != positionBase(t0) {
		t.Fatal("base changed within a millisecond")
	}
	if positionBase(t0.Add(time.Millisecond))-positionBase(t0) != 1<<20 {
		t.Fatal("one millisecond is not 2^20 positions")
	}
	if positionBase(time.UnixMilli(0)) == 0 {
		t.Fatal("base 0 at the Unix epoch")
	}
}

// TestExpireThroughRemovesAPrefix: the manager's early expiry removes the
// closed streamlets up to and including the one named, never the open one,
// and nothing for an id it does not list as closed.
func TestExpireThroughRemovesAPrefix(t *testing.T) {
	list := func() *chanState {
		return &chanState{next: 40, list: []role.StreamletRef{
			{ID: 0, First: 1, End: 10, Closed: true, Lost: true}, // a hole
			{ID: 11, First: 10, End: 20, Closed: true},
			{ID: 12, First: 20, End: 30, Closed: true},
			{ID: 13, First: 30, End: 40, Closed: true},
			{ID: 14, First: 40},
		}}
	}
	for _, tc := range []struct {
		through uint64
		gone    []uint64 // ids expired, in order
		first   uint64   // First of the list after
	}{
		{12, []uint64{0, 11, 12}, 30},
		{13, []uint64{0, 11, 12, 13}, 40},
		{11, []uint64{0, 11}, 20},
		{14, nil, 1}, // open: never
		{99, nil, 1}, // unknown
		{0, nil, 1},  // holes are not named
	} {
		cs := list()
		var ids []uint64
		for _, r := range cs.expireThrough(tc.through, nil) {
			ids = append(ids, r.ID)
		}
		if !slices.Equal(ids, tc.gone) || cs.list[0].First != tc.first {
			t.Errorf("through %d: expired %v, list starts at %d; want %v and %d", tc.through, ids, cs.list[0].First, tc.gone, tc.first)
		}
	}
}

// TestPrior: the streamlets a new host completes its dedup window from are
// the earlier ones closed within the window, oldest first, without lost
// ones and holes, and never the new streamlet itself.
func TestPrior(t *testing.T) {
	ttl := int64(10 * time.Second)
	ref := func(id uint64, first, end uint64, closedAt int64, lost bool) role.StreamletRef {
		return role.StreamletRef{ID: id, Host: "h", First: first, End: end, Closed: true, Lost: lost, Expires: closedAt + ttl}
	}
	now := t0.UnixNano()
	sec := int64(time.Second)
	open := role.StreamletRef{ID: 9, Host: "n", First: 40}
	for _, tc := range []struct {
		name   string
		list   []role.StreamletRef
		window time.Duration
		want   []uint64
	}{
		{"first streamlet", []role.StreamletRef{open}, time.Minute, nil},
		{"all within", []role.StreamletRef{ref(1, 0, 10, now-3*sec, false), ref(2, 10, 40, now-sec, false), open}, time.Minute, []uint64{1, 2}},
		{"older than the window", []role.StreamletRef{ref(1, 0, 10, now-5*sec, false), ref(2, 10, 40, now-sec, false), open}, 2 * time.Second, []uint64{2}},
		{"window 0: all retained", []role.StreamletRef{ref(1, 0, 10, now-9*sec, false), open}, 0, []uint64{1}},
		{"lost and holes left out", []role.StreamletRef{ref(1, 0, 10, now-sec, false), ref(0, 10, 20, now-sec, true),
			ref(3, 20, 30, now-sec, true), ref(4, 30, 40, now-sec, false), open}, time.Minute, []uint64{1, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := &chanState{list: tc.list, limits: testLimits()}
			var got []uint64
			for _, r := range cs.prior(now, tc.window) {
				got = append(got, r.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("prior %v, want %v", got, tc.want)
			}
		})
	}
	// At most role.MaxPrior, the newest.
	cs := &chanState{limits: testLimits()}
	for i := range uint64(role.MaxPrior + 10) {
		cs.list = append(cs.list, ref(i+1, i, i+1, now, false))
	}
	cs.list = append(cs.list, open)
	if p := cs.prior(now, time.Minute); len(p) != role.MaxPrior || p[0].ID != 11 || p[len(p)-1].ID != role.MaxPrior+10 {
		t.Fatalf("%d prior, %d..%d", len(p), p[0].ID, p[len(p)-1].ID)
	}
}
