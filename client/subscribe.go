package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	// KindMessage: a message (Position, Payload).
	KindMessage EventKind = iota + 1
	// KindGap: positions Gap.From..Gap.To (inclusive) will never be
	// delivered, for Gap.Reason.
	KindGap
	// KindEpochChanged: on resuming, the server reported a different epoch
	// (Epoch) for the channel: it is a new incarnation (the channel was
	// dropped after idling and used again, or a single node restarted),
	// whose positions count from 1 again. Delivery restarts at Position,
	// which is 1; a following Gap with reason lost covers what of the new
	// incarnation is no longer retained.
	KindEpochChanged
	// KindJoin: Member entered the channel's presence
	// (WithPresenceEvents). Presence events carry no position.
	KindJoin
	// KindLeave: Member left the channel's presence (unsubscribed,
	// disconnected, or its node died).
	KindLeave
	// KindOccupancy: the channel's counts (Occupancy), right after the
	// subscription is made and when they change (WithOccupancy); for a
	// WithPresenceEvents subscription also when EventsPaused changes and
	// while it is set.
	KindOccupancy
)

// String returns "message", "gap", "epoch", "join", "leave" or
// "occupancy".
func (k EventKind) String() string {
	switch k {
	case KindMessage:
		return "message"
	case KindGap:
		return "gap"
	case KindEpochChanged:
		return "epoch"
	case KindJoin:
		return "join"
	case KindLeave:
		return "leave"
	case KindOccupancy:
		return "occupancy"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// GapInfo describes a gap: positions From..To inclusive are missing.
type GapInfo struct {
	From, To uint64
	Reason   wire.GapReason // wire.GapExpired, wire.GapSlow or wire.GapLost
}

// Event is one item of a subscription's stream, in position order.
type Event struct {
	Kind     EventKind
	Channel  string
	Position uint64 // KindMessage: the message's position; KindEpochChanged: 1, where the new incarnation's delivery restarts
	// Payload is the message (KindMessage). It belongs to the application
	// and stays valid forever. It shares one backing array with the other
	// messages of its batch, with its capacity capped, so appending to it
	// copies and never touches a neighbour.
	Payload []byte
	// Headers are the message's headers (KindMessage), nil if it has none;
	// in the publisher's order. Allocated per message that has them.
	Headers []Header
	// MsgID is the message id it was published with (Msg.ID, or the
	// automatic id of WithIdempotence), nil if none. Like Payload it
	// stays valid and shares the batch's backing array.
	MsgID []byte
	Gap   GapInfo // KindGap
	Epoch uint64  // KindEpochChanged: the new epoch
	// Member is who joined or left (KindJoin, KindLeave).
	Member Member
	// Occupancy is the channel's counts (KindOccupancy); EventsPaused says
	// that the channel has more members than the server sends joins and
	// leaves for: none come until an occupancy without it.
	Occupancy    Occupancy
	EventsPaused bool
}

// SubInfo holds the values of the latest SUBSCRIBED answer.
type SubInfo struct {
	First    uint64 // position of the first message delivered
	Earliest uint64 // earliest retained position (Next when nothing is retained)
	Next     uint64 // position the next publish will get
	Epoch    uint64 // the channel's epoch
}

// Subscription is a live subscription to one channel. It delivers its
// events in position order through a bounded queue (WithBuffer): read them
// either with Next or from Events, not both. Its methods are safe for
// concurrent use.
//
// Slow readers: when the queue is full, the Conn's reader goroutine waits
// for room, so TCP backpressure reaches the server, whose slow-consumer
// policy then applies: by default (lag) the subscription reads on from the
// channel's retained history as the reader drains and loses only what
// expired before it got there (a Gap with reason wire.GapExpired); a
// server may instead skip ahead (wire.GapSlow) or disconnect. While it waits, the Conn's other
// subscriptions and publish acknowledgements are delayed too.
//
// Across reconnects, the subscription resumes at the position after the
// last event queued, with the epoch it last saw; events already queued
// stay queued. Gaps are always delivered as events, never hidden, and
// duplicates (positions at or below the last one queued) are dropped.
type Subscription struct {
	// The fields the reader reads for every DATA frame come first, in one
	// cache line: with thousands of connections in a process each frame
	// finds its subscription cold.

	// fn, when set (SubscribeFunc), is called with each event on the
	// reader goroutine instead of queueing it on ch; ended stops it.
	fn      func(Event)
	channel string
	// cursor is the next position expected (0 before the first
	// SUBSCRIBED); atomic so that the reader advances it per message
	// without the lock, written under mu where it changes with epoch.
	cursor atomic.Uint64
	ended  atomic.Bool
	inFn   atomic.Bool // fn is running (Unsubscribe then does not wait)
	// q is the event queue (evqueue.go) between the reader goroutine and
	// Next or Events; unused with fn.
	q evQueue

	c     *Conn
	id    uint32
	chanB []byte // channel as bytes, for SUBSCRIBE frames
	start wire.StartKind
	arg   uint64
	// pflags are the presence flags of its SUBSCRIBEs (presence.go).
	pflags wire.Flags
	// filter is the WithFilter expression (nil: none); the server then
	// sends FDATA, whose holes are not gaps (filter.go).
	filter []byte

	stop  chan struct{} // closed by terminate
	ready chan struct{} // closed by the first SUBSCRIBED or by terminate

	mu         sync.Mutex
	info       SubInfo
	subscribed bool   // a SUBSCRIBED arrived at least once
	epoch      uint64 // epoch of the last SUBSCRIBED (0 = unknown)
	sess       *session
	err        error // why the subscription ended
	readyDone  bool
	retry      *time.Timer
	ms         memberSet // WithPresenceEvents (presence.go)
}

// Subscribe subscribes to channel and waits for the server's SUBSCRIBED,
// returning the live Subscription. If the connection drops before the
// answer, the SUBSCRIBE is sent again after reconnecting, and Subscribe
// keeps waiting, up to ctx. A refusal by the server is returned as a
// *ServerError; ErrInvalidChannel, ErrInvalidOption, ErrDraining and
// ErrClosed mean nothing was sent.
func (c *Conn) Subscribe(ctx context.Context, channel string, opts ...SubOption) (*Subscription, error) {
	return c.subscribe(ctx, channel, nil, opts)
}

// SubscribeFunc subscribes like Subscribe but hands each event to fn
// directly, on the Conn's reader goroutine, instead of queueing it: no
// copy of the payload and no hand-off between goroutines, for consumers
// that process a message at once (the cheapest way to receive).
//
// The contract, which differs from Subscribe's:
//   - fn is called on the reader goroutine, one call at a time, in
//     position order (messages, gaps and epoch changes as Events).
//   - An Event's Payload and Headers are lent: they alias the connection's
//     read buffer and are valid only until fn returns. Copy what you keep
//     (bytes.Clone); never retain or modify them after returning.
//   - While fn runs, the Conn reads nothing else: other subscriptions and
//     publish acknowledgements wait, and a slow fn slows the connection
//     (the server's slow-consumer policy then applies, as for a full
//     queue). fn must not call Publish and wait for its result, nor wait
//     for another subscription's events.
//   - fn may call Unsubscribe (which then does not wait for the server's
//     answer: the reader that would read it is running fn). After
//     Unsubscribe or Close returns, fn is not called again, except that a
//     call already running on the reader goroutine finishes.
//   - Events and Next are not used (the subscription has no queue;
//     WithBuffer is ignored); Events is closed when the subscription ends.
func (c *Conn) SubscribeFunc(ctx context.Context, channel string, fn func(Event), opts ...SubOption) (*Subscription, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil SubscribeFunc callback", ErrInvalidOption)
	}
	return c.subscribe(ctx, channel, fn, opts)
}

func (c *Conn) subscribe(ctx context.Context, channel string, fn func(Event), opts []SubOption) (*Subscription, error) {
	if err := wire.ValidChannelString(channel); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidChannel, err)
	}
	so := subOptions{start: wire.StartLive, buffer: DefaultSubBuffer}
	for _, o := range opts {
		if err := o(&so); err != nil {
			return nil, err
		}
	}
	sub := &Subscription{
		c: c, channel: channel, chanB: []byte(channel), start: so.start, arg: so.arg, fn: fn, pflags: so.pflags, filter: so.filter,
		stop:  make(chan struct{}),
		ready: make(chan struct{}),
	}
	sub.q.init(so.buffer, channel)
	for {
		c.mu.Lock()
		switch c.state.Load() {
		case stateDraining:
			c.mu.Unlock()
			return nil, ErrDraining
		case stateClosed:
			err := c.closeErr
			c.mu.Unlock()
			return nil, err
		}
		if s := c.cur.Load(); s != nil {
			if err := sub.filtersRefused(s.welcome); err != nil {
				c.mu.Unlock()
				return nil, err
			}
			for {
				c.nextSubID++
				if _, used := c.subs[c.nextSubID]; c.nextSubID != 0 && !used {
					break
				}
			}
			sub.id = c.nextSubID
			c.subs[sub.id] = sub
			// If s is dying, the supervisor sends it again after reconnecting.
			c.sendSubscribe(s, sub)
			c.mu.Unlock()
			break
		}
		c.mu.Unlock()
		if err := c.waitReady(ctx); err != nil {
			return nil, err
		}
	}
	select {
	case <-sub.ready:
		if err := sub.Err(); err != nil {
			return nil, err
		}
		return sub, nil
	case <-ctx.Done():
		_ = sub.unsubscribe(ctx, false) // ctx ended: do not wait for UNSUBSCRIBED
		return nil, ctx.Err()
	}
}

