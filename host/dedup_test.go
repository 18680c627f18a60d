package host

import (
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
