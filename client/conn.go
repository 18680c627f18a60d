package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// Conn states (Conn.state).
const (
	stateOpen int32 = iota
	stateDraining
	stateClosed
)

// Conn is a client connection to a Sluice server (or cluster), re-established
// automatically unless WithReconnect(false). All methods are safe for
// concurrent use by any number of goroutines.
type Conn struct {
	opts options
	log  *slog.Logger

	// sem is the publish window: a publish holds one slot from before it is
	// written until its PUBACK (or failure). Drain takes every slot.
	sem chan struct{}

	reqID atomic.Uint32           // request id counter (0 is never used)
	valid atomic.Pointer[string]  // the channel name validated last (publish path cache)
	cur   atomic.Pointer[session] // the session new requests go to; nil while (re)connecting
	state atomic.Int32            // stateOpen / stateDraining / stateClosed; written under mu

	mu        sync.Mutex
	ready     chan struct{}            // closed while cur != nil; replaced on detach
	subs      map[uint32]*Subscription // live subscriptions, resumed on reconnect
	nextSubID uint32
	addrs     []string // seeds, then nodes learned from WELCOME
	addrIdx   int      // index in addrs of the address last dialled
	closeErr  error    // why the Conn closed

	closed chan struct{} // closed when state becomes stateClosed
	done   chan struct{} // closed when the supervisor has exited

	// WithIdempotence (retry.go): the producer id and sequence of automatic
	// message ids, the publishes kept for the next session (under mu), and
	// how many were resent.
	producer [producerIDLen]byte
	seq      atomic.Uint64
	retryQ   []pendEntry
	resent   atomic.Uint64
	// compressed counts publishes sent S2-compressed.
	compressed atomic.Uint64
	// refreshes counts REFRESHes the server accepted (refresh.go).
	refreshes atomic.Uint64
}