// sendSubscribe sends sub's SUBSCRIBE on s: from its original start, or,
// once something was delivered or subscribed, from the next expected
// position with the epoch seen. Called with c.mu held.
func (c *Conn) sendSubscribe(s *session, sub *Subscription) {
	sub.mu.Lock()
	kind, arg, epoch := sub.start, sub.arg, sub.epoch
	if c := sub.cursor.Load(); c != 0 {
		kind, arg = wire.StartPosition, c
	}
	sub.sess = s
	sub.mu.Unlock()
	var want uint64
	if kind == wire.StartPosition {
		want = arg
	}
	id := c.nextReq()
	frame := sub.appendSubscribe(id, wire.Subscribe{
		SubID: sub.id, Start: kind, Arg: arg, Epoch: epoch, Channel: sub.chanB,
	})
	s.control(id, reqEntry{sub: sub, want: want}, frame)
}

// Channel returns the subscribed channel's name.
func (sub *Subscription) Channel() string { return sub.channel }

// Info returns the values of the latest SUBSCRIBED (updated on every
// resume).
func (sub *Subscription) Info() SubInfo {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.info
}

// Err returns why the subscription ended (ErrUnsubscribed, an error matching
// ErrClosed, a *ServerError refusing a resume, or an error matching
// ErrFiltersUnsupported when a filtered subscription's connection was
// re-established with a server without filters), or nil while it is live.
func (sub *Subscription) Err() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.err
}

