package cluster

import (
	"testing"
	"time"
)

func TestHasQuorum(t *testing.T) {
	for _, tc := range []struct {
		alive, known int
		want         bool
	}{
		{1, 1, true}, {2, 3, true}, {1, 3, false}, {1, 2, false}, {2, 2, true},
		{3, 5, true}, {2, 5, false}, {2, 4, false}, {3, 4, true},
	} {
		if got := hasQuorum(tc.alive, tc.known); got != tc.want {
			t.Errorf("hasQuorum(%d, %d) = %v, want %v", tc.alive, tc.known, got, tc.want)
		}
	}
}

func TestUpdateKnown(t *testing.T) {
	const s = int64(time.Second)
	known := map[string]int64{}
	if n := updateKnown(known, []string{"a", "b", "c"}, nil, 10*s, time.Minute); n != 3 {
		t.Fatalf("three alive: %d known", n)
	}
	// c is cut off: still known for a minute after it was last seen.
	if n := updateKnown(known, []string{"a", "b"}, nil, 60*s, time.Minute); n != 3 {
		t.Fatalf("c unseen for 50 s: %d known, want 3", n)
	}
	if n := updateKnown(known, []string{"a", "b"}, nil, 71*s, time.Minute); n != 2 {
		t.Fatalf("c unseen for 61 s: %d known, want 2", n)
	}
	// b leaves gracefully: forgotten at once.
	if n := updateKnown(known, []string{"a"}, []string{"b"}, 72*s, time.Minute); n != 1 {
		t.Fatalf("b left: %d known, want 1", n)
	}
	// A node without quorum forgets nobody (forget = forever).
	known = map[string]int64{}
	updateKnown(known, []string{"a", "b", "c"}, nil, 0, time.Minute)
	if n := updateKnown(known, []string{"c"}, nil, 3600*s, 1<<62); n != 3 || hasQuorum(1, n) {
		t.Fatalf("cut-off node: %d known, quorum %v", n, hasQuorum(1, n))
	}
}

func TestHeartbeatPaused(t *testing.T) {
	const s = int64(time.Second)
	for _, tc := range []struct {
		now, last int64
		want      bool
	}{{10 * s, 0, false}, {10 * s, 9 * s, false}, {10 * s, 8*s + s/2, true}, {10 * s, 2 * s, true}} {
		if got := heartbeatPaused(tc.now, tc.last, time.Second); got != tc.want {
			t.Errorf("heartbeatPaused(%d, %d) = %v, want %v", tc.now, tc.last, got, tc.want)
		}
	}
}

func TestClientsAway(t *testing.T) {
	const s = int64(time.Second)
	for _, tc := range []struct {
		now, since int64
		want       bool
	}{{10 * s, 0, false}, {10 * s, 9 * s, false}, {10 * s, 8 * s, true}, {10 * s, 1 * s, true}} {
		if got := clientsAway(tc.now, tc.since, 2*time.Second); got != tc.want {
			t.Errorf("clientsAway(%d, %d) = %v, want %v", tc.now, tc.since, got, tc.want)
		}
	}
}
