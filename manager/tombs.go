package manager

import (
	"hash/fnv"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// maxTombs bounds the tombstones kept for dropped channels.
const maxTombs = 1 << 16

// tombstone is what survives of a dropped channel: enough to recreate it
// as the same incarnation, positions continuing. check is a second hash of
// the name (the key is the first), so that two names would have to
// collide on 96 bits to share one; slot is its place in the burial ring.
type tombstone struct {
	epoch, next uint64
	check, slot uint32
}

// tombs holds the tombstones of dropped channels, at most maxTombs, the
// oldest evicted first. It keys them by a 64-bit hash of the name, not the
// name: 65,536 names pinned about 7 MiB of an idle server (issue 14), the
// hashed form holds 32 bytes a tombstone (2 MiB at most) and a ring of keys
// (512 KiB). Safe for concurrent use (its own mutex, taken under a shard's
// and a channel's lock, never the other way round).
type tombs struct {
	mu   sync.Mutex
	m    map[uint64]tombstone
	ring []uint64 // keys in burial order; full, it is a ring whose oldest is head
	head int
}

func tombKey(name string) (key uint64, check uint32) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return xxhash.Sum64String(name), h.Sum32()
}

// bury records name's tombstone, replacing an older one of the same name.
func (t *tombs) bury(name string, epoch, next uint64) {
	k, check := tombKey(name)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[uint64]tombstone)
	}
	if old, ok := t.m[k]; ok {
		t.m[k] = tombstone{epoch, next, check, old.slot}
		return
	}
	var slot int
	if len(t.ring) < maxTombs {
		slot = len(t.ring)
		t.ring = append(t.ring, k)
	} else {
		slot = t.head
		// The oldest goes, unless its key was taken and buried again
		// since (its tombstone then names a newer slot).
		if old, ok := t.m[t.ring[slot]]; ok && int(old.slot) == slot {
			delete(t.m, t.ring[slot])
		}
		t.ring[slot] = k
		t.head = (t.head + 1) % maxTombs
	}
	t.m[k] = tombstone{epoch, next, check, uint32(slot)}
}

// take removes and returns name's tombstone.
func (t *tombs) take(name string) (epoch, next uint64, ok bool) {
	k, check := tombKey(name)
	t.mu.Lock()
	defer t.mu.Unlock()
	ts, ok := t.m[k]
	if !ok || ts.check != check {
		return 0, 0, false
	}
	delete(t.m, k)
	return ts.epoch, ts.next, true
}

// len returns the number of tombstones.
func (t *tombs) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