// Events returns the event queue as a channel. It is closed after the
// subscription ends and its queued events were received; Err then says
// why. Next hands events over in batches and costs less per event than
// the channel, which takes a lock on each side per event: prefer Next
// where a channel is not needed. The first call moves the events queued
// so far into the channel; Next, called after it, reads the channel.
func (sub *Subscription) Events() <-chan Event { return sub.q.events() }

// Next returns the next event, waiting up to ctx. After the subscription
// ended and its queued events were returned, Next returns Err(). Events
// are taken from the queue a batch at a time (everything queued), so Next
// costs little per event; it may be called from several goroutines, each
// event going to one of them.
func (sub *Subscription) Next(ctx context.Context) (ev Event, err error) {
	if q := &sub.q; q.rmu.held.CompareAndSwap(false, true) {
		// Fast path: a message of the item being decoded.
		if it := &q.item; it.n > 1 && it.ev == nil {
			q.decodeInto(it, &ev)
			q.rmu.Unlock()
			return ev, nil
		}
		q.rmu.Unlock()
	}
	ev, ok, err := sub.q.nextEvent(ctx, sub.stop)
	switch {
	case err != nil:
		return Event{}, err
	case !ok:
		return Event{}, sub.Err()
	}
	return ev, nil
}

// Buffered returns the number of events queued and not yet returned by
// Next (or received from Events). Safe from any goroutine.
func (sub *Subscription) Buffered() int { return sub.q.buffered() }

