package host

import (
	"fmt"
	"testing"
	"time"
)

// TestClaim: a node holds one first-streamlet claim per channel: the
// first asker's, repeated (also with another host) by the same id, taken
// over only by an asker that names it as over, and given up when it
// expires.
func TestClaim(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h := New("h", func() time.Time { return now })
	type step struct {
		name     string
		ch       string
		id       uint64
		node     string
		over     uint64
		advance  time.Duration
		wantID   uint64
		wantNode string
	}
	for _, s := range []step{
		{"first asker holds it", "c", 7, "a", 0, 0, 7, "a"},
		{"another id is refused", "c", 8, "b", 0, 0, 7, "a"},
		{"another id over a wrong claim is refused", "c", 8, "b", 6, 0, 7, "a"},
		{"the same id again, on another host", "c", 7, "b", 0, 0, 7, "b"},
		{"another channel is apart", "d", 9, "a", 0, 0, 9, "a"},
		{"over the held claim takes it", "c", 8, "c", 7, 0, 8, "c"},
		{"the replaced id is refused", "c", 7, "a", 0, 0, 8, "c"},
		{"held until claimKeep", "c", 10, "a", 0, claimKeep - time.Nanosecond, 8, "c"},
		{"expired then", "c", 10, "a", 0, time.Nanosecond, 10, "a"},
	} {
		now = now.Add(s.advance)
		id, node := h.Claim(s.ch, s.id, s.node, s.over)
		if id != s.wantID || node != s.wantNode {
			t.Fatalf("%s: Claim(%s, %d, %s, %d) = %d %s, want %d %s", s.name, s.ch, s.id, s.node, s.over, id, node, s.wantID, s.wantNode)
		}
	}
}

// TestClaim_Bounded: at most maxClaims are held, the oldest evicted first.
func TestClaim_Bounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h := New("h", func() time.Time { return now })
	for i := 0; i <= maxClaims; i++ {
		h.Claim(fmt.Sprint("c", i), uint64(i+1), "a", 0)
	}
	if n := len(h.claims.m); n != maxClaims || len(h.claims.order) != maxClaims {
		t.Fatalf("%d claims held (%d in order), want %d", n, len(h.claims.order), maxClaims)
	}
	if id, _ := h.Claim("c0", 99, "a", 0); id != 99 {
		t.Fatalf("the oldest claim was kept: %d", id)
	}
	// c0 came back and evicted c1; c2 is held still.
	if id, _ := h.Claim("c2", 99, "a", 0); id != 3 {
		t.Fatalf("a newer claim was lost: %d", id)
	}
}
