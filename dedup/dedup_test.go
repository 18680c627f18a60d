package dedup

import (
	"fmt"
	"testing"
	"time"
)

const sec = int64(time.Second)

func TestWindow(t *testing.T) {
	type op struct {
		add    bool
		id     string
		pos    uint64 // add: the position; lookup: the wanted one (0 = not found)
		now    int64
		length int // Len after the op plus 1; 0 = not checked
	}
	for _, tc := range []struct {
		name   string
		window time.Duration
		maxIDs int
		ops    []op
	}{
		{"found within the window", 2 * time.Minute, 10, []op{
			{add: true, id: "a", pos: 1, now: 0, length: 2},
			{id: "a", pos: 1, now: 119 * sec, length: 2},
			{id: "b", pos: 0, now: 119 * sec, length: 2},
		}},
		{"gone at the window's end", 2 * time.Minute, 10, []op{
			{add: true, id: "a", pos: 1, now: 0},
			{add: true, id: "b", pos: 2, now: 60 * sec},
			{id: "a", pos: 0, now: 120 * sec},
			{id: "b", pos: 2, now: 120 * sec},
			{id: "b", pos: 0, now: 180 * sec},
		}},
		{"oldest forgotten past maxIDs", time.Hour, 4, []op{
			{add: true, id: "a", pos: 1, now: 1},
			{add: true, id: "b", pos: 2, now: 2},
			{add: true, id: "c", pos: 3, now: 3, length: 4},
			{add: true, id: "d", pos: 4, now: 4, length: 5},
			{add: true, id: "e", pos: 5, now: 5, length: 4},
			{id: "a", pos: 0, now: 6},
			{id: "b", pos: 0, now: 6},
			{id: "c", pos: 3, now: 6},
			{id: "e", pos: 5, now: 6},
		}},
		{"ids are bytes, compared exactly", time.Hour, 10, []op{
			{add: true, id: "a", pos: 1, now: 1},
			{id: "A", pos: 0, now: 2},
			{id: "a\x00", pos: 0, now: 2},
			{id: "a", pos: 1, now: 2},
		}},
		{"re-added id moves", time.Hour, 10, []op{
			{add: true, id: "a", pos: 1, now: 1},
			{add: true, id: "a", pos: 5, now: 2},
			{id: "a", pos: 5, now: 3},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := New(tc.window, tc.maxIDs)
			for i, o := range tc.ops {
				if o.add {
					w.Add([]byte(o.id), o.pos, o.now)
				} else if pos, ok := w.Lookup([]byte(o.id), o.now); pos != o.pos || ok != (o.pos != 0) {
					t.Fatalf("op %d: Lookup(%q) = %d %v, want %d", i, o.id, pos, ok, o.pos)
				}
				if o.length != 0 && w.Len() != o.length-1 {
					t.Fatalf("op %d: Len %d, want %d", i, w.Len(), o.length-1)
				}
			}
		})
	}
}

// TestBounded: memory stays within maxIDs however many ids come, and the
// newest maxIDs/2 at least are remembered.
func TestBounded(t *testing.T) {
	w := New(time.Hour, 1000)
	for i := range 100_000 {
		w.Add(fmt.Appendf(nil, "id-%d", i), uint64(i+1), int64(i))
		if w.Len() > 1000 || len(w.cur) > 500 || len(w.prev) > 500 {
			t.Fatalf("after %d: %d ids (%d + %d)", i, w.Len(), len(w.cur), len(w.prev))
		}
	}
	for i := 99_500; i < 100_000; i++ {
		if pos, ok := w.Lookup(fmt.Appendf(nil, "id-%d", i), 100_000); !ok || pos != uint64(i+1) {
			t.Fatalf("id-%d: %d %v", i, pos, ok)
		}
	}
	if _, ok := w.Lookup([]byte("id-98999"), 100_000); ok {
		t.Fatal("id-98999 should be forgotten")
	}
	if w.Through() != 100_000 {
		t.Fatalf("Through %d", w.Through())
	}
	if added, dups := w.Stats(); added != 100_000 || dups != 500 {
		t.Fatalf("stats %d %d", added, dups)
	}
}

