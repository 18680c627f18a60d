package host

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
)

// replicaPair hosts streamlet 9 with replica set [a b c] on hosts a
// (orderer) and b (a follower).
func replicaPair(t *testing.T) (a, b *Streamlet) {
	t.Helper()
	clock := func() time.Time { return time.Unix(1_800_000_000, 0) }
	g := role.Grant{Channel: "ch", Epoch: 3, Streamlet: 9, Host: "a", First: 1000, LimitMsgs: 100, LimitSize: 1 << 20,
		LeaseEnd: 1 << 62, Replicas: []string{"a", "b", "c"}}
	ha, hb := New("a", clock), New("b", clock)
	var ordered []*Streamlet
	ha.SetReplicationHooks(func(s *Streamlet) { ordered = append(ordered, s) }, nil)
	for _, h := range []*Host{hb, ha} {
		if err := h.HostStreamlet(g); err != nil {
			t.Fatal(err)
		}
	}
	a, b = ha.Streamlet(9), hb.Streamlet(9)
	if len(ordered) != 1 || ordered[0] != a || !a.Orderer() || b.Orderer() || !a.Replicated() {
		t.Fatalf("orderer hook %v, orderer a %v b %v", ordered, a.Orderer(), b.Orderer())
	}
	return a, b
}

// forward copies a's records [from, to) to b as the orderer's stream does.
func forward(b, a *Streamlet, from, to int, sealed bool) (int, error) {
	commit, _ := a.Durable()
	return b.Replicate("a", 3, from, to-from, commit, sealed, func(i int) ([]byte, bool, int64) {
		p, ext := a.Buf().GetHeldExt(from + i)
		return p, ext, a.Buf().HeldStamp(from + i)
	})
}

func appendN(t *testing.T, s *Streamlet, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := s.Append([]byte(fmt.Sprint(i)), 5); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReplica_VisibleOnlyWhenEveryReplicaHoldsIt: the orderer's appends
// get positions at once but become visible (and durable) only once every
// follower acknowledged them; a follower shows what the orderer's stream
// says every replica holds.
func TestReplica_VisibleOnlyWhenEveryReplicaHoldsIt(t *testing.T) {
	a, b := replicaPair(t)
	appendN(t, a, 5)
	if n, _ := a.Durable(); n != 0 || a.Buf().Written() != 5 {
		t.Fatalf("durable %d written %d after appends, want 0 and 5", n, a.Buf().Written())
	}
	if held, err := forward(b, a, 0, 5, false); err != nil || held != 5 {
		t.Fatalf("forward: held %d, %v", held, err)
	}
	if b.Buf().Len() != 0 {
		t.Fatal("a follower showed records before the orderer said all replicas hold them")
	}
	a.Acked("b", 5)
	if n, _ := a.Durable(); n != 0 {
		t.Fatalf("durable %d with follower c still empty", n)
	}
	a.Acked("c", 3)
	if n, _ := a.Durable(); n != 3 {
		t.Fatalf("durable %d, want 3 (c holds 3)", n)
	}
	if a.Acked("x", 5) {
		t.Fatal("an ack from a non-replica counted")
	}
	if _, err := forward(b, a, 5, 5, false); err != nil || b.Buf().Len() != 3 {
		t.Fatalf("commit notice: follower shows %d, %v; want 3", b.Buf().Len(), err)
	}
}

// TestReplica_FollowerRefusesWhatBreaksTheOrder: a follower takes
// forwarded records only from the orderer, of the streamlet's epoch, in
// order (a resend of records it holds is skipped), and never a gateway's
// append.
func TestReplica_FollowerRefusesWhatBreaksTheOrder(t *testing.T) {
	a, b := replicaPair(t)
	appendN(t, a, 6)
	if _, err := forward(b, a, 0, 4, false); err != nil {
		t.Fatal(err)
	}
	if held, err := forward(b, a, 5, 6, false); !errors.Is(err, ErrOutOfOrder) || held != 4 {
		t.Fatalf("a gap: held %d, %v; want 4, ErrOutOfOrder", held, err)
	}
	if held, err := forward(b, a, 2, 6, false); err != nil || held != 6 || heldBody(b, 5) != "5" {
		t.Fatalf("an overlapping resend: held %d, %v", held, err)
	}
	rec := func(int) ([]byte, bool, int64) { return []byte("x"), false, 1 }
	if _, err := b.Replicate("c", 3, 6, 1, 0, false, rec); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("from a non-orderer: %v", err)
	}
	if _, err := b.Replicate("a", 4, 6, 1, 0, false, rec); !errors.Is(err, ErrEpoch) {
		t.Fatalf("another epoch: %v", err)
	}
	if _, err := b.Append([]byte("direct"), 1); err == nil {
		t.Fatal("a follower took a gateway's append")
	}
}

