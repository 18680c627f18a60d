// Package dedup is the deduplication window of one channel: it remembers
// the message ids of the channel's recent messages (PROTOCOL.md 2.14) and
// the position each got, so that a publish repeating an id within the
// window is answered with the first position instead of being stored
// again. It is pure logic: the engine feeds it the ids it appends and, to
// rebuild a window (another node took over the channel's writes, or the
// window was forgotten), the ids of the retained records.
//
// Ids are not stored: a Window keeps a 128-bit fingerprint of each (two
// independent 64-bit hashes), so that lookups and inserts do not allocate
// and memory per id is fixed. Two different ids are taken for one with
// probability about n/2^128 for n remembered ids, which is negligible.
//
// Memory: the ids live in two generations (maps) of at most MaxIDs/2
// entries each; when the current one is full, or older than the window,
// the previous one is cleared and reused. So a Window remembers every id of
// the last window as long as fewer than MaxIDs/2 arrived in it, and never
// more than MaxIDs ids: about 40 bytes each, e.g. 4 MB for the default
// 100,000, plus a Bloom filter of 8 to 16 bits per id (at most 200 KB for
// the default). Nothing is deleted one by one, which keeps lookups short (a
// map with many deleted slots probes long).
//
// A Window is not safe for concurrent use: the engine calls it under the
// lock that serialises the channel's appends.
package dedup

