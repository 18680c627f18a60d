package client

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/sluice-rtm/sluice/wire"
)

// A subscription's events travel from the Conn's reader goroutine to the
// application through an evQueue, a frame at a time: the reader copies a
// DATA frame's records (the wire's u32-length-prefixed run) and queues one
// item naming them under one lock, waking a waiting Next once; Next takes
// every queued item under one lock and decodes the records into Events
// itself, one per call, without touching the reader's side again: an
// integer cursor into the item's records (no heap pointer stored per
// message, so no write barrier while the collector marks), the Event
// built in Next's result (not copied out of a helper's). So per
// message only the payload bytes move from the reader's core to the
// application's, not a 136-byte Event, and no lock or channel operation is
// paid per message. (A channel of Events cost a lock on each side and a
// cache line of the channel moving between the cores per message, and the
// Events themselves moved too: together more than twice SubscribeFunc's
// CPU per message.)
//
// Events, which must return a channel, switches the queue to channel mode
// at its first call: what is queued so far moves into the channel, and
// from then on the reader sends each event on it.
type evQueue struct {
	// The reader's side, under mu.
	mu      sync.Mutex
	buf     []qItem // queued items, oldest first
	queued  int     // events in buf
	limit   int     // the reader waits while queued >= limit (WithBuffer)
	closed  bool    // the subscription ended: nothing more is queued
	waiting bool    // the reader waits for room
	// ch is the Events channel, nil until Events is called; from then on
	// the reader sends on it (chanMode). Both are written under mu and
	// rmu, so either lock suffices to read them; close closes ch.
	ch       chan Event
	chanMode bool
	ready    chan struct{} // cap 1: buf became non-empty (a hint: look again)
	room     chan struct{} // cap 1: a waiting reader may find room

	// The application's side, under rmu, on a cache line of its own
	// (the reader writes the lines above per frame): the items Next took
	// and the one it decodes.
	_       [64]byte
	rmu     rlock
	cur     []qItem
	next    int   // cur[next:] are still to decode
	item    qItem // the item being decoded
	channel string
}

// qItem is what the reader queues: a run of records at consecutive
// positions from first (n of them), or one other event (ev: a gap or an
// epoch change).
type qItem struct {
	first uint64
	recs  []byte // whole records, validated by DecodeData; the Events' payloads alias it
	off   int    // recs[off:] are the n records still to decode
	n     int
	ev    *Event
}

// init sets the queue's bound and the channel name its Events carry; it
// is called before the subscription is shared.
func (q *evQueue) init(limit int, channel string) {
	q.limit = max(limit, 1)
	q.channel = channel
	q.ready = make(chan struct{}, 1)
	q.room = make(chan struct{}, 1)
}

// signal puts a token in c unless one is there.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// push queues it, waiting while the queue holds limit events or more
// (TCP backpressure then reaches the server: the reader reads nothing
// else meanwhile); one item may take the queue past its limit. It reports
// false if it was not queued: the subscription ended or the session died.
// Reader goroutine of s only.
func (sub *Subscription) push(s *session, it qItem) bool {
	q := &sub.q
	q.mu.Lock()
	for !q.closed {
		if q.chanMode {
			ok := q.send(s, sub.stop, it)
			q.mu.Unlock()
			return ok
		}
		if q.queued >= q.limit {
			q.waiting = true
			q.mu.Unlock()
			if !waitRoom(s, q.room, sub.stop) {
				return false
			}
			q.mu.Lock()
			continue
		}
		q.buf = append(q.buf, it)
		q.queued += it.count()
		if len(q.buf) == 1 {
			signal(q.ready)
		}
		q.mu.Unlock()
		return true
	}
	q.mu.Unlock()
	return false
}

// count is the number of events the item yields.
func (it *qItem) count() int {
	if it.ev != nil {
		return 1
	}
	return it.n
}

// waitRoom waits until the application took events, the subscription
// ended or the session died; false in the last two cases.
func waitRoom(s *session, room, stop <-chan struct{}) bool {
	s.blocked.Store(true)
	defer s.blocked.Store(false)
	select {
	case <-room:
		return true
	case <-stop:
		return false
	case <-s.done:
		return false
	}
}

// send sends the item's events on the Events channel, waiting while it is
// full; false if the subscription ended or the session died first (the
// events not sent are dropped: the subscription is over, or resumes from
// the cursor, which the caller moves only past a queued item). q.mu is
// held: close waits for it, after closing stop, which ends a wait here.
func (q *evQueue) send(s *session, stop <-chan struct{}, it qItem) bool {
	for it.count() > 0 {
		var ev Event
		q.decodeInto(&it, &ev)
		select {
		case q.ch <- ev:
			continue
		default:
		}
		s.blocked.Store(true)
		select {
		case q.ch <- ev:
			s.blocked.Store(false)
		case <-stop:
			s.blocked.Store(false)
			return false
		case <-s.done:
			s.blocked.Store(false)
			return false
		}
	}
	return true
}

