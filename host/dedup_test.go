package host

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

func extRec(id, payload string) []byte {
	return wire.AppendExt(nil, []byte(id), nil, []byte(payload))
}

func hostOne(t *testing.T, h *Host, first uint64, msgs int) *Streamlet {
	t.Helper()
	g := role.Grant{Channel: "c", Epoch: 1, Streamlet: h.NewID(), First: first, LimitMsgs: msgs, LimitSize: 1 << 20, LeaseEnd: 1 << 62}
	if err := h.HostStreamlet(g); err != nil {
		t.Fatal(err)
	}
	return h.Streamlet(g.Streamlet)
}

// appendAll appends recs (all extended) and returns positions and dups.
func appendAll(s *Streamlet, now int64, recs ...[]byte) ([]uint64, []bool, int) {
	ext := make([]bool, len(recs))
	for i := range ext {
		ext[i] = true
	}
	pos, dup := make([]uint64, len(recs)), make([]bool, len(recs))
	n := s.AppendBatchExt(recs, ext, pos, dup, now)
	return pos, dup, n
}

func TestDedupSameStreamlet(t *testing.T) {
	h := New("h", time.Now)
	h.SetDedup(time.Minute, 100)
	s := hostOne(t, h, 1, 100)
	now := time.Now().UnixNano()
	pos, dup, n := appendAll(s, now, extRec("a", "1"), extRec("b", "2"), extRec("a", "again"))
	if n != 3 || pos[0] != 1 || pos[1] != 2 || pos[2] != 1 || dup[0] || dup[1] || !dup[2] {
		t.Fatalf("pos %v dup %v n %d", pos, dup, n)
	}
	if s.Buf().Len() != 2 {
		t.Fatalf("stored %d, want 2", s.Buf().Len())
	}
	// Plain records and records without an id are never deduplicated.
	plain := s.AppendBatch([][]byte{[]byte("x"), []byte("x")}, make([]uint64, 2), now)
	hdrOnly := wire.AppendExt(nil, nil, []wire.HeaderField{{Key: "k", Value: "v"}}, []byte("p"))
	pos, dup, _ = appendAll(s, now, hdrOnly, hdrOnly)
	if plain != 2 || dup[0] || dup[1] || pos[0] != 5 || pos[1] != 6 {
		t.Fatalf("plain %d pos %v dup %v", plain, pos, dup)
	}
	// Past the window the id is new again.
	pos, dup, _ = appendAll(s, now+int64(time.Minute), extRec("a", "later"))
	if dup[0] || pos[0] != 7 {
		t.Fatalf("after the window: pos %v dup %v", pos, dup)
	}
	if st := h.Dedup(); st.Duplicates != 1 || st.Windows != 1 || st.Rebuilds != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The stored extended record keeps its id and flag.
	body, ext := s.Buf().GetExt(0)
	if e, err := wire.ParseExt(body, wire.TypeData); !ext || err != nil || string(e.MsgID) != "a" || string(e.Payload) != "1" {
		t.Fatalf("stored record %q %v %v", body, ext, err)
	}
}

