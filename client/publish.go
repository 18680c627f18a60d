package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluice-rtm/sluice/wire"
)

// pendEntry is how a publish reports its outcome; exactly one field is set.
// It is stored by value in the session's pending map, so registering a
// publish does not allocate.
type pendEntry struct {
	w   *waiter
	ack *PubAck
	fn  func(position uint64, err error)
	// rt, set only with WithIdempotence, keeps the PUBLISH frame (it
	// carries a message id) so that it can be sent again after the
	// connection is lost (retry.go).
	rt *retryRec
}

// waiter is a pooled, reusable completion for the synchronous Publish: its
// channel (capacity 1) is sent to, never closed.
type waiter struct{ ch chan result }

type result struct {
	pos uint64
	err error
}

var waiters = sync.Pool{New: func() any { return &waiter{ch: make(chan result, 1)} }}

// complete reports a publish's outcome and frees its window slot.
func (c *Conn) complete(pe pendEntry, pos uint64, err error) {
	if pe.rt != nil {
		putRetry(pe.rt)
	}
	<-c.sem
	switch {
	case pe.w != nil:
		pe.w.ch <- result{pos, err}
	case pe.ack != nil:
		pe.ack.complete(pos, err)
	case pe.fn != nil:
		pe.fn(pos, err)
	}
}

// closedCh is returned by Done of a PubAck whose outcome was known before
// anyone asked for its channel.
var closedCh = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// pubAcks recycles released PubAcks.
var pubAcks = sync.Pool{New: func() any { return new(PubAck) }}

// PubAck is the future of an asynchronous publish. Its methods are safe for
// concurrent use until Release.
//
// A PubAck may be handed back with Release once its user is done with it;
// PublishAsync then reuses it, which makes PublishAsync allocation-free in
// steady state. Its channel (Done) is made only if someone asks for it
// before the outcome is known.
type PubAck struct {
	mu       sync.Mutex
	done     bool
	released bool          // Release was called before the outcome
	ch       chan struct{} // made by Done/Wait before the outcome; closed by complete
	pos      uint64
	err      error
}

// complete records the outcome; it runs exactly once per use.
func (a *PubAck) complete(pos uint64, err error) {
	a.mu.Lock()
	a.pos, a.err, a.done = pos, err, true
	if a.ch != nil {
		close(a.ch)
	}
	recycle := a.released
	a.mu.Unlock()
	if recycle {
		a.recycle()
	}
}

func (a *PubAck) recycle() {
	*a = PubAck{}
	pubAcks.Put(a)
}

// Done returns a channel closed when the outcome is known.
func (a *PubAck) Done() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done && a.ch == nil {
		return closedCh
	}
	if a.ch == nil {
		a.ch = make(chan struct{})
	}
	return a.ch
}

// Position returns the message's position once the outcome is known (0
// before, or if the publish failed).
func (a *PubAck) Position() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.done {
		return 0
	}
	return a.pos
}

// Err returns the publish's error once the outcome is known (nil before,
// and on success). An error matching ErrUnknownOutcome means the message
// may or may not have been published; a *ServerError means it was refused.
func (a *PubAck) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.done {
		return nil
	}
	return a.err
}