import (
	"hash/maphash"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Defaults.
const (
	DefaultWindow = 2 * time.Minute
	DefaultMaxIDs = 100_000
)

// Window is one channel's recent message ids.
type Window struct {
	window    int64 // ns
	half      int   // entries per generation
	cur, prev map[uint64]entry
	// curBits and prevBits are one-hash Bloom filters of the generations'
	// keys (8 to 16 bits per entry, so about one new id in ten probes a
	// map): an id that is new, the common case, is told apart without the
	// two map probes that miss the cache in a large window.
	curBits, prevBits filter
	curStart          int64 // stamp of the first id of cur
	through           uint64
	seen              uint64
	dups              uint64
}

type entry struct {
	h2    uint64
	pos   uint64
	stamp int64
}

// New returns an empty window that remembers ids for window (at least
// 1 ns) and at most maxIDs of them (at least 2).
func New(window time.Duration, maxIDs int) *Window {
	half := max(maxIDs/2, 1)
	return &Window{window: max(int64(window), 1), half: half,
		cur: make(map[uint64]entry, min(half, 1024)), prev: make(map[uint64]entry, min(half, 1024)),
		curBits: newFilter(min(half, 1024)), prevBits: newFilter(min(half, 1024))}
}

// filter is a one-hash Bloom filter of 8 to 16 bits per key, grown with
// its generation, so a small window keeps a small one.
type filter struct {
	words []uint64
	shift uint // 64 - log2(bits): a key's bit is the top of its h2
}

// newFilter returns a filter for n keys.
func newFilter(n int) filter {
	bits := uint(6) // at least one word
	for 1<<bits < 8*n {
		bits++
	}
	return filter{words: make([]uint64, 1<<(bits-6)), shift: 64 - bits}
}

func (f *filter) has(k Key) bool {
	b := k.h2 >> f.shift // h2: the maps are keyed by h1
	return f.words[b>>6]&(1<<(b&63)) != 0
}

func (f *filter) add(k Key) {
	b := k.h2 >> f.shift
	f.words[b>>6] |= 1 << (b & 63)
}

// fits reports whether the filter keeps 8 bits per key for n keys.
func (f *filter) fits(n int) bool { return 8*n <= 64*len(f.words) }

// refill sizes f for n keys and sets the keys of m (h2 of each entry).
func (f *filter) refill(n int, m map[uint64]entry) {
	*f = newFilter(n)
	for _, e := range m {
		f.add(Key{h2: e.h2})
	}
}

// seed2 keys the second hash; fingerprints only live in this process.
var seed2 = maphash.MakeSeed()

// fingerprint returns the two hashes of id.
func fingerprint(id []byte) (h1, h2 uint64) {
	return xxhash.Sum64(id), maphash.Bytes(seed2, id)
}

// Key is an id's fingerprint (KeyOf): a caller that looks an id up and then
// adds it hashes it once.
type Key struct{ h1, h2 uint64 }

// KeyOf returns id's fingerprint. It does not allocate.
func KeyOf(id []byte) Key {
	h1, h2 := fingerprint(id)
	return Key{h1, h2}
}

// Lookup returns the position of the message with id if it was added less
// than the window before now (unix ns). It does not allocate.
func (w *Window) Lookup(id []byte, now int64) (uint64, bool) { return w.LookupKey(KeyOf(id), now) }

// LookupKey is Lookup of the id whose fingerprint is k.
func (w *Window) LookupKey(k Key, now int64) (uint64, bool) {
	h1, h2 := k.h1, k.h2
	if !w.curBits.has(k) && !w.prevBits.has(k) {
		return 0, false
	}
	if e, ok := w.cur[h1]; ok && e.h2 == h2 && now-e.stamp < w.window {
		w.dups++
		return e.pos, true
	}
	if e, ok := w.prev[h1]; ok && e.h2 == h2 && now-e.stamp < w.window {
		w.dups++
		return e.pos, true
	}
	return 0, false
}

// Add remembers id for the message stored at pos at stamp (unix ns).
// Stamps must be non-decreasing across calls (the engine's append stamps
// are). It does not allocate once both generations have reached their
// size.
func (w *Window) Add(id []byte, pos uint64, stamp int64) { w.AddKey(KeyOf(id), pos, stamp) }

// AddKey is Add of the id whose fingerprint is k.
func (w *Window) AddKey(k Key, pos uint64, stamp int64) {
	if len(w.cur) >= w.half || (len(w.cur) > 0 && stamp-w.curStart >= w.window) {
		w.cur, w.prev = w.prev, w.cur
		w.curBits, w.prevBits = w.prevBits, w.curBits
		clear(w.cur)
		clear(w.curBits.words)
	}
	if len(w.cur) == 0 {
		w.curStart = stamp
	}
	w.cur[k.h1] = entry{h2: k.h2, pos: pos, stamp: stamp}
	if !w.curBits.fits(len(w.cur)) {
		w.curBits.refill(2*len(w.cur), w.cur) // doubling: amortised O(1) per id
	}
	w.curBits.add(k)
	w.through = max(w.through, pos)
	w.seen++
}

// Forget removes the ids of the messages at positions [from, to): records
// that were never kept (a replicated streamlet's recovery dropped them),
// whose ids must not answer a retry with a position that holds another
// message or nothing. It is rare, so it rebuilds the generations' filters
// rather than keeping deletions cheap. It does not touch the counters.
func (w *Window) Forget(from, to uint64) {
	if from >= to {
		return
	}
	drop := func(m map[uint64]entry, f *filter) {
		n := len(m)
		for h1, e := range m {
			if e.pos >= from && e.pos < to {
				delete(m, h1)
			}
		}
		if len(m) != n {
			f.refill(max(len(m), len(f.words)*8), m)
		}
	}
	drop(w.cur, &w.curBits)
	drop(w.prev, &w.prevBits)
	if w.through >= from && w.through < to {
		w.through = 0
		for _, m := range []map[uint64]entry{w.cur, w.prev} {
			for _, e := range m {
				w.through = max(w.through, e.pos)
			}
		}
	}
}

// Through returns the highest position added (0 if none).
func (w *Window) Through() uint64 { return w.through }

// Len returns how many ids the window holds (some may be expired: they
// are cleared with their generation).
func (w *Window) Len() int { return len(w.cur) + len(w.prev) }

// Stats returns how many ids were added and how many lookups found a
// duplicate.
func (w *Window) Stats() (added, dups uint64) { return w.seen, w.dups }

// Window returns the window's duration.
func (w *Window) Window() time.Duration { return time.Duration(w.window) }