// TestDedupRollover: the next streamlet on the same host continues the
// window without a rebuild; a streamlet after a hole (written elsewhere)
// rebuilds it from the retained records.
func TestDedupRollover(t *testing.T) {
	h := New("h", time.Now)
	now := time.Now().UnixNano()
	s1 := hostOne(t, h, 1, 2)
	if _, _, n := appendAll(s1, now, extRec("a", "1"), extRec("b", "2")); n != 2 {
		t.Fatal(n)
	}
	if _, _, n := appendAll(s1, now, extRec("c", "3")); n != 0 || !s1.Buf().Sealed() {
		t.Fatalf("full streamlet took %d", n)
	}
	s2 := hostOne(t, h, 3, 10)
	pos, dup, n := appendAll(s2, now, extRec("c", "3"), extRec("a", "dup"))
	if n != 2 || pos[0] != 3 || dup[0] || pos[1] != 1 || !dup[1] {
		t.Fatalf("after rollover: pos %v dup %v n %d", pos, dup, n)
	}
	if st := h.Dedup(); st.Rebuilds != 1 || st.Partial != 0 {
		t.Fatalf("rollover rebuilt: %+v", st)
	}
	// A streamlet that starts after positions this host never held (they
	// were on another host): the window is rebuilt from what is here.
	h.Free(s2.ID())
	s2.Buf().Len()
	s4 := hostOne(t, h, 20, 10)
	pos, dup, _ = appendAll(s4, now, extRec("b", "dup"), extRec("c", "3 was freed"))
	if !dup[0] || pos[0] != 2 || dup[1] {
		t.Fatalf("after a hole: pos %v dup %v", pos, dup)
	}
	if st := h.Dedup(); st.Rebuilds != 2 || st.Partial != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The window goes with the channel's last streamlet.
	h.Free(s1.ID())
	h.Free(s4.ID())
	if st := h.Dedup(); st.Windows != 0 {
		t.Fatalf("windows %d", st.Windows)
	}
}

// TestDedupConcurrentReaders runs appends with ids against readers and a
// rebuild scanning the sealed predecessor, under -race.
func TestDedupConcurrentReaders(t *testing.T) {
	h := New("h", time.Now)
	s1 := hostOne(t, h, 1, 1000)
	now := time.Now().UnixNano()
	for i := range 1000 {
		appendAll(s1, now, extRec(string(rune('a'+i%26))+string(rune(i)), "p"))
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 100 {
			if s1.Buf().Acquire() {
				_, _, _ = s1.Buf().AppendRun(nil, 0, 1000, 1<<20)
				s1.Buf().Release()
			}
		}
	}()
	s2 := hostOne(t, h, 2000, 100) // a hole: rebuild scans s1
	_, dup, _ := appendAll(s2, now, extRec("a"+string(rune(0)), "dup"))
	wg.Wait()
	if !dup[0] {
		t.Fatal("id of the predecessor not found")
	}
}

// nodes is an IDSource over in-process hosts (as package cluster's is over
// the node links), paging with a small limit; fail makes a node not answer.
type nodes struct {
	hosts map[string]*Host
	limit int
	fail  map[string]bool
	calls int
}

func (n *nodes) MessageIDs(node string, streamlets []uint64, from int, since int64, deadline time.Time) (IDPage, error) {
	n.calls++
	if n.fail[node] || n.hosts[node] == nil {
		return IDPage{}, errors.New("unreachable")
	}
	return n.hosts[node].MessageIDs(streamlets, from, since, n.limit), nil
}

// hostAt hosts a streamlet of channel "c" at first with the given prior list.
func hostAt(t *testing.T, h *Host, first uint64, msgs int, prior ...role.StreamletRef) *Streamlet {
	t.Helper()
	g := role.Grant{Channel: "c", Epoch: 1, Streamlet: h.NewID(), Host: h.Node(), First: first, LimitMsgs: msgs,
		LimitSize: 1 << 20, LeaseEnd: 1 << 62, Prior: prior}
	if err := h.HostStreamlet(g); err != nil {
		t.Fatal(err)
	}
	return h.Streamlet(g.Streamlet)
}

// fill appends extended records with ids (or plain ones for "") until s
// is full, and returns its reference for a prior list.
func fill(t *testing.T, s *Streamlet, now int64, ids ...string) role.StreamletRef {
	t.Helper()
	for _, id := range ids {
		rec, ext := []byte("plain"), false
		if id != "" {
			rec, ext = extRec(id, "p-"+id), true
		}
		if _, err := s.AppendExt(rec, ext, now); err != nil {
			t.Fatal(err)
		}
	}
	end, _ := s.seal(time.Second)
	return role.StreamletRef{ID: s.ID(), Host: s.h.Node(), First: s.First(), End: end, Closed: true}
}

