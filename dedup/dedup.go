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
// Memory: at most MaxIDs entries of about 64 bytes (the map slot and the
// expiry ring entry), e.g. 6.4 MB for the default 100,000.
//
// A Window is not safe for concurrent use: the engine calls it under the
// lock that serialises the channel's appends.
package dedup

import (
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
	window int64 // ns
	maxIDs int
	m      map[uint64]entry
	// ring holds the entries in insertion order (stamps non-decreasing),
	// so that expiry and eviction drop the oldest first.
	ring       []slot
	head, n    int
	through    uint64 // highest position added, 0 if none
	dups, seen uint64
}

type entry struct {
	h2    uint64
	pos   uint64
	stamp int64
}

type slot struct {
	h1    uint64
	stamp int64
}

// New returns an empty window that remembers ids for window (at least
// 1 ns) and at most maxIDs of them (at least 1).
func New(window time.Duration, maxIDs int) *Window {
	return &Window{window: max(int64(window), 1), maxIDs: max(maxIDs, 1), m: make(map[uint64]entry)}
}

// fingerprint returns the two hashes of id.
func fingerprint(id []byte) (h1, h2 uint64) {
	h1 = xxhash.Sum64(id)
	// A second, independent hash: xxhash with another seed.
	var d xxhash.Digest
	d.ResetWithSeed(0x9e3779b97f4a7c15)
	_, _ = d.Write(id)
	return h1, d.Sum64()
}

// Lookup returns the position of the message with id if it was added less
// than the window before now (unix ns). It does not allocate.
func (w *Window) Lookup(id []byte, now int64) (uint64, bool) {
	w.expire(now)
	h1, h2 := fingerprint(id)
	e, ok := w.m[h1]
	if !ok || e.h2 != h2 || now-e.stamp >= w.window {
		return 0, false
	}
	w.dups++
	return e.pos, true
}

// Add remembers id for the message stored at pos at stamp (unix ns).
// Stamps must be non-decreasing across calls (the engine's append stamps
// are). An id already present is moved to the new position. When MaxIDs
// ids are held, the oldest is forgotten first. It does not allocate once
// the window has reached its size.
func (w *Window) Add(id []byte, pos uint64, stamp int64) {
	w.expire(stamp)
	h1, h2 := fingerprint(id)
	if _, ok := w.m[h1]; !ok && w.n == w.maxIDs {
		w.dropOldest()
	}
	w.m[h1] = entry{h2: h2, pos: pos, stamp: stamp}
	w.push(slot{h1: h1, stamp: stamp})
	w.through = max(w.through, pos)
	w.seen++
}

// Through returns the highest position added (0 if none): a rebuild after
// it continues the window without a hole when the next position to append
// is Through()+1.
func (w *Window) Through() uint64 { return w.through }

// Len returns how many ids the window holds (expired ones may still count
// until the next call that expires).
func (w *Window) Len() int { return len(w.m) }

// Stats returns how many ids were added and how many lookups found a
// duplicate.
func (w *Window) Stats() (added, dups uint64) { return w.seen, w.dups }

// Window returns the window's duration.
func (w *Window) Window() time.Duration { return time.Duration(w.window) }

func (w *Window) push(s slot) {
	if w.n == len(w.ring) {
		size := max(16, 2*len(w.ring))
		size = min(size, w.maxIDs+1)
		if size <= w.n { // full ring: dropOldest made no room (duplicate key refresh)
			w.dropOldest()
		} else {
			r := make([]slot, size)
			for i := 0; i < w.n; i++ {
				r[i] = w.ring[(w.head+i)%len(w.ring)]
			}
			w.ring, w.head = r, 0
		}
	}
	w.ring[(w.head+w.n)%len(w.ring)] = s
	w.n++
}

// dropOldest removes the oldest ring slot, and its map entry unless the
// entry was refreshed by a later Add of the same id.
func (w *Window) dropOldest() {
	s := w.ring[w.head]
	w.head = (w.head + 1) % len(w.ring)
	w.n--
	if e, ok := w.m[s.h1]; ok && e.stamp == s.stamp {
		delete(w.m, s.h1)
	}
}

// expire drops the ids added at least the window before now.
func (w *Window) expire(now int64) {
	for w.n > 0 && now-w.ring[w.head].stamp >= w.window {
		w.dropOldest()
	}
}