// TestGenerationsByAge: a generation older than the window is dropped on
// the next Add, so expired ids do not stay counted for long.
func TestGenerationsByAge(t *testing.T) {
	w := New(time.Minute, 1000)
	w.Add([]byte("a"), 1, 0)
	w.Add([]byte("b"), 2, int64(time.Minute)) // rotates: a is in prev
	if _, ok := w.Lookup([]byte("a"), int64(time.Minute)); ok {
		t.Fatal("a is past the window")
	}
	w.Add([]byte("c"), 3, 2*int64(time.Minute)) // rotates again: a is gone
	if w.Len() != 2 {
		t.Fatalf("Len %d, want 2 (b and c)", w.Len())
	}
	if pos, ok := w.Lookup([]byte("c"), 2*int64(time.Minute)+1); !ok || pos != 3 {
		t.Fatal("c")
	}
}

func TestNoAllocs(t *testing.T) {
	w := New(time.Minute, 1024)
	ids := make([][]byte, 4096)
	for i := range ids {
		ids[i] = fmt.Appendf(nil, "producer-%08d", i)
	}
	for i, id := range ids { // reach steady size
		w.Add(id, uint64(i+1), int64(i))
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		id := ids[i%len(ids)]
		if _, ok := w.Lookup(id, int64(4096+i)); !ok {
			w.Add(id, uint64(4097+i), int64(4096+i))
		}
		i++
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per lookup+add", allocs)
	}
}

func BenchmarkLookupAdd(b *testing.B) {
	w := New(time.Minute, DefaultMaxIDs)
	id := make([]byte, 20)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		id[12], id[13], id[14], id[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		if _, ok := w.Lookup(id, int64(i)); !ok {
			w.Add(id, uint64(i+1), int64(i))
		}
	}
}

// TestFiltersGrow: the generations' Bloom filters grow with them and never
// hide an id: every id of the current and the previous generation is found
// after many doublings, and most unknown ids are turned away by the
// filters alone (a false positive only costs the map probes).
func TestFiltersGrow(t *testing.T) {
	w := New(time.Hour, 100_000)
	const n = 80_000 // fills cur (50,000), rotates, 30,000 more
	for i := range n {
		w.Add(fmt.Appendf(nil, "id-%d", i), uint64(i+1), int64(i))
	}
	for i := range n {
		if pos, ok := w.Lookup(fmt.Appendf(nil, "id-%d", i), n); !ok || pos != uint64(i+1) {
			t.Fatalf("id-%d: %d %v", i, pos, ok)
		}
	}
	passed := 0
	for i := range 10_000 {
		k := KeyOf(fmt.Appendf(nil, "unknown-%d", i))
		if w.curBits.has(k) || w.prevBits.has(k) {
			passed++
		}
		if _, ok := w.LookupKey(k, n); ok {
			t.Fatalf("unknown-%d found", i)
		}
	}
	if passed > 2_500 { // 8-16 bits per id: about 6-12% per filter
		t.Fatalf("%d of 10,000 unknown ids passed the filters", passed)
	}
}

// TestForget: the ids of a forgotten range of positions are gone from both
// generations (a retry of one is new), every other id still answers with
// its position, and Through no longer names a forgotten position.
func TestForget(t *testing.T) {
	w := New(time.Hour, 8) // generations of 4: ids 1-4 rotate into prev
	for i := 1; i <= 7; i++ {
		w.Add(fmt.Appendf(nil, "id-%d", i), uint64(100+i), int64(i))
	}
	w.Forget(103, 106) // 103, 104 in prev; 105 in cur
	for i := 1; i <= 7; i++ {
		pos, ok := w.Lookup(fmt.Appendf(nil, "id-%d", i), 10)
		if gone := i >= 3 && i <= 5; ok == gone || (ok && pos != uint64(100+i)) {
			t.Fatalf("id-%d after Forget(103, 106): %d %v", i, pos, ok)
		}
	}
	if w.Len() != 4 || w.Through() != 107 {
		t.Fatalf("Len %d Through %d, want 4 and 107", w.Len(), w.Through())
	}
	w.Forget(106, 200)
	if w.Through() != 102 {
		t.Fatalf("Through %d after forgetting the newest, want 102", w.Through())
	}
	w.Forget(5, 5) // empty range
	if w.Len() != 2 {
		t.Fatalf("Len %d, want 2", w.Len())
	}
	// Re-adding a forgotten id at a new position answers with the new one.
	w.Add([]byte("id-4"), 300, 20)
	if pos, ok := w.Lookup([]byte("id-4"), 21); !ok || pos != 300 {
		t.Fatalf("id-4 re-added: %d %v", pos, ok)
	}
}
