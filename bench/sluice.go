package bench

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/client"
)

// SluiceDriver drives a Sluice server through the public client SDK.
// Its fields are read by Connect and must not change during a run.
type SluiceDriver struct {
	// Addr is the server's "host:port".
	Addr string
	// Window is the client's publish window (client.WithMaxPending);
	// 0 means 4096.
	Window int
	// SubBuffer is each subscription's event queue (client.WithBuffer);
	// 0 means 4096.
	SubBuffer int
	// Dial, if set, replaces the TCP dialer (e.g. LoopbackDialer to spread
	// many connections over source addresses).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// NoAck makes Client.Publish (the fire-and-forget publisher of pub,
	// pubsub, fanout, nm and latency) use client.PublishNoAck, like a NATS
	// core publish, instead of pipelined acknowledged publishes; Flush then
	// waits for one acknowledged publish to a side channel (the server
	// handles a connection's frames in order). PublishAcked and
	// PublishAsync stay acknowledged.
	NoAck bool
	// Compression is the S2 threshold (client.WithCompression): a
	// positive value turns S2 on (payloads of that size and more are sent
	// compressed when that is smaller, and the server compresses their
	// DATA for these clients); 0 keeps the SDK's default (off), and a
	// negative value is off too.
	Compression int
	// Recv is how subscribers receive: RecvFunc (the zero value) with
	// SubscribeFunc, RecvNext and RecvEvents with Subscribe and the
	// subscription's queue.
	Recv RecvMode
	// SDKDefaults leaves the SDK's own publish window and subscription
	// queue (Window and SubBuffer are ignored): what a user of the README's
	// code gets.
	SDKDefaults bool
}

// RecvMode says which SDK path a Sluice subscriber receives with.
type RecvMode uint8

// Receive paths.
const (
	// RecvFunc: SubscribeFunc, the payload lent to the handler on the
	// connection's reader goroutine (no copy, no hand-off).
	RecvFunc RecvMode = iota
	// RecvNext: Subscribe, and a goroutine per subscription calling Next
	// (the SDK's default path: the payload is the application's).
	RecvNext
	// RecvEvents: Subscribe, and a goroutine per subscription ranging
	// over Events.
	RecvEvents
)

// String returns "func", "next" or "events".
func (m RecvMode) String() string {
	switch m {
	case RecvNext:
		return "next"
	case RecvEvents:
		return "events"
	}
	return "func"
}

// ParseRecvMode parses "func", "next" or "events".
func ParseRecvMode(s string) (RecvMode, error) {
	for _, m := range []RecvMode{RecvFunc, RecvNext, RecvEvents} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: receive path %q (func, next or events)", ErrConfig, s)
}

// Name returns "sluice".
func (d *SluiceDriver) Name() string { return "sluice" }

// Connect dials the server without automatic reconnection (a benchmark
// must see a lost connection, not hide it).
func (d *SluiceDriver) Connect(ctx context.Context) (Client, error) {
	window := d.Window
	if window <= 0 {
		window = 4096
	}
	opts := []client.Option{client.WithName("sluice-bench"), client.WithReconnect(false)}
	if !d.SDKDefaults {
		opts = append(opts, client.WithMaxPending(window))
	}
	if d.Dial != nil {
		opts = append(opts, client.WithDialer(d.Dial))
	}
	if d.Compression != 0 {
		opts = append(opts, client.WithCompression(max(d.Compression, 0)))
	}
	c, err := client.Dial(ctx, d.Addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("bench: sluice dial %s: %w", d.Addr, err)
	}
	sc := &sluiceClient{c: c, subBuf: d.SubBuffer, noAck: d.NoAck, recv: d.Recv, idle: make(chan struct{}, 1)}
	switch {
	case d.SDKDefaults:
		sc.subBuf = 0
	case sc.subBuf <= 0:
		sc.subBuf = 4096
	}
	sc.onAck = func(_ uint64, err error) { sc.acked(err) }
	return sc, nil
}

// sluiceClient adapts a *client.Conn. Fire-and-forget Publish is the SDK's
// PublishFunc with one reused callback, or PublishNoAck with NoAck.
type sluiceClient struct {
	c      *client.Conn
	subBuf int // 0: the SDK's default
	noAck  bool
	recv   RecvMode
	onAck  func(uint64, error)

	outstanding atomic.Int64  // publishes sent by Publish awaiting their ack
	idle        chan struct{} // signalled when outstanding drops to 0
	errMu       sync.Mutex
	firstErr    error // first failed Publish outcome
}