// Unsubscribe ends the subscription: no event is queued after it returns
// (events already queued stay readable), it is not resumed, and it waits
// for the server's UNSUBSCRIBED up to ctx (a lost connection counts as
// done). It is idempotent.
func (sub *Subscription) Unsubscribe(ctx context.Context) error {
	return sub.unsubscribe(ctx, true)
}

// unsubscribe does Unsubscribe; it waits for UNSUBSCRIBED only if wait.
func (sub *Subscription) unsubscribe(ctx context.Context, wait bool) error {
	c := sub.c
	c.mu.Lock()
	if c.subs[sub.id] != sub {
		c.mu.Unlock()
		return nil
	}
	delete(c.subs, sub.id)
	// Stop delivery before the UNSUBSCRIBE goes out: DATA the server sends
	// until its UNSUBSCRIBED is dropped.
	sub.terminate(ErrUnsubscribed)
	sub.mu.Lock()
	s := sub.sess
	if sub.retry != nil {
		sub.retry.Stop()
	}
	sub.mu.Unlock()
	var reply chan error
	if s != nil && c.cur.Load() == s {
		id := c.nextReq()
		reply = make(chan error, 1)
		if !s.control(id, reqEntry{reply: reply}, wire.AppendUnsubscribe(nil, id, sub.id)) {
			reply = nil
		}
	}
	c.mu.Unlock()
	if reply == nil || !wait || sub.inFn.Load() {
		return nil
	}
	select {
	case err := <-reply:
		return err
	case <-s.done:
		return nil // the server forgets subscriptions with the connection
	case <-ctx.Done():
		return fmt.Errorf("client: unsubscribe: %w", ctx.Err())
	}
}

// terminate ends the subscription with err (the first call wins): delivery
// stops, a waiting Subscribe returns, and the queue is closed.
func (sub *Subscription) terminate(err error) {
	sub.mu.Lock()
	if sub.err != nil {
		sub.mu.Unlock()
		return
	}
	sub.err = err
	if sub.retry != nil {
		sub.retry.Stop()
	}
	if !sub.readyDone {
		sub.readyDone = true
		close(sub.ready)
	}
	sub.mu.Unlock()
	sub.ended.Store(true)
	close(sub.stop)
	sub.q.close()
}

// The methods below run on the reader goroutine of session s.