// TestDedupWindowFromOtherNodes: a host's new streamlet completes the
// channel's window from the earlier streamlets named in its grant, on
// other nodes (read page by page) and here, before its first append; an
// extension reads only what came after the window's end; what cannot be
// read is counted as partial and the rest still works.
func TestDedupWindowFromOtherNodes(t *testing.T) {
	now := time.Now().UnixNano()
	a, b := New("a", time.Now), New("b", time.Now)
	src := &nodes{hosts: map[string]*Host{"a": a, "b": b}, limit: 40, fail: map[string]bool{}}
	a.SetIDSource(src, time.Second)
	b.SetIDSource(src, time.Second)

	// a holds [1, 11): ids x0..x7 and two plain records.
	r1 := fill(t, hostAt(t, a, 1, 10), now, "x0", "", "x1", "x2", "x3", "", "x4", "x5", "x6", "x7")
	// b's streamlet [11, 21) is written after it: the window comes from a.
	s2 := hostAt(t, b, 11, 10, r1)
	if got := b.Dedup(); got.Fetched != 8 || got.Partial != 0 || got.Rebuilds != 1 {
		t.Fatalf("b after hosting: %+v", got)
	}
	if src.calls < 3 {
		t.Fatalf("%d calls: the 40-byte pages were not used", src.calls)
	}
	pos, dup, n := appendAll(s2, now, extRec("x4", "again"), extRec("y0", "new"), extRec("x0", "again"))
	if n != 3 || !dup[0] || pos[0] != 7 || dup[1] || pos[1] != 11 || !dup[2] || pos[2] != 1 {
		t.Fatalf("on b: pos %v dup %v n %d", pos, dup, n)
	}
	r2 := fill(t, s2, now, "y1")
	// a's next streamlet [13, ...): a's window saw up to 11 (x's), b's
	// streamlet is read from its record 0 on; nothing of a's is read again.
	src.calls = 0
	s3 := hostAt(t, a, r2.End, 10, r1, r2)
	if got := a.Dedup(); got.Fetched != 2 || got.Partial != 0 {
		t.Fatalf("a after extending: %+v", got)
	}
	pos, dup, _ = appendAll(s3, now, extRec("y1", "again"), extRec("x7", "again"), extRec("z", "new"))
	if !dup[0] || pos[0] != 12 || !dup[1] || pos[1] != 10 || dup[2] || pos[2] != r2.End {
		t.Fatalf("on a: pos %v dup %v", pos, dup)
	}

	// A third host whose predecessor's host does not answer: the window
	// lacks those ids (partial), the streamlet still takes writes, and the
	// ids from the hosts that answered are there.
	c := New("c", time.Now)
	src.hosts["c"] = c
	c.SetIDSource(src, time.Second)
	src.fail["a"] = true
	s4 := hostAt(t, c, 100, 10, r1, r2)
	if got := c.Dedup(); got.Partial != 1 || got.Fetched != 2 {
		t.Fatalf("c: %+v", got)
	}
	pos, dup, _ = appendAll(s4, now, extRec("y0", "again"), extRec("x1", "not known here"))
	if !dup[0] || pos[0] != 11 || dup[1] || pos[1] != 100 {
		t.Fatalf("on c: pos %v dup %v", pos, dup)
	}
}