// Dial connects to the first reachable address of addr, a comma-separated
// list of "host:port" seeds, performs the HELLO/WELCOME handshake and returns
// the Conn. ctx bounds the whole Dial (each attempt is also bounded by
// WithDialTimeout); it does not affect the Conn afterwards. A server ERROR
// during the handshake is returned as a *ServerError (wrapping wire.Error).
// Nodes listed in WELCOME are added to the addresses used for reconnecting.
func Dial(ctx context.Context, addr string, opts ...Option) (*Conn, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	var seeds []string
	for a := range strings.SplitSeq(addr, ",") {
		if a = strings.TrimSpace(a); a != "" && !slices.Contains(seeds, a) {
			seeds = append(seeds, a)
		}
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("%w: no address in %q", ErrInvalidOption, addr)
	}
	c := &Conn{
		opts:   o,
		log:    o.logger,
		sem:    make(chan struct{}, o.maxPending),
		ready:  make(chan struct{}),
		subs:   make(map[uint32]*Subscription),
		addrs:  seeds[:min(len(seeds), maxAddrs)],
		closed: make(chan struct{}),
		done:   make(chan struct{}),
	}
	if o.idempotence > 0 {
		c.producer = newProducerID()
	}
	var errs []error
	for i := range c.addrs {
		c.addrIdx = i
		s, err := c.connect(ctx, c.addrs[i])
		if err == nil {
			c.install(s)
			go c.supervise(s)
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("client: dial %s: %w", addr, errors.Join(errs...))
}

// connect dials addr and performs the handshake; on success the session's
// reader and writer goroutines are running.
func (c *Conn) connect(ctx context.Context, addr string) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.dialTimeout)
	defer cancel()
	tok, err := c.helloToken(ctx) // before dialing: no socket waits for the provider
	if err != nil {
		return nil, fmt.Errorf("client: connect %s: %w", addr, err)
	}
	var nc net.Conn
	if c.opts.dialer != nil {
		nc, err = c.opts.dialer(ctx, addr)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("client: connect %s: %w", addr, err)
	}
	if c.opts.tls != nil {
		if nc, err = tlsHandshake(ctx, nc, addr, c.opts.tls); err != nil {
			return nil, fmt.Errorf("client: TLS with %s: %w", addr, err)
		}
	}
	// The deadline bounds the handshake; a cancelled ctx interrupts it.
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	w, fr, err := c.handshake(nc, tok)
	if !stop() || err != nil {
		_ = nc.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("client: handshake with %s: %w", addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	c.learn(w.Nodes)
	s := newSession(c, nc, addr, w, fr)
	go s.readLoop()
	go s.writeLoop()
	c.log.Info("connected", "addr", addr, "server", w.ServerName)
	return s, nil
}

// features returns the feature bits the client offers in HELLO: message
// headers and ids, credentials that expire (AUTHED and REFRESH,
// refresh.go), presence, filters, and S2 when WithCompression turned it on. A server that does not
// echo FeatureHeaders is talked to as before, and publishing headers to it
// fails with ErrHeadersUnsupported; one that does not echo FeatureS2 gets
// and sends nothing compressed; one that does not echo FeaturePresence
// ignores the presence SubOptions and refuses queries
// (ErrPresenceUnsupported); one that does not echo FeatureFilters refuses
// filtered subscriptions and ends those a reconnect brings to it
// (ErrFiltersUnsupported).
func (c *Conn) features() wire.Features {
	f := wire.FeatureHeaders | wire.FeatureRefresh | wire.FeaturePresence | wire.FeatureFilters
	if c.opts.compressMin > 0 {
		f |= wire.FeatureS2
	}
	return f
}

// Compressed returns how many publishes were sent S2-compressed. Safe for
// concurrent use.
func (c *Conn) Compressed() uint64 { return c.compressed.Load() }

// handshake sends HELLO and reads the answer: WELCOME or ERROR.
// The returned frameReader reads the session's frames after it.
func (c *Conn) handshake(nc net.Conn, token []byte) (wire.Welcome, *frameReader, error) {
	id := c.nextReq()
	hello := wire.AppendHello(nil, id, wire.Hello{
		MinVersion: wire.Version1, MaxVersion: wire.Version1,
		Features: c.features(), Name: c.opts.name, Token: token,
	})
	if _, err := nc.Write(hello); err != nil {
		return wire.Welcome{}, nil, err
	}
	fr := newFrameReader(nc, min(handshakeMaxBody, c.opts.maxBody))
	rd := &fr.rd
	h, body, err := rd.Next()
	if err != nil {
		if errors.Is(err, wire.ErrMalformed) {
			err = fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		return wire.Welcome{}, nil, err
	}
	switch h.Type {
	case wire.TypeWelcome:
	case wire.TypeError:
		e, derr := wire.DecodeError(h, body)
		if derr != nil {
			return wire.Welcome{}, nil, fmt.Errorf("%w: %w", ErrProtocol, derr)
		}
		return wire.Welcome{}, nil, serverErr("hello", e)
	default:
		return wire.Welcome{}, nil, protocolErr("%v instead of WELCOME", h.Type)
	}
	w, err := wire.DecodeWelcome(body)
	switch {
	case err != nil:
		return w, nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	case h.ID != id:
		return w, nil, protocolErr("WELCOME id %d, HELLO id %d", h.ID, id)
	case w.Version != wire.Version1:
		return w, nil, protocolErr("WELCOME chose version %d, offered %d..%d", w.Version, wire.Version1, wire.Version1)
	case w.MaxBody < wire.MinMaxBody:
		return w, nil, protocolErr("WELCOME maxBody %d < %d", w.MaxBody, wire.MinMaxBody)
	case w.Features&^c.features() != 0:
		return w, nil, protocolErr("WELCOME accepted features %#x that were not offered", uint32(w.Features&^c.features()))
	}
	rd.SetMaxBody(min(w.MaxBody, c.opts.maxBody))
	return w, fr, nil
}

// learn adds node addresses from WELCOME to the reconnect list.
func (c *Conn) learn(nodes []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range nodes {
		if n != "" && len(c.addrs) < maxAddrs && !slices.Contains(c.addrs, n) {
			c.addrs = append(c.addrs, n)
		}
	}
}

// nextAddr rotates to the next address of the list.
func (c *Conn) nextAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addrIdx = (c.addrIdx + 1) % len(c.addrs)
	return c.addrs[c.addrIdx]
}

func (c *Conn) nextReq() uint32 {
	for {
		if id := c.reqID.Add(1); id != 0 {
			return id
		}
	}
}

// install makes s the current session and (re)subscribes every live
// subscription on it, except that a filtered one ends with
// ErrFiltersUnsupported if s did not accept FeatureFilters. It reports false if the Conn is already closed.
// Publishes kept by WithIdempotence are sent first, before any other
// publish can reach s.
func (c *Conn) install(s *session) bool {
	c.mu.Lock()
	if c.state.Load() == stateClosed {
		c.mu.Unlock()
		return false
	}
	expired := c.resendLocked(s)
	c.cur.Store(s)
	close(c.ready)
	type refused struct {
		sub *Subscription
		err error
	}
	var ended []refused
	for id, sub := range c.subs {
		// A filtered subscription is never resumed without its filter
		// (which would deliver every message): it ends (filter.go).
		if err := sub.filtersRefused(s.welcome); err != nil {
			delete(c.subs, id)
			ended = append(ended, refused{sub, err})
			continue
		}
		c.sendSubscribe(s, sub)
	}
	c.mu.Unlock()
	for _, r := range ended {
		c.log.Warn("filtered subscription ended: the server does not offer filters", "channel", r.sub.channel, "server", s.welcome.ServerName)
		r.sub.terminate(r.err)
	}
	for _, pe := range expired {
		c.complete(pe, 0, unknownOutcome(errRetryOver))
	}
	return true
}

// detach removes s as the current session, so new requests wait for the
// next one.
func (c *Conn) detach(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur.Load() == s {
		c.cur.Store(nil)
		c.ready = make(chan struct{})
	}
}

// waitReady waits until a session is installed, ctx ends or the Conn closes.
func (c *Conn) waitReady(ctx context.Context) error {
	c.mu.Lock()
	ready, err := c.ready, c.closeErr
	c.mu.Unlock()
	if c.state.Load() == stateClosed {
		return err
	}
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closed:
		return c.closedErr()
	}
}

func (c *Conn) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeErr
}