// onSubscribed applies a SUBSCRIBED: an epoch change becomes a
// KindEpochChanged event, and delivery restarts at position 1, where every
// incarnation's numbering starts (PROTOCOL.md 5), with a lost Gap for what
// of the new incarnation is gone (up to info.First); a resume (or
// FromPosition start) answered with a later First becomes a Gap event
// (expired), so nothing is skipped silently.
func (sub *Subscription) onSubscribed(s *session, want uint64, info wire.Subscribed) {
	if sub.pflags&wire.FlagPresenceEvents != 0 && s.welcome.Features&wire.FeaturePresence != 0 {
		sub.startSync(s) // the member set starts over from the server's answer
	}
	sub.mu.Lock()
	sub.info = SubInfo{First: info.First, Earliest: info.Earliest, Next: info.Next, Epoch: info.Epoch}
	prevEpoch := sub.epoch
	sub.subscribed = true
	if !sub.readyDone {
		sub.readyDone = true
		close(sub.ready)
	}
	sub.mu.Unlock()
	switch {
	case prevEpoch != 0 && info.Epoch != prevEpoch:
		ev := Event{Kind: KindEpochChanged, Channel: sub.channel, Position: 1, Epoch: info.Epoch}
		if !s.deliver(sub, ev) {
			return // not queued: the next resume detects the change again
		}
		sub.mu.Lock()
		sub.epoch = info.Epoch
		sub.cursor.Store(1)
		sub.mu.Unlock()
		if info.First > 1 {
			// The new incarnation's first positions are gone (the
			// server's own GAP for them is then already covered).
			sub.emitGap(s, wire.Gap{From: 1, To: info.First - 1, Reason: wire.GapLost})
		}
		return
	case want != 0 && info.First > want:
		sub.mu.Lock()
		sub.epoch = info.Epoch
		if sub.cursor.Load() == 0 {
			sub.cursor.Store(want)
		}
		sub.mu.Unlock()
		// The server starts later than asked: the range before First is
		// gone (expired, unless the server says otherwise with a GAP).
		sub.emitGap(s, wire.Gap{From: want, To: info.First - 1, Reason: wire.GapExpired})
	default:
		sub.mu.Lock()
		sub.epoch = info.Epoch
		if sub.cursor.Load() == 0 {
			sub.cursor.Store(max(info.First, want))
		}
		sub.mu.Unlock()
	}
}

// onSubscribeError handles an ERROR answering a SUBSCRIBE: a first
// subscribe fails (Subscribe returns it); a resume refused with a
// retriable error is tried again after a backoff, otherwise the
// subscription ends with the error.
func (sub *Subscription) onSubscribeError(s *session, e wire.Error) {
	sub.mu.Lock()
	resumed := sub.subscribed
	sub.mu.Unlock()
	err := serverErr("subscribe", e)
	if resumed && e.Retriable {
		d := sub.c.backoff(1)
		sub.c.log.Warn("resubscribe refused, retrying", "channel", sub.channel, "in", d, "err", err)
		t := time.AfterFunc(d, func() {
			c := sub.c
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.subs[sub.id] == sub && c.cur.Load() == s {
				c.sendSubscribe(s, sub)
			}
		})
		sub.mu.Lock()
		sub.retry = t
		sub.mu.Unlock()
		return
	}
	sub.end(err)
}

// end removes the subscription from its Conn, so that no reconnect
// resubscribes it, and terminates it with err.
func (sub *Subscription) end(err error) {
	c := sub.c
	c.mu.Lock()
	if c.subs[sub.id] == sub {
		delete(c.subs, sub.id)
	}
	c.mu.Unlock()
	sub.terminate(err)
}

// errRevoked ends a subscription the server ended on its own (UNSUBSCRIBED
// with id 0): its permission was revoked.
var errRevoked = &ServerError{Op: "subscribe", Err: wire.Error{Code: wire.CodeForbidden,
	Text: "the server ended the subscription: permission revoked"}}

// onData queues the count messages of a DATA frame from position first
// (their records validated by DecodeData), or, for a SubscribeFunc
// subscription, lends them to its callback without a copy. Positions
// already delivered are dropped; a hole before them becomes a Gap event
// (reason lost).
//
// A queued subscription copies the records once (owned records, a
// decompressed frame's fresh buffer, are not copied) and queues them as
// one item; Next decodes them (evqueue.go).
func (sub *Subscription) onData(s *session, first uint64, count uint32, records []byte, owned bool) {
	if sub.fn == nil {
		sub.queueData(s, first, count, records, owned)
		return
	}
	sub.inFn.Store(true) // one flag for the frame's calls (deliver)
	defer sub.inFn.Store(false)
	cur := sub.cursor.Load()
	pos := first
	for rest := records; ; pos++ {
		body, ext, r, ok := wire.NextRecordExt(rest)
		if !ok {
			return
		}
		rest = r
		if cur != 0 && pos < cur {
			continue // duplicate of a delivered position
		}
		if cur != 0 && pos > cur {
			if !sub.emitGap(s, wire.Gap{From: cur, To: pos - 1, Reason: wire.GapLost}) {
				return
			}
		}
		var ev Event
		if !sub.messageEvent(&ev, pos, body, ext) {
			return
		}
		if !s.deliver(sub, ev) {
			return
		}
		cur = pos + 1
		sub.cursor.Store(cur)
	}
}