// TestReplica_SealWaitsForTheFollowers: a sealed orderer refuses appends
// at once, but its buffer (whose seal readers take as final) is sealed
// only once the followers hold everything, and the follower closes on the
// orderer's SEALED notice. Seal answers the end only once it is durable:
// after its bound without the followers, role.ErrNotDurable; once they
// confirm, the end.
func TestReplica_SealWaitsForTheFollowers(t *testing.T) {
	a, b := replicaPair(t)
	appendN(t, a, 3)
	a.h.SetSealWait(time.Millisecond)
	if _, err := a.h.Seal(9); !errors.Is(err, role.ErrNotDurable) {
		t.Fatalf("seal without the followers: %v", err)
	}
	if _, err := a.Append([]byte("late"), 1); err == nil {
		t.Fatal("append after the seal accepted")
	}
	if _, final := a.Durable(); final {
		t.Fatal("final before the followers hold the records")
	}
	_, _ = forward(b, a, 0, 3, false)
	a.Acked("b", 3)
	a.Acked("c", 3)
	if n, final := a.Durable(); n != 3 || !final {
		t.Fatalf("durable %d final %v, want 3 true", n, final)
	}
	if end, err := a.h.Seal(9); err != nil || end != 1003 {
		t.Fatalf("seal once durable: %d, %v", end, err)
	}
	if _, err := forward(b, a, 3, 3, true); err != nil {
		t.Fatal(err)
	}
	if n, final := b.Durable(); n != 3 || !final {
		t.Fatalf("follower after SEALED: %d %v", n, final)
	}
	// A follower is closed by its orderer's stream, not by a seal asked of
	// it: it answers the end once that stream closed it.
	_, b2 := replicaPair(t)
	b2.h.SetSealWait(time.Millisecond)
	if _, err := b2.h.Seal(9); !errors.Is(err, role.ErrNotDurable) || b2.Buf().Sealed() {
		t.Fatalf("follower seal: %v, sealed %v", err, b2.Buf().Sealed())
	}
}

// TestReplica_FenceThenSealAt: a fenced replica takes nothing more;
// SealAt keeps exactly n records, shows them all and seals; it refuses
// more than the replica holds and, once sealed, any other length.
func TestReplica_FenceThenSealAt(t *testing.T) {
	a, b := replicaPair(t)
	appendN(t, a, 6)
	_, _ = forward(b, a, 0, 4, false)
	a.Acked("b", 4)
	a.Acked("c", 2)
	held, final := a.Fence()
	if held != 6 || final {
		t.Fatalf("fence: held %d final %v", held, final)
	}
	if _, err := a.Append([]byte("x"), 1); err == nil {
		t.Fatal("a fenced orderer took an append")
	}
	bh, _ := b.Fence()
	if _, err := forward(b, a, 4, 6, false); !errors.Is(err, ErrFenced) {
		t.Fatalf("forward to a fenced follower: %v", err)
	}
	if err := b.SealAt(5, nil); !errors.Is(err, ErrShortReplica) {
		t.Fatalf("SealAt past what b holds: %v", err)
	}
	keep := []string{"a", "b"}
	for _, s := range []*Streamlet{a, b} {
		if err := s.SealAt(bh, keep); err != nil {
			t.Fatal(err)
		}
		if n, final := s.Durable(); n != 4 || !final || s.Buf().Written() != 4 {
			t.Fatalf("after SealAt(4): durable %d final %v written %d", n, final, s.Buf().Written())
		}
	}
	if err := a.SealAt(4, keep); err != nil {
		t.Fatalf("the same SealAt again: %v", err)
	}
	if err := a.SealAt(3, keep); !errors.Is(err, ErrSealedElsewhere) {
		t.Fatalf("another length after SealAt: %v", err)
	}
	if hs, _ := a.h.List("ch"); len(hs) != 1 || !hs[0].Final || !hs[0].Fenced || hs[0].Len != 4 || len(hs[0].Replicas) != 2 {
		t.Fatalf("report after recovery %+v", hs)
	}
}

func heldBody(s *Streamlet, i int) string { p, _ := s.Buf().GetHeldExt(i); return string(p) }
