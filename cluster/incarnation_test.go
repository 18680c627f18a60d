package cluster

import (
	"slices"
	"testing"
	"time"
)

// TestIncarnationChanges: a restart (another incarnation gossiped) is
// recorded at once; an unreachable node with its incarnation unchanged is
// taken out of the lists only after NodeGoneAfter (nemesis seed 38 of
// ci-3n-r2: a node isolated for 9 s was taken out after 2 s, and the
// streamlets only it held were announced lost though it came back with
// them).
func TestIncarnationChanges(t *testing.T) {
	rec := map[string]string{"a": "a1", "b": "b1", "c": "c1", "d": "d1"}
	live := map[string]string{"a": "a1", "b": "b2", "e": "e1", "f": ""}
	dead := map[string]time.Duration{"c": 9 * time.Second, "d": 61 * time.Second}
	deadFor := func(n string) time.Duration { return dead[n] }
	got := incarnationChanges(rec, live, deadFor, time.Minute)
	want := []incarnationChange{{"b", "b2"}, {"d", ""}, {"e", "e1"}}
	if !slices.Equal(got, want) {
		t.Fatalf("changes %v, want %v (c is cut off for less than the bound: kept; f has not gossiped an incarnation)", got, want)
	}
}

// TestGoneAfter: the bound defaults to a minute, follows NodeGoneAfter,
// and is never under two Raft timeouts (a leader change must not take a
// node out).
func TestGoneAfter(t *testing.T) {
	for _, tc := range []struct {
		set, raft, want time.Duration
	}{
		{0, 0, time.Minute},
		{5 * time.Second, 0, 5 * time.Second},
		{time.Second, 3 * time.Second, 6 * time.Second},
	} {
		c := &Cluster{opts: Options{NodeGoneAfter: tc.set, RaftTimeout: tc.raft}}
		if got := c.goneAfter(); got != tc.want {
			t.Errorf("NodeGoneAfter %v, RaftTimeout %v: goneAfter %v, want %v", tc.set, tc.raft, got, tc.want)
		}
	}
}