// Wait waits for the outcome or for ctx to end; ctx's ending does not
// cancel the publish.
func (a *PubAck) Wait(ctx context.Context) (uint64, error) {
	a.mu.Lock()
	if a.done {
		pos, err := a.pos, a.err
		a.mu.Unlock()
		return pos, err
	}
	if a.ch == nil {
		a.ch = make(chan struct{})
	}
	ch := a.ch
	a.mu.Unlock()
	select {
	case <-ch:
		a.mu.Lock()
		pos, err := a.pos, a.err
		a.mu.Unlock()
		return pos, err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Release hands the PubAck back for reuse by a later PublishAsync. After
// Release the caller must not use the PubAck nor any channel it got from
// Done: it may already describe another publish. Release may be called
// before the outcome is known (the PubAck is then recycled once it is);
// the publish itself is not affected. Calling Release is optional (an
// unreleased PubAck is garbage collected) and at most once per PubAck.
func (a *PubAck) Release() {
	a.mu.Lock()
	if !a.done {
		a.released = true
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	a.recycle()
}

// Publish publishes payload to channel and waits for the server's PUBACK,
// returning the message's position. payload is copied before Publish
// returns or blocks on the acknowledgement. It blocks while the publish
// window (WithMaxPending) is full or the Conn is reconnecting, up to ctx.
//
// Errors: ErrInvalidChannel and ErrPayloadTooLarge (nothing sent); a
// *ServerError (refused by the server); ErrClosed / ErrDraining; ctx's error
// before sending; and, once sent, an error matching ErrUnknownOutcome if the
// connection was lost or ctx ended before the PUBACK: the message may or
// may not have been published, and the client does not resend it.
//
// In steady state Publish does not allocate.
func (c *Conn) Publish(ctx context.Context, channel string, payload []byte) (uint64, error) {
	w := waiters.Get().(*waiter)
	if err := c.publish(ctx, channel, payload, nil, nil, pendEntry{w: w}); err != nil {
		waiters.Put(w)
		return 0, err
	}
	return c.await(ctx, w)
}

// await waits for a synchronous publish's outcome.
func (c *Conn) await(ctx context.Context, w *waiter) (uint64, error) {
	select {
	case r := <-w.ch:
		waiters.Put(w)
		return r.pos, r.err
	case <-ctx.Done():
		// w still gets the outcome later; it is not reused.
		return 0, unknownOutcome(ctx.Err())
	}
}

// PublishAsync queues a publish and returns its future without waiting for
// the PUBACK; payload is copied before it returns. Many publishes queued
// together go out in one write. It blocks only while the publish window
// (WithMaxPending) is full or the Conn is reconnecting, up to ctx; errors
// returned here mean nothing was sent (see Publish for the kinds).
// PubAcks handed back with Release are reused, so a caller that releases
// each one after reading its outcome makes PublishAsync allocation-free in
// steady state (the Done channel is made only when asked for before the
// outcome is known).
func (c *Conn) PublishAsync(ctx context.Context, channel string, payload []byte) (*PubAck, error) {
	a := pubAcks.Get().(*PubAck)
	if err := c.publish(ctx, channel, payload, nil, nil, pendEntry{ack: a}); err != nil {
		pubAcks.Put(a)
		return nil, err
	}
	return a, nil
}

// PublishFunc is PublishAsync with a callback: done is called exactly once
// with the position or the error (as described for Publish), unless
// PublishFunc itself returns an error, in which case it is never called.
// done runs on a goroutine of the Conn (usually its reader): it must be
// quick, must not block, and must not call Close or Drain. With a done value
// made once and reused, PublishFunc does not allocate in steady state.
func (c *Conn) PublishFunc(ctx context.Context, channel string, payload []byte, done func(position uint64, err error)) error {
	if done == nil {
		return fmt.Errorf("%w: nil callback", ErrInvalidOption)
	}
	return c.publish(ctx, channel, payload, nil, nil, pendEntry{fn: done})
}

// Header is one message header: a key (1..255 HTTP token characters) and a
// value (UTF-8 without control characters other than tab). Keys may repeat;
// order is kept. See PROTOCOL.md 2.14.
type Header = wire.HeaderField

// Msg is a message with optional headers and an optional message id.
type Msg struct {
	Payload []byte
	// Headers travel and are stored with the message; subscribers that
	// negotiated headers (this SDK always does) read them in
	// Event.Headers. At most wire.MaxHeaders entries and
	// wire.MaxHeadersLen bytes encoded; they count against the server's
	// max payload.
	Headers []Header
	// ID, if not empty (1..255 bytes), makes the publish idempotent: the
	// server stores a message of this channel with an id it stored within
	// its dedup window (2 minutes by default) only once, and acknowledges a
	// repeat with the first message's position. After ErrUnknownOutcome,
	// publish the same Msg again to learn its position without a duplicate.
	ID []byte
}

// PublishMsg is Publish for a message with headers and/or an id (see Msg).
// Besides Publish's errors it returns ErrInvalidHeaders and
// ErrHeadersUnsupported (nothing sent). m's slices are copied before it
// returns or blocks on the acknowledgement.
func (c *Conn) PublishMsg(ctx context.Context, channel string, m Msg) (uint64, error) {
	if err := checkMsg(&m); err != nil {
		return 0, err
	}
	w := waiters.Get().(*waiter)
	if err := c.publish(ctx, channel, m.Payload, m.ID, m.Headers, pendEntry{w: w}); err != nil {
		waiters.Put(w)
		return 0, err
	}
	return c.await(ctx, w)
}

// PublishMsgAsync is PublishAsync for a message with headers and/or an id.
func (c *Conn) PublishMsgAsync(ctx context.Context, channel string, m Msg) (*PubAck, error) {
	if err := checkMsg(&m); err != nil {
		return nil, err
	}
	a := pubAcks.Get().(*PubAck)
	if err := c.publish(ctx, channel, m.Payload, m.ID, m.Headers, pendEntry{ack: a}); err != nil {
		pubAcks.Put(a)
		return nil, err
	}
	return a, nil
}

// checkMsg validates m's headers and id.
func checkMsg(m *Msg) error {
	if len(m.ID) > 0 {
		if err := wire.CheckMsgID(m.ID); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidHeaders, err)
		}
	}
	if len(m.Headers) > 0 {
		if err := wire.CheckHeaders(m.Headers); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidHeaders, err)
		}
	}
	return nil
}