// TestMessageIDsPages: a host's pages of ids cover every id of the asked
// streamlets from the asked record on, stamped within the window, exactly
// once, whatever the page size; unknown streamlets count as read.
func TestMessageIDsPages(t *testing.T) {
	h := New("a", time.Now)
	base := time.Now().UnixNano()
	s1 := hostAt(t, h, 1, 50)
	for i := range 50 {
		if _, err := s1.AppendExt(extRec(fmt.Sprint("a", i), "p"), true, base+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	s2 := hostAt(t, h, 51, 50)
	for i := range 30 {
		rec, ext := extRec(fmt.Sprint("b", i), "p"), i%3 != 0
		if !ext {
			rec = []byte("plain")
		}
		if _, err := s2.AppendExt(rec, ext, base+100+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	ids := []uint64{s1.ID(), 999, s2.ID()}
	for _, tc := range []struct {
		from  int
		since int64
		limit int
		want  int
	}{
		{0, 0, 0, 50 + 20},
		{10, 0, 1, 40 + 20},
		{0, base + 45, 64, 5 + 20},
		{0, base + 115, 100, 10},
		{0, base + 1000, 0, 0},
	} {
		seen := map[string]bool{}
		k, from, pages := 0, tc.from, 0
		for k < len(ids) {
			pg := h.MessageIDs(ids[k:], from, tc.since, tc.limit)
			pages++
			for _, x := range pg.IDs {
				if seen[string(x.ID)] {
					t.Fatalf("%+v: %s twice", tc, x.ID)
				}
				seen[string(x.ID)] = true
			}
			if pg.Done == 0 && pg.Next <= from && len(pg.IDs) == 0 {
				t.Fatalf("%+v: no progress", tc)
			}
			if k += pg.Done; pg.Done > 0 {
				from = 0
			}
			if k < len(ids) {
				from = pg.Next
			}
		}
		if len(seen) != tc.want {
			t.Fatalf("%+v: %d ids in %d pages, want %d", tc, len(seen), pages, tc.want)
		}
	}
}

// TestDedupForgetsWhatRecoveryDropped: an orderer's window holds the ids
// of records it appended that recovery then dropped (never held by every
// replica): afterwards they are new messages, and a later streamlet of
// the channel on that host learns the ids that another host stored at
// those positions. Before, a retry of a dropped id was answered as a
// duplicate at a position that held another message, and the other
// host's ids at those positions were never read.
func TestDedupForgetsWhatRecoveryDropped(t *testing.T) {
	now := time.Now().UnixNano()
	a, b := New("a", time.Now), New("b", time.Now)
	src := &nodes{hosts: map[string]*Host{"a": a, "b": b}, fail: map[string]bool{}}
	a.SetIDSource(src, time.Second)
	b.SetIDSource(src, time.Second)
	g := role.Grant{Channel: "c", Epoch: 1, Streamlet: a.NewID(), Host: "a", First: 1, LimitMsgs: 10,
		LimitSize: 1 << 20, LeaseEnd: 1 << 62, Replicas: []string{"a", "f"}}
	if err := a.HostStreamlet(g); err != nil {
		t.Fatal(err)
	}
	s1 := a.Streamlet(g.Streamlet)
	if _, _, n := appendAll(s1, now, extRec("x1", "1"), extRec("x2", "2"), extRec("x3", "3"), extRec("x4", "4")); n != 4 {
		t.Fatalf("appended %d", n)
	}
	// The follower f holds two, then dies: recovery keeps [1, 3).
	s1.Acked("f", 2)
	s1.Fence()
	if err := s1.SealAt(2, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	r1 := role.StreamletRef{ID: s1.ID(), Host: "a", First: 1, End: 3, Closed: true, Replicas: []string{"a"}}
	// The channel continues on b at 3: other messages take 3 and 4.
	s2 := hostAt(t, b, 3, 2, r1)
	r2 := fill(t, s2, now, "y3", "y4")
	// Later it comes back to a.
	s3 := hostAt(t, a, 5, 10, r1, r2)
	pos, dup, _ := appendAll(s3, now, extRec("x3", "retry"), extRec("y4", "again"), extRec("x1", "again"))
	if dup[0] || pos[0] != 5 {
		t.Errorf("a retry of dropped x3: position %d duplicate %v, want a new message at 5", pos[0], dup[0])
	}
	if !dup[1] || pos[1] != 4 {
		t.Errorf("y4, stored at 4 on b: position %d duplicate %v, want a duplicate of 4", pos[1], dup[1])
	}
	if !dup[2] || pos[2] != 1 {
		t.Errorf("x1, kept at 1: position %d duplicate %v, want a duplicate of 1", pos[2], dup[2])
	}
}
