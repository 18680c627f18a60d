package client

// pendQueue holds the publishes of one session that await their PUBACK, in
// request-id order. It replaces a map: request ids are taken from one
// increasing counter (shared with SUBSCRIBE/UNSUBSCRIBE, so the ids in the
// queue increase but may have holes), and the server acknowledges a
// connection's publishes in the order it received them, so the PUBACK for
// the oldest entry is nearly always the next one to arrive. Lookup is
// therefore O(1) at the head and a binary search otherwise (an ERROR
// answering a publish can overtake the PUBACKs of earlier ones). An entry
// taken out of the middle leaves a hole (live == false) that is dropped
// when it reaches the head.
//
// Ids are compared as distances from the head's id (uint32 arithmetic), so
// the counter may wrap around as long as fewer than 2^31 ids separate the
// oldest pending publish from the newest (the publish window bounds the
// entries to far fewer).
//
// A pendQueue is guarded by session.mu; it is not safe on its own.
type pendQueue struct {
	ring []pendSlot // len is a power of two (or 0)
	head int        // index of the oldest slot
	n    int        // slots in use, holes included
	live int        // slots holding an entry
}

type pendSlot struct {
	id   uint32
	live bool
	pe   pendEntry
}

// push appends the entry for request id, which must be after every id in
// the queue. It allocates only when the ring grows (doubling).
func (q *pendQueue) push(id uint32, pe pendEntry) {
	if q.n == len(q.ring) {
		q.grow()
	}
	q.ring[(q.head+q.n)&(len(q.ring)-1)] = pendSlot{id: id, live: true, pe: pe}
	q.n++
	q.live++
}

func (q *pendQueue) grow() {
	size := max(64, 2*len(q.ring))
	ring := make([]pendSlot, size)
	for i := 0; i < q.n; i++ {
		ring[i] = q.ring[(q.head+i)&(len(q.ring)-1)]
	}
	q.ring, q.head = ring, 0
}

// take removes and returns the entry for id, if present.
func (q *pendQueue) take(id uint32) (pendEntry, bool) {
	if q.live == 0 {
		return pendEntry{}, false
	}
	mask := len(q.ring) - 1
	if h := &q.ring[q.head]; h.id == id {
		// The common case: acks arrive in order.
		if !h.live {
			return pendEntry{}, false
		}
		pe := h.pe
		q.drop(h)
		q.trim()
		return pe, true
	}
	// Binary search by distance from the head's id.
	base := q.ring[q.head].id
	want := id - base
	lo, hi := 0, q.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if q.ring[(q.head+m)&mask].id-base < want {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == q.n {
		return pendEntry{}, false
	}
	s := &q.ring[(q.head+lo)&mask]
	if s.id != id || !s.live {
		return pendEntry{}, false
	}
	pe := s.pe
	q.drop(s)
	q.trim()
	return pe, true
}

// drop empties a live slot (releasing the references it held).
func (q *pendQueue) drop(s *pendSlot) {
	*s = pendSlot{id: s.id}
	q.live--
}

// trim removes holes from the head.
func (q *pendQueue) trim() {
	mask := len(q.ring) - 1
	for q.n > 0 && !q.ring[q.head].live {
		q.head = (q.head + 1) & mask
		q.n--
	}
	if q.n == 0 {
		q.head = 0
	}
}

// drain returns every live entry in id order and empties the queue, which
// stays usable. dst is appended to.
func (q *pendQueue) drain(dst []pendEntry) []pendEntry {
	mask := len(q.ring) - 1
	for i := 0; i < q.n; i++ {
		s := &q.ring[(q.head+i)&mask]
		if s.live {
			dst = append(dst, s.pe)
		}
		*s = pendSlot{}
	}
	q.head, q.n, q.live = 0, 0, 0
	return dst
}

// len returns the number of entries awaiting their outcome.
func (q *pendQueue) len() int { return q.live }