// publish takes a window slot and queues the frame on the current session,
// waiting for one while reconnecting. On error nothing was sent and pe is
// never completed.
func (c *Conn) publish(ctx context.Context, channel string, payload, msgID []byte, hs []Header, pe pendEntry) error {
	if err := c.validChannel(channel); err != nil {
		return err
	}
	if p := c.opts.propagator; p != nil {
		var err error
		if hs, err = propagate(p, ctx, hs); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err // ended before anything was sent
	}
	if err := c.usable(); err != nil {
		return err
	}
	select {
	case c.sem <- struct{}{}:
	default:
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.closed:
			return c.closedErr()
		}
	}
	if err := c.usable(); err != nil {
		<-c.sem
		return err
	}
	for {
		if s := c.cur.Load(); s != nil {
			ok, err := s.enqueuePublish(channel, payload, msgID, hs, &pe)
			if ok {
				return nil
			}
			if err != nil {
				<-c.sem
				return err
			}
		}
		if err := c.waitReady(ctx); err != nil {
			<-c.sem
			return err
		}
	}
}

// usable returns ErrDraining or the close error if no new request may start.
func (c *Conn) usable() error {
	switch c.state.Load() {
	case stateDraining:
		return ErrDraining
	case stateClosed:
		return c.closedErr()
	}
	return nil
}

// validChannel checks channel's name, remembering the last valid name so
// that a publisher repeating its channel validates it once. Any goroutine.
func (c *Conn) validChannel(channel string) error {
	if p := c.valid.Load(); p != nil && *p == channel {
		return nil
	}
	if err := wire.ValidChannelString(channel); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidChannel, err)
	}
	name := channel
	c.valid.Store(&name)
	return nil
}

// PublishNoAck publishes payload to channel without asking for an
// acknowledgement (a PUBLISH without the ACK flag): it returns as soon as
// the frame is queued for the writer, and the message's position is never
// reported. payload is copied before it returns. It takes no slot of the
// publish window; instead, while 1 MiB or more of output waits for the
// writer, it blocks until the writer has taken the queue, up to ctx, so a
// publisher faster than the network is slowed down rather than buffering
// without bound.
//
// Delivery is at most once: a message queued when the connection is lost
// is gone, and no error reports it. A refusal by the server (e.g. FORBIDDEN,
// INVALID_CHANNEL checked again on the server, PAYLOAD_TOO_LARGE) answers
// nobody and is logged by the Conn's logger (WithLogger). Errors returned
// here mean nothing was queued: ErrInvalidChannel, ErrPayloadTooLarge,
// ErrClosed, ErrDraining, or ctx's error. Publishes issued while
// reconnecting wait for the next connection. It does not allocate in
// steady state. Safe for concurrent use.
func (c *Conn) PublishNoAck(ctx context.Context, channel string, payload []byte) error {
	if err := c.validChannel(channel); err != nil {
		return err
	}
	var hs []Header
	if p := c.opts.propagator; p != nil {
		var err error
		if hs, err = propagate(p, ctx, nil); err != nil {
			return err
		}
	}
	for {
		if err := c.usable(); err != nil {
			return err
		}
		if s := c.cur.Load(); s != nil {
			ok, wait, err := s.enqueueNoAck(channel, payload, hs)
			if ok || err != nil {
				return err
			}
			if wait != nil {
				select {
				case <-wait:
				case <-ctx.Done():
					return ctx.Err()
				case <-c.closed:
					return c.closedErr()
				}
				continue
			}
		}
		if err := c.waitReady(ctx); err != nil {
			return err
		}
	}
}
