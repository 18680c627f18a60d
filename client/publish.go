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
	<-c.sem
	switch {
	case pe.w != nil:
		pe.w.ch <- result{pos, err}
	case pe.ack != nil:
		pe.ack.pos, pe.ack.err = pos, err
		close(pe.ack.done)
	case pe.fn != nil:
		pe.fn(pos, err)
	}
}

// PubAck is the future of an asynchronous publish. Its methods are safe for
// concurrent use.
type PubAck struct {
	done chan struct{}
	pos  uint64
	err  error
}

// Done returns a channel closed when the outcome is known.
func (a *PubAck) Done() <-chan struct{} { return a.done }

// Position returns the message's position once Done is closed (0 before,
// or if the publish failed).
func (a *PubAck) Position() uint64 {
	select {
	case <-a.done:
		return a.pos
	default:
		return 0
	}
}

// Err returns the publish's error once Done is closed (nil before, and on
// success). An error matching ErrUnknownOutcome means the message may or may
// not have been published; a *ServerError means it was refused.
func (a *PubAck) Err() error {
	select {
	case <-a.done:
		return a.err
	default:
		return nil
	}
}

// Wait waits for the outcome or for ctx to end; ctx's ending does not
// cancel the publish.
func (a *PubAck) Wait(ctx context.Context) (uint64, error) {
	select {
	case <-a.done:
		return a.pos, a.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
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
	if err := c.publish(ctx, channel, payload, pendEntry{w: w}); err != nil {
		waiters.Put(w)
		return 0, err
	}
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
// returned here mean nothing was sent (see Publish for the kinds). Each
// call allocates its PubAck; PublishFunc does not allocate.
func (c *Conn) PublishAsync(ctx context.Context, channel string, payload []byte) (*PubAck, error) {
	a := &PubAck{done: make(chan struct{})}
	if err := c.publish(ctx, channel, payload, pendEntry{ack: a}); err != nil {
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
	return c.publish(ctx, channel, payload, pendEntry{fn: done})
}

// publish takes a window slot and queues the frame on the current session,
// waiting for one while reconnecting. On error nothing was sent and pe is
// never completed.
func (c *Conn) publish(ctx context.Context, channel string, payload []byte, pe pendEntry) error {
	if err := wire.ValidChannelString(channel); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidChannel, err)
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
			ok, err := s.enqueuePublish(channel, payload, pe)
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