// supervise owns the reconnect loop: it waits for the current session to
// end, then (if reconnecting) dials again with backoff and installs the new
// session, until the Conn closes.
func (c *Conn) supervise(s *session) {
	defer close(c.done)
	attempt := 0
	for {
		select {
		case <-s.done:
		case <-c.closed:
			s.fail(ErrClosed)
		}
		<-s.readerDone
		<-s.writerDone
		if c.state.Load() == stateClosed {
			c.finish(ErrClosed)
			return
		}
		cause := s.error()
		if !c.opts.reconnect {
			if !errors.Is(cause, ErrDisconnected) {
				cause = fmt.Errorf("%w: %w", ErrDisconnected, cause)
			}
			c.finish(fmt.Errorf("%w: %w", ErrClosed, cause))
			return
		}
		c.log.Warn("disconnected", "addr", s.addr, "err", cause)
		if time.Since(s.started) >= healthySession {
			attempt = 0
		}
		var err error
		if s, err = c.reconnect(&attempt); s == nil {
			if err != nil {
				c.log.Error("giving up reconnecting", "err", err)
				c.finish(fmt.Errorf("%w: %w", ErrClosed, err))
			} else {
				c.finish(ErrClosed)
			}
			return
		}
	}
}

// maxAuthRefusals is how many handshakes in a row refused as
// UNAUTHENTICATED end the reconnecting: the credentials are wrong or were
// revoked, retrying them cannot succeed, and a client retrying forever would
// hide it. (Two, not one, so that a single node with a stale configuration
// among several does not end the Conn.)
const maxAuthRefusals = 2

