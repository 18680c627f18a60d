package host

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/meta"
	"github.com/sluice-rtm/sluice/role"
)

// TestApply_FreesWhatTheListsTakeAway: a committed change frees this
// host's streamlet when it is lost, expired, left out by its close (a
// recovery kept the other replicas), or removed from its set by the
// command (HOLDERS' Remove, NODE_GONE of this node); a change that leaves
// the host out of a set for another reason keeps it: it may be a copy
// whose HOLDERS commits next (nemesis seed 5 of ci-5n-r3-combined: the
// NODE_GONE of a restarted node c freed a's copy, listed by the HOLDERS
// that followed; replays stopped there).
func TestApply_FreesWhatTheListsTakeAway(t *testing.T) {
	closed := func(id uint64, set ...string) role.StreamletRef {
		return role.StreamletRef{ID: id, Host: set[0], Replicas: set, First: 1, End: 1, Closed: true}
	}
	lost := closed(1, "b")
	lost.Lost = true
	for _, tc := range []struct {
		name string
		c    meta.Change
		kept bool
	}{
		{"close leaving it out", meta.Change{Kind: meta.KindClose, Closed: []role.StreamletRef{closed(1, "b")}}, false},
		{"open's tail leaving it out", meta.Change{Kind: meta.KindOpen, Closed: []role.StreamletRef{closed(1, "b")}}, false},
		{"close keeping it", meta.Change{Kind: meta.KindClose, Closed: []role.StreamletRef{closed(1, "b", "h")}}, true},
		{"lost", meta.Change{Kind: meta.KindNodeGone, Closed: []role.StreamletRef{lost}, Removed: []string{"b"}}, false},
		{"expired", meta.Change{Kind: meta.KindExpire, Freed: []role.StreamletRef{closed(1, "h")}}, false},
		{"holders removing it", meta.Change{Kind: meta.KindHolders, Closed: []role.StreamletRef{closed(1, "b")}, Removed: []string{"h"}}, false},
		{"node gone: this node", meta.Change{Kind: meta.KindNodeGone, Closed: []role.StreamletRef{closed(1, "b")}, Removed: []string{"h"}}, false},
		{"holders adding another", meta.Change{Kind: meta.KindHolders, Closed: []role.StreamletRef{closed(1, "e", "b")}}, true},
		{"node gone: another node", meta.Change{Kind: meta.KindNodeGone, Closed: []role.StreamletRef{closed(1, "b")}, Removed: []string{"c"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New("h", time.Now)
			g := role.Grant{Channel: "ch", Streamlet: 1, First: 1, LimitMsgs: 10, LimitSize: 1 << 20, LeaseEnd: 1 << 62}
			if err := h.HostStreamlet(g); err != nil {
				t.Fatal(err)
			}
			if _, err := h.Seal(1); err != nil {
				t.Fatal(err)
			}
			freed := h.Apply(tc.c)
			if kept := h.Streamlet(1) != nil; kept != tc.kept {
				t.Fatalf("kept %v, want %v", kept, tc.kept)
			}
			if want := !tc.kept; slices.Equal(freed, []uint64{1}) != want {
				t.Fatalf("Apply reported freed %v", freed)
			}
		})
	}
}

// TestApply_SealsAFollowerAtTheCommittedEnd: the committed close ends a
// follower's replica that holds exactly the committed records, though its
// orderer's SEALED notice never came (nemesis seed 5: a follower cut off
// one-way from its orderer stayed unsealed as the only listed holder;
// copies from it never completed, replays announced its range lost); one
// that holds more is cut back to the end.
func TestApply_SealsAFollowerAtTheCommittedEnd(t *testing.T) {
	for _, held := range []int{3, 5} {
		h := New("h", time.Now)
		g := role.Grant{Channel: "ch", Epoch: 1, Streamlet: 1, First: 10, LimitMsgs: 10, LimitSize: 1 << 20, LeaseEnd: 1 << 62,
			Replicas: []string{"b", "h"}}
		if err := h.HostStreamlet(g); err != nil {
			t.Fatal(err)
		}
		s := h.Streamlet(1)
		rec := func(int) ([]byte, bool, int64) { return []byte("r"), false, 1 }
		if _, err := s.Replicate("b", 1, 0, held, 3, false, rec); err != nil {
			t.Fatal(err)
		}
		ref := role.StreamletRef{ID: 1, Host: "b", Replicas: []string{"b", "h"}, First: 10, End: 13, Closed: true}
		if freed := h.Apply(meta.Change{Kind: meta.KindClose, Closed: []role.StreamletRef{ref}}); len(freed) != 0 {
			t.Fatalf("held %d: freed %v", held, freed)
		}
		if !s.Buf().Sealed() || s.Buf().Len() != 3 {
			t.Fatalf("held %d: sealed %v with %d records, want sealed with 3", held, s.Buf().Sealed(), s.Buf().Len())
		}
	}
}