// messageEvent makes *ev the message event of the record at pos whose
// body is body (an extended record body when ext: payload, message id and
// headers parsed out); false when an extended body does not parse. It
// fills the caller's Event rather than returning one: no copy per message.
func (sub *Subscription) messageEvent(ev *Event, pos uint64, body []byte, ext bool) bool {
	*ev = Event{Kind: KindMessage, Channel: sub.channel, Position: pos, Payload: body}
	if ext {
		e, err := wire.ParseExt(body, wire.TypeData)
		if err != nil {
			return false
		}
		ev.Payload, ev.MsgID = e.Payload, e.MsgID
		if len(e.Headers) > 0 {
			ev.Headers = wire.AppendHeaderFields(nil, e.Headers)
		}
	}
	return true
}

// queueData is onData for a queued subscription: it skips the records at
// positions already delivered, queues a Gap for a hole before the rest,
// copies the rest into the session's copy block and queues them as one
// item, and moves the cursor past them.
func (sub *Subscription) queueData(s *session, first uint64, count uint32, records []byte, owned bool) {
	cur := sub.cursor.Load()
	n := int(count)
	for cur != 0 && first < cur && n > 0 {
		_, _, rest, ok := wire.NextRecordExt(records)
		if !ok {
			return
		}
		records, first, n = rest, first+1, n-1
	}
	if n == 0 {
		return
	}
	if cur != 0 && first > cur {
		if !sub.emitGap(s, wire.Gap{From: cur, To: first - 1, Reason: wire.GapLost}) {
			return
		}
	}
	if !owned {
		records = s.copyRecords(records)
	}
	if sub.push(s, qItem{first: first, recs: records, n: n}) {
		sub.cursor.Store(first + uint64(n))
	}
}

// copyBlock is the size of the blocks the reader copies small runs of
// queued records into, shared by consecutive frames, so that a frame of
// one small message does not cost an allocation of its own; a run of more
// than a quarter of it gets an allocation of its size (sharing a block
// would waste its tail).
const copyBlock = 16 << 10

// copyRecords copies recs into the session's copy block (or a new
// allocation, see copyBlock) and returns the copy; the Events' payloads
// alias it, so a block is never reused (the garbage collector frees it
// with its last message). Reader only.
func (s *session) copyRecords(recs []byte) []byte {
	n := len(recs)
	if n > copyBlock/4 {
		return append([]byte(nil), recs...)
	}
	if len(s.blk) < n {
		s.blk = make([]byte, copyBlock)
	}
	c := s.blk[:n:n]
	copy(c, recs)
	s.blk = s.blk[n:]
	return c
}

// onGap queues a GAP, trimmed to the positions not yet delivered.
func (sub *Subscription) onGap(s *session, g wire.Gap) {
	cur := sub.cursor.Load()
	if cur != 0 {
		if g.To < cur {
			return
		}
		if g.From > cur && sub.filter == nil { // a filtered subscription's holes are no gaps
			if !sub.emitGap(s, wire.Gap{From: cur, To: g.From - 1, Reason: wire.GapLost}) {
				return
			}
		}
		g.From = max(g.From, cur)
	}
	sub.emitGap(s, g)
}

// emitGap queues a gap event and advances the cursor past it.
func (sub *Subscription) emitGap(s *session, g wire.Gap) bool {
	ev := Event{Kind: KindGap, Channel: sub.channel, Gap: GapInfo{From: g.From, To: g.To, Reason: g.Reason}}
	if !s.deliver(sub, ev) {
		return false
	}
	sub.cursor.Store(g.To + 1)
	return true
}
