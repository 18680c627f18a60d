package manager

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
)

// TestTombs: a tombstone is taken once; a second burial of a name replaces
// the first; past maxTombs the oldest goes, but not a name that was taken
// and buried again since its first slot (its stale slot must not evict it).
func TestTombs(t *testing.T) {
	var ts tombs
	ts.bury("a", 1, 10)
	ts.bury("a", 1, 12)
	if e, n, ok := ts.take("a"); !ok || e != 1 || n != 12 {
		t.Fatalf("take a = %d %d %v, want 1 12 true", e, n, ok)
	}
	if _, _, ok := ts.take("a"); ok {
		t.Fatal("a tombstone was taken twice")
	}
	ts.bury("first", 2, 20)         // slot 0
	ts.bury("again", 3, 30)         // slot 1
	ts.take("again")                // recreated...
	for i := 3; i < maxTombs; i++ { // slots 2.. (slot 0 of "a" was taken)
		ts.bury(fmt.Sprint("x", i), 4, uint64(i))
	}
	ts.bury("again", 3, 31) // ...and dropped again: slot maxTombs-1+? (a new one)
	if ts.len() != maxTombs-1 {
		t.Fatalf("%d tombstones, want %d", ts.len(), maxTombs-1)
	}
	ts.bury("y1", 5, 1) // the ring is full: evicts slot 0 ("a", already taken)
	ts.bury("y2", 5, 2) // evicts slot 1: the stale slot of "again"
	if _, _, ok := ts.take("first"); ok {
		t.Fatal("the oldest tombstone survived a full ring")
	}
	if e, n, ok := ts.take("again"); !ok || e != 3 || n != 31 {
		t.Fatalf("a re-buried tombstone was evicted by its stale slot: %d %d %v", e, n, ok)
	}
	if _, _, ok := ts.take("y2"); !ok {
		t.Fatal("the newest tombstone is missing")
	}
	if len(ts.ring) != maxTombs {
		t.Fatalf("ring of %d, want %d", len(ts.ring), maxTombs)
	}
}

// TestDroppedChannelsGiveBackTheirMemory: channels dropped after their
// history expired leave a tombstone each (positions and epoch continue
// when one comes back) and the manager's maps shrink with them.
func TestDroppedChannelsGiveBackTheirMemory(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	h := host.New("n", clock)
	m := New(testConfig(h, clock))
	// n channels of one shard (mapshrink copies maps that held MinPeak+).
	const n = 2048
	var names []string
	for i := 0; len(names) < n; i++ {
		if name := fmt.Sprint("c", i); m.shard(name) == 0 {
			names = append(names, name)
		}
	}
	first := map[string]uint64{}
	for _, name := range names {
		g, err := m.WriteGrant(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		first[name] = g.First
	}
	orig := reflect.ValueOf(m.shards[0].m).UnsafePointer()
	for range 3 { // seal at the lease's end, free at the TTL, drop a TTL of disuse later
		now = now.Add(2 * time.Minute)
		m.Do(m.Tick(now))
	}
	if got := m.Channels(); got != 0 {
		t.Fatalf("%d channels left", got)
	}
	if got := m.tombs.len(); got != n {
		t.Fatalf("%d tombstones, want %d", got, n)
	}
	if reflect.ValueOf(m.shards[0].m).UnsafePointer() == orig {
		t.Fatal("the emptied shard map was kept")
	}
	back := names[7]
	g, err := m.WriteGrant(back, 0)
	if err != nil {
		t.Fatal(err)
	}
	if g.First != first[back] || m.tombs.len() != n-1 {
		t.Fatalf("recreated %s starts at %d, want %d (its tombstone); %d tombstones", back, g.First, first[back], m.tombs.len())
	}
}