// reconnect dials the addresses in turn with exponential backoff and full
// jitter until one handshake succeeds (returned installed), the Conn closes
// (nil, nil), or maxAuthRefusals handshakes in a row are refused as
// UNAUTHENTICATED (nil and the last refusal).
func (c *Conn) reconnect(attempt *int) (*session, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // a Close interrupts a connection attempt
		select {
		case <-c.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	refused := 0
	for {
		t := time.NewTimer(c.backoff(*attempt))
		select {
		case <-t.C:
		case <-c.closed:
			t.Stop()
			return nil, nil
		}
		*attempt++
		addr := c.nextAddr()
		s, err := c.connect(ctx, addr)
		if err != nil {
			c.log.Warn("reconnect failed", "addr", addr, "attempt", *attempt, "err", err)
			if !isCode(err, wire.CodeUnauthenticated) {
				refused = 0
			} else if refused++; refused >= maxAuthRefusals {
				return nil, err
			}
			continue
		}
		if !c.install(s) {
			s.fail(ErrClosed)
			<-s.readerDone
			<-s.writerDone
			return nil, nil
		}
		return s, nil
	}
}

// backoff returns the delay before reconnect attempt n: uniform in
// [0, min(max, min*2^n)).
func (c *Conn) backoff(n int) time.Duration {
	d := c.opts.backoffMin
	for range min(n, 62) {
		if d >= c.opts.backoffMax {
			break
		}
		d *= 2
	}
	d = min(d, c.opts.backoffMax)
	return rand.N(d) + 1
}

// finish closes the Conn for good with cause and ends every subscription.
func (c *Conn) finish(cause error) {
	c.mu.Lock()
	if c.closeErr == nil {
		c.closeErr = cause
	}
	if c.state.Load() != stateClosed {
		c.state.Store(stateClosed)
		close(c.closed)
	}
	subs := make([]*Subscription, 0, len(c.subs))
	for _, sub := range c.subs {
		subs = append(subs, sub)
	}
	clear(c.subs)
	err := c.closeErr
	retries := c.takeRetriesLocked()
	c.mu.Unlock()
	for _, pe := range retries {
		c.complete(pe, 0, unknownOutcome(err))
	}
	for _, sub := range subs {
		sub.terminate(err)
	}
}

// Close closes the connection at once: publishes awaiting their PUBACK fail
// with an error matching ErrUnknownOutcome and ErrClosed, subscriptions end
// (Next returns ErrClosed after the queued events), and later calls fail
// with ErrClosed. It waits for the Conn's goroutines to exit, so it must not
// be called from a publish callback. Close is idempotent; it returns nil.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.state.Load() != stateClosed {
		c.state.Store(stateClosed)
		if c.closeErr == nil {
			c.closeErr = ErrClosed
		}
		close(c.closed)
	}
	c.mu.Unlock()
	if s := c.cur.Load(); s != nil {
		s.fail(ErrClosed)
	}
	<-c.done
	return nil
}

// Drain closes the Conn gracefully: new publishes and subscriptions fail
// with ErrDraining; it waits until every publish in flight has its outcome,
// unsubscribes every subscription (waiting for UNSUBSCRIBED), then closes.
// If ctx ends first, Drain closes the Conn anyway and returns ctx's error.
func (c *Conn) Drain(ctx context.Context) error {
	c.mu.Lock()
	if c.state.Load() == stateClosed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.state.Store(stateDraining)
	c.mu.Unlock()
	defer c.Close()
	for range cap(c.sem) {
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("client: drain: %w", ctx.Err())
		case <-c.closed:
			return c.closedErr()
		}
	}
	c.mu.Lock()
	subs := make([]*Subscription, 0, len(c.subs))
	for _, sub := range c.subs {
		subs = append(subs, sub)
	}
	c.mu.Unlock()
	var errs []error
	for _, sub := range subs {
		if err := sub.Unsubscribe(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("client: drain: %w", err)
	}
	return nil
}

// Welcome returns the parameters the server sent in the current
// connection's WELCOME, and false while disconnected.
func (c *Conn) Welcome() (wire.Welcome, bool) {
	if s := c.cur.Load(); s != nil {
		return s.welcome, true
	}
	return wire.Welcome{}, false
}

// Addrs returns the addresses the Conn may (re)connect to: the seeds, then
// nodes learned from WELCOME. The slice is a copy.
func (c *Conn) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.addrs)
}