func (s *sluiceClient) acked(err error) {
	if err != nil {
		s.errMu.Lock()
		if s.firstErr == nil {
			s.firstErr = err
		}
		s.errMu.Unlock()
	}
	if s.outstanding.Add(-1) == 0 {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
}

// Publish implements Client with PublishFunc: pipelined, acknowledged;
// Flush collects the outcomes. With SluiceDriver.NoAck it is PublishNoAck.
func (s *sluiceClient) Publish(ctx context.Context, ch string, p []byte) error {
	if s.noAck {
		return s.c.PublishNoAck(ctx, ch, p)
	}
	s.outstanding.Add(1)
	if err := s.c.PublishFunc(ctx, ch, p, s.onAck); err != nil {
		s.outstanding.Add(-1)
		return err
	}
	return nil
}

// PublishAcked implements Client with the SDK's synchronous Publish.
func (s *sluiceClient) PublishAcked(ctx context.Context, ch string, p []byte) error {
	_, err := s.c.Publish(ctx, ch, p)
	return err
}

// PublishAsync implements Client with PublishFunc; done runs on the
// Conn's reader goroutine.
func (s *sluiceClient) PublishAsync(ctx context.Context, ch string, p []byte, done func(error)) error {
	return s.c.PublishFunc(ctx, ch, p, func(_ uint64, err error) { done(err) })
}

// Flush waits until every Publish so far is acknowledged and returns the
// first publish error seen.
func (s *sluiceClient) Flush(ctx context.Context) error {
	if s.noAck {
		// Acknowledged after every earlier frame of the connection.
		if _, err := s.c.Publish(ctx, flushChannel, nil); err != nil {
			return fmt.Errorf("bench: flush: %w", err)
		}
	}
	for s.outstanding.Load() > 0 {
		select {
		case <-s.idle:
		case <-ctx.Done():
			return fmt.Errorf("bench: flush: %w", ctx.Err())
		}
	}
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.firstErr
}

// Subscribe implements Client with the SDK's SubscribeFunc (RecvFunc: h
// runs on the Conn's reader goroutine with the payload lent, valid until
// it returns, as Handler says), or with Subscribe and a goroutine that
// reads the subscription with Next or Events and calls h (RecvNext,
// RecvEvents); Gap positions count as dropped.
func (s *sluiceClient) Subscribe(ctx context.Context, ch string, start Start, h Handler) (Sub, error) {
	opts := []client.SubOption{client.FromLive()}
	if start == StartEarliest {
		opts[0] = client.FromEarliest()
	}
	ss := &sluiceSub{}
	handle := func(ev client.Event) {
		switch ev.Kind {
		case client.KindMessage:
			h(ev.Payload)
		case client.KindGap:
			ss.dropped.Add(ev.Gap.To - ev.Gap.From + 1)
		}
	}
	if s.recv == RecvFunc {
		sub, err := s.c.SubscribeFunc(ctx, ch, handle, opts...)
		if err != nil {
			return nil, err
		}
		ss.sub = sub
		return ss, nil
	}
	if s.subBuf > 0 {
		opts = append(opts, client.WithBuffer(s.subBuf))
	}
	sub, err := s.c.Subscribe(ctx, ch, opts...)
	if err != nil {
		return nil, err
	}
	ss.sub, ss.reading = sub, make(chan struct{})
	// The reader ends when the subscription does (Close, or the
	// connection's end): Next then returns its error, Events is closed.
	go func() {
		defer close(ss.reading)
		if s.recv == RecvEvents {
			for ev := range sub.Events() {
				handle(ev)
			}
			return
		}
		for {
			ev, err := sub.Next(context.Background())
			if err != nil {
				return
			}
			handle(ev)
		}
	}()
	return ss, nil
}

// flushChannel receives the one acknowledged publish of a NoAck Flush; no
// scenario subscribes to it.
const flushChannel = "sluice-bench.flush"

// Close implements Client (client.Conn.Close).
func (s *sluiceClient) Close() error { return s.c.Close() }

// sluiceSub counts the positions a subscription was told are missing.
type sluiceSub struct {
	sub     *client.Subscription
	reading chan struct{} // RecvNext, RecvEvents: closed when the reader ended
	dropped atomic.Uint64
	closing atomic.Bool
}

// Dropped implements Sub: positions reported missing by Gap events.
func (s *sluiceSub) Dropped() uint64 { return s.dropped.Load() }

// Err returns the subscription's end reason, unless the bench itself
// ended it.
func (s *sluiceSub) Err() error {
	if s.closing.Load() {
		return nil
	}
	return s.sub.Err()
}

// Close implements Sub with Unsubscribe (bounded to 5 s), and waits for
// the subscription's reader goroutine, if any, to end.
func (s *sluiceSub) Close() error {
	s.closing.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.sub.Unsubscribe(ctx)
	if s.reading != nil {
		<-s.reading
	}
	return err
}

// LoopbackDialer returns a TCP dialer that binds each new connection to the
// next of n source addresses 127.0.0.1 ... 127.0.0.n (n <= 250), so that more
// than ~28,000 connections (one source address's ephemeral ports) can reach
// one loopback server. Safe for concurrent use.
func LoopbackDialer(n int) func(ctx context.Context, addr string) (net.Conn, error) {
	if n < 1 {
		n = 1
	}
	if n > 250 {
		n = 250
	}
	var next atomic.Uint64
	return func(ctx context.Context, addr string) (net.Conn, error) {
		i := next.Add(1) % uint64(n)
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i))}}
		return d.DialContext(ctx, "tcp", addr)
	}
}