// decodeInto sets *ev, which is zero, to the item's next event and moves
// the item past it; the item has one (count() > 0). For a message it
// advances the integer offset off, not the recs slice: an item lives on the
// heap, and a pointer stored there per event would cost a write barrier per
// message while the collector marks (as often as not under a stream of
// copied frames).
func (q *evQueue) decodeInto(it *qItem, ev *Event) {
	if it.ev != nil {
		*ev = *it.ev
		it.ev = nil
		return
	}
	body, ext, rest, _ := wire.NextRecordExt(it.recs[it.off:])
	ev.Kind, ev.Channel, ev.Position, ev.Payload = KindMessage, q.channel, it.first, body
	it.off, it.first, it.n = len(it.recs)-len(rest), it.first+1, it.n-1
	if ext {
		// DecodeData validated the extended body.
		if e, err := wire.ParseExt(body, wire.TypeData); err == nil {
			ev.Payload, ev.MsgID = e.Payload, e.MsgID
			if len(e.Headers) > 0 {
				ev.Headers = wire.AppendHeaderFields(nil, e.Headers)
			}
		}
	}
}

// deliver hands one event that is not a message (a gap, an epoch change)
// to sub: to its SubscribeFunc callback, or to its queue (see push). It
// reports false if the event was not taken: the subscription ended or the
// session died. Reader goroutine of s only.
func (s *session) deliver(sub *Subscription, ev Event) bool {
	if sub.fn == nil {
		e := ev // on the heap for the queue; fn's events stay on the stack
		return sub.push(s, qItem{ev: &e})
	}
	// SubscribeFunc: call it here, lending ev's bytes (not under a lock,
	// so that fn may Unsubscribe).
	if sub.ended.Load() {
		return false
	}
	if sub.inFn.Load() { // within onData's frame
		sub.fn(ev)
		return true
	}
	sub.inFn.Store(true)
	sub.fn(ev)
	sub.inFn.Store(false)
	return true
}

// close ends the queue: nothing more is queued, what is queued stays
// readable, and the Events channel (if any) is closed. The caller closed
// sub.stop first, which ends a reader's wait for room.
func (q *evQueue) close() {
	q.mu.Lock()
	q.closed = true
	if q.ch != nil {
		close(q.ch)
	}
	q.mu.Unlock()
	signal(q.ready)
}

// nextEvent returns the next queued event, waiting up to ctx; ok is false
// (and err nil) when the subscription ended and everything queued was
// returned. stop is closed when the subscription ends.
func (q *evQueue) nextEvent(ctx context.Context, stop <-chan struct{}) (ev Event, ok bool, err error) {
	q.rmu.Lock()
	for {
		if q.item.count() > 0 {
			q.decodeInto(&q.item, &ev)
			if q.item.count() > 0 || q.next < len(q.cur) {
				// Another Next may be waiting for what this one holds.
				signal(q.ready)
			}
			q.rmu.Unlock()
			return ev, true, nil
		}
		if q.next < len(q.cur) {
			q.item = q.cur[q.next]
			q.cur[q.next] = qItem{}
			q.next++
			continue
		}
		if q.chanMode {
			ch := q.ch
			q.rmu.Unlock()
			select {
			case ev, ok = <-ch:
				return ev, ok, nil
			case <-ctx.Done():
				return Event{}, false, ctx.Err()
			}
		}
		q.mu.Lock()
		if len(q.buf) > 0 {
			// Take every queued item; the reader fills the array this
			// one emptied.
			q.cur, q.buf, q.next, q.queued = q.buf, q.cur[:0], 0, 0
			if q.waiting {
				q.waiting = false
				signal(q.room)
			}
			q.mu.Unlock()
			continue
		}
		closed := q.closed
		q.mu.Unlock()
		q.rmu.Unlock()
		if closed {
			return Event{}, false, nil
		}
		select {
		case <-q.ready:
		case <-stop:
		case <-ctx.Done():
			return Event{}, false, ctx.Err()
		}
		q.rmu.Lock()
	}
}

// events switches the queue to channel mode (once) and returns the
// channel: the events queued so far go into it first, in order.
func (q *evQueue) events() <-chan Event {
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if q.chanMode {
		// Not under mu: a reader waiting for room on the channel holds it.
		return q.ch
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	held := q.item.count() + q.queued
	for _, it := range q.cur[q.next:] {
		held += it.count()
	}
	q.ch = make(chan Event, max(q.limit, held))
	for _, items := range [][]qItem{{q.item}, q.cur[q.next:], q.buf} {
		for i := range items {
			for items[i].count() > 0 {
				var ev Event
				q.decodeInto(&items[i], &ev)
				q.ch <- ev
			}
		}
	}
	q.item, q.cur, q.buf, q.next, q.queued = qItem{}, nil, nil, 0, 0
	q.chanMode = true
	if q.closed {
		close(q.ch)
	}
	if q.waiting {
		q.waiting = false
		signal(q.room)
	}
	return q.ch
}

// buffered returns the number of events queued and not yet returned.
func (q *evQueue) buffered() int {
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if q.chanMode {
		return len(q.ch)
	}
	n := q.item.count()
	for _, it := range q.cur[q.next:] {
		n += it.count()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return n + q.queued
}

// rlock is the lock of the application's side of an evQueue: Next holds it
// only while it decodes (never while it waits), so a second caller spins
// briefly, yielding the processor. Unlocking is one plain store, where a
// sync.Mutex took a second atomic read-modify-write per event.
type rlock struct{ held atomic.Bool }

// Lock takes the lock.
func (l *rlock) Lock() {
	for !l.held.CompareAndSwap(false, true) {
		runtime.Gosched()
	}
}

// Unlock releases it.
func (l *rlock) Unlock() { l.held.Store(false) }
