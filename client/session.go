package client

import (
	"context"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// maxRetainedWriteBuf is the largest write buffer kept for reuse after a
// flush; a larger one (after a burst of big publishes) is dropped.
const maxRetainedWriteBuf = 8 << 20

// noAckQueueLimit bounds the output PublishNoAck lets wait for the writer:
// at or above it, PublishNoAck waits until the writer takes the queue.
const noAckQueueLimit = 1 << 20

// session is one TCP connection's lifetime: its socket, the frames waiting
// to be written, the requests awaiting an answer, and two goroutines, the
// reader (readLoop) and the writer (writeLoop, which also sends PINGs).
// A session never comes back to life: after fail it is replaced.
type session struct {
	// What the reader reads for every DATA frame comes first (one cache
	// line; with thousands of connections each frame finds it cold).
	fr *frameReader // owned by the reader goroutine
	// subsGen counts changes of subs (written under mu). The reader's
	// lookup cache holds the subscription sub found last, its id and
	// subsGen then, and is valid while subsGen is unchanged: a Conn of
	// one subscription, the usual case with many connections, routes DATA
	// without the lock or the map.
	subsGen   atomic.Uint64
	lastGen   uint64
	lastSub   *Subscription
	lastSubID uint32

	c       *Conn
	nc      net.Conn
	addr    string
	welcome wire.Welcome
	started time.Time

	mu      sync.Mutex
	dead    bool                     // fail was called: nothing more is queued or registered
	goaway  bool                     // GOAWAY received: no new requests, answers still read
	err     error                    // why the session died
	wbuf    []byte                   // frames waiting for the writer
	taken   chan struct{}            // closed when the writer takes wbuf; made by a waiting PublishNoAck
	pending pendQueue                // publishes awaiting their PUBACK, in request-id order
	reqs    map[uint32]reqEntry      // SUBSCRIBE/UNSUBSCRIBE request id -> waiter
	subs    map[uint32]*Subscription // subID -> subscription, for DATA/GAP routing
	zin     []byte                   // under mu: an extended body to compress
	zout    []byte                   // under mu: the S2 block of a compressed PUBLISH
	// Credentials (refresh.go), under mu: the client id of the last
	// AUTHED, the timer of the next REFRESH (its function is owned by the
	// session: fail stops it and ends ctx, which its provider call gets),
	// and the id of the REFRESH awaiting its AUTHED.
	clientID  string
	refreshT  *time.Timer
	refreshID uint32
	ctx       context.Context // ends when the session fails
	cancel    context.CancelFunc

	wake       chan struct{} // cap 1: the writer has something to flush
	done       chan struct{} // closed by fail
	readerDone chan struct{}
	writerDone chan struct{}
	pingsOut   atomic.Int32 // PINGs sent without a PONG since
	blocked    atomic.Bool  // the reader waits on a full subscription queue

	// Reader-owned scratch, reused for every PUBACK, and the block queued
	// messages are copied into (copyRecords).
	acks  []wire.Ack
	compl []completion
	blk   []byte

	// tcpInfoReads counts ackedBytes calls (writer-owned; tests).
	tcpInfoReads int
}

// reqEntry is a request awaiting its answer. For SUBSCRIBE, sub is set and
// want is the position asked for (0 unless StartPosition); for UNSUBSCRIBE,
// reply receives the outcome.
type reqEntry struct {
	sub   *Subscription
	want  uint64
	reply chan error
	pres  *presQuery // PRESENCE (presence.go)
}

type completion struct {
	pe  pendEntry
	pos uint64
}

func newSession(c *Conn, nc net.Conn, addr string, w wire.Welcome, fr *frameReader) *session {
	ctx, cancel := context.WithCancel(context.Background())
	return &session{
		c: c, nc: nc, addr: addr, welcome: w, fr: fr, started: time.Now(), ctx: ctx, cancel: cancel,
		reqs:       make(map[uint32]reqEntry),
		subs:       make(map[uint32]*Subscription),
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
		writerDone: make(chan struct{}),
	}
}

func (s *session) error() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// kick wakes the writer.
func (s *session) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// fail ends the session with err (the first call wins): the Conn stops
// using it, the socket is closed, and every publish awaiting its PUBACK
// completes with an error matching ErrUnknownOutcome. Closing the socket
// waits for the reader if it is dispatching a frame on the raw path
// (rawread_linux.go); done, closed first, makes that short.
func (s *session) fail(err error) {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return
	}
	s.dead, s.err = true, err
	s.fr.stopped.Store(true)
	if s.refreshT != nil {
		s.refreshT.Stop()
	}
	s.cancel()
	pend := s.pending.drain(nil)
	s.reqs = nil
	if s.taken != nil {
		close(s.taken) // PublishNoAck callers waiting for room retry elsewhere
		s.taken = nil
	}
	s.mu.Unlock()
	close(s.done)
	s.c.detach(s)
	_ = s.nc.Close()
	uerr := unknownOutcome(err)
	for _, pe := range pend {
		if pe.rt != nil && s.c.queueRetry(pe) {
			continue // sent again on the next session (retry.go)
		}
		s.c.complete(pe, 0, uerr)
	}
}

// enqueuePublish registers pe and queues the PUBLISH frame, with msgID
// and headers if given. It reports false (and no error) if the session no
// longer takes requests. With WithIdempotence, a publish without msgID gets
// the Conn's next automatic id, and pe.rt keeps a copy of the frame for a
// resend (retry.go).
func (s *session) enqueuePublish(channel string, payload, msgID []byte, hs []Header, pe *pendEntry) (bool, error) {
	s.mu.Lock()
	if s.dead || s.goaway {
		s.mu.Unlock()
		return false, nil
	}
	var auto [autoIDLen]byte
	if len(msgID) == 0 && s.c.opts.idempotence > 0 {
		msgID = s.c.autoID(auto[:0])
	}
	ext := len(msgID) > 0 || len(hs) > 0
	if ext && s.welcome.Features&wire.FeatureHeaders == 0 {
		s.mu.Unlock()
		return false, fmt.Errorf("%w (server %s)", ErrHeadersUnsupported, s.welcome.ServerName)
	}
	if n := wire.ExtLen(msgID, hs, len(payload)); uint64(n) > uint64(s.welcome.MaxPayload) {
		s.mu.Unlock()
		if n != len(payload) {
			return false, fmt.Errorf("%w: %d bytes with id and headers, server max %d", ErrPayloadTooLarge, n, s.welcome.MaxPayload)
		}
		return false, fmt.Errorf("%w: %d bytes, server max %d", ErrPayloadTooLarge, len(payload), s.welcome.MaxPayload)
	}
	id := s.c.nextReq()
	start := len(s.wbuf)
	s.appendPublish(id, wire.FlagAck, channel, payload, msgID, hs)
	if s.c.opts.idempotence > 0 && len(msgID) > 0 {
		pe.rt = getRetry(s.wbuf[start:], time.Now(), retryLimit(s.c.opts.idempotence, s.welcome))
	}
	s.pending.push(id, *pe)
	s.mu.Unlock()
	s.kick()
	return true, nil
}

// enqueueNoAck queues a PUBLISH without FlagAck, with headers hs if any
// (WithPropagator's). It reports ok when the frame was queued; otherwise,
// with no error, either wait is a channel closed once the writer has
// taken the queued output (the queue is over its bound) or wait is nil
// and the session no longer takes requests.
func (s *session) enqueueNoAck(channel string, payload []byte, hs []Header) (ok bool, wait <-chan struct{}, err error) {
	s.mu.Lock()
	if s.dead || s.goaway {
		s.mu.Unlock()
		return false, nil, nil
	}
	if len(hs) > 0 && s.welcome.Features&wire.FeatureHeaders == 0 {
		s.mu.Unlock()
		return false, nil, fmt.Errorf("%w (server %s)", ErrHeadersUnsupported, s.welcome.ServerName)
	}
	if n := wire.ExtLen(nil, hs, len(payload)); uint64(n) > uint64(s.welcome.MaxPayload) {
		s.mu.Unlock()
		return false, nil, fmt.Errorf("%w: %d bytes, server max %d", ErrPayloadTooLarge, n, s.welcome.MaxPayload)
	}
	if len(s.wbuf) >= noAckQueueLimit {
		if s.taken == nil {
			s.taken = make(chan struct{})
		}
		wait = s.taken
		s.mu.Unlock()
		s.kick()
		return false, wait, nil
	}
	s.appendPublish(s.c.nextReq(), 0, channel, payload, nil, hs)
	s.mu.Unlock()
	s.kick()
	return true, nil, nil
}

// appendPublish queues a PUBLISH frame: with msgID and headers if given
// (the caller checked FeatureHeaders), and S2-compressed when FeatureS2 was
// negotiated, the bytes after the channel are at least the Conn's
// compression threshold (WithCompression) and the block is smaller. s.mu is
// held.
func (s *session) appendPublish(id uint32, flags wire.Flags, channel string, payload, msgID []byte, hs []Header) {
	ext := len(msgID) > 0 || len(hs) > 0
	min := s.c.opts.compressMin
	if s.welcome.Features&wire.FeatureS2 == 0 || min <= 0 || wire.ExtLen(msgID, hs, len(payload)) < min {
		if ext {
			s.wbuf = wire.AppendPublishExt(s.wbuf, id, flags, channel, msgID, hs, payload)
		} else {
			s.wbuf = wire.AppendPublish(s.wbuf, id, flags, channel, payload)
		}
		return
	}
	rest := payload
	if ext {
		s.zin = wire.AppendExt(s.zin[:0], msgID, hs, payload)
		rest, flags = s.zin, flags|wire.FlagExt
	}
	start := len(s.wbuf)
	s.wbuf, s.zout = wire.AppendPublishS2(s.wbuf, id, flags, channel, rest, s.zout)
	if len(s.zout) >= len(rest) { // did not pay: send it as it is
		s.wbuf = s.wbuf[:start]
		if ext {
			s.wbuf = wire.AppendPublishExt(s.wbuf, id, flags&^wire.FlagExt, channel, msgID, hs, payload)
		} else {
			s.wbuf = wire.AppendPublish(s.wbuf, id, flags, channel, payload)
		}
	} else {
		s.c.compressed.Add(1)
	}
	if cap(s.zin) > 1<<20 {
		s.zin = nil
	}
	if cap(s.zout) > 1<<20 {
		s.zout = nil
	}
}

// control registers a request and queues its frame; false if the session
// no longer takes requests.
func (s *session) control(id uint32, e reqEntry, frame []byte) bool {
	s.mu.Lock()
	if s.dead || s.goaway {
		s.mu.Unlock()
		return false
	}
	s.reqs[id] = e
	if e.sub != nil {
		s.subs[e.sub.id] = e.sub
		s.subsGen.Add(1)
	}
	s.wbuf = append(s.wbuf, frame...)
	s.mu.Unlock()
	s.kick()
	return true
}

// queue appends a frame that needs no answer (PING, PONG).
func (s *session) queue(appendFrame func([]byte) []byte) {
	s.mu.Lock()
	if !s.dead {
		s.wbuf = appendFrame(s.wbuf)
	}
	s.mu.Unlock()
	s.kick()
}

// busyProgress and maxBusyIntervals: a ping interval in which the server's
// TCP stack acknowledged at least busyProgress bytes of this connection is
// not counted against an unanswered PING, at most maxBusyIntervals times in
// a row (writeLoop).
const (
	busyProgress     = 64 << 10
	maxBusyIntervals = 10
)

// writeLoop writes queued frames, coalescing everything queued since the
// last write into one Write call, and sends a PING every ping interval,
// failing the session when two PINGs went unanswered. Two cases delay a
// PONG legitimately: the reader blocked on a full subscription queue, and
// a server that reads this connection, only slower than the client writes,
// so that the PING waits behind megabytes of publishes in the socket
// buffers (a publisher to a server at load average 24 on 2 cores: the
// PONG took over 10 s). An interval in which the server's TCP stack
// acknowledged at least busyProgress bytes (TCP_INFO, Linux; measured
// only at ticks that find a PING unanswered) does not count, at most
// maxBusyIntervals in a row: a paused server stops
// acknowledging once its receive buffer is full, and an idle connection's
// PINGs alone are far below busyProgress, so both still fail after two.
func (s *session) writeLoop() {
	defer close(s.writerDone)
	var tick <-chan time.Time
	wt := minWriteTimeout
	if pi := s.welcome.PingInterval; pi > 0 {
		t := time.NewTicker(pi)
		defer t.Stop()
		tick = t.C
		wt = max(wt, 2*pi)
	}
	var spare []byte
	// acked is TCP_INFO's acknowledged bytes at the previous tick, if
	// measured (measuredAcked): only a tick that finds a PING unanswered
	// measures, so a healthy connection, whose PONG comes within the
	// interval, makes no getsockopt (with 10,000 connections in one
	// process those were 2,000 system calls a second). The first tick
	// with a PING unanswered has nothing to compare with and counts it
	// as not reading: it sends a second PING, as before, and the next
	// tick decides against its measure.
	var acked uint64
	measuredAcked := false
	busy := 0 // intervals in a row not counted against an unanswered PING
	for {
		select {
		case <-s.wake:
		case <-tick:
			out := s.pingsOut.Load()
			reading := false
			if out > 0 {
				n, ok := ackedBytes(s.nc)
				s.tcpInfoReads++
				reading = ok && measuredAcked && n >= acked+busyProgress
				acked, measuredAcked = n, ok
			} else {
				measuredAcked = false
			}
			if out == 0 || !reading {
				busy = 0
			}
			if s.blocked.Load() {
				s.pingsOut.Store(0)
			} else if out > 0 && reading && busy < maxBusyIntervals {
				busy++ // the PING waits behind data the server is taking
				continue
			} else if out >= 2 {
				s.fail(fmt.Errorf("%w: %w after %v", ErrDisconnected, ErrPingTimeout, 2*s.welcome.PingInterval))
				return
			}
			s.pingsOut.Add(1)
			s.queue(func(b []byte) []byte { return wire.AppendPing(b, 0) })
		case <-s.done:
			return
		}
		s.mu.Lock()
		buf := s.wbuf
		s.wbuf = spare[:0]
		if s.taken != nil {
			close(s.taken) // wake PublishNoAck callers waiting for room
			s.taken = nil
		}
		s.mu.Unlock()
		if len(buf) > 0 {
			_ = s.nc.SetWriteDeadline(time.Now().Add(wt))
			if _, err := s.nc.Write(buf); err != nil {
				s.fail(fmt.Errorf("%w: write: %w", ErrDisconnected, err))
				return
			}
		}
		if cap(buf) <= maxRetainedWriteBuf {
			spare = buf[:0]
		} else {
			spare = nil
		}
	}
}

// readLoop reads and dispatches frames until the connection fails.
func (s *session) readLoop() {
	defer close(s.readerDone)
	if err := s.fr.run(s.dispatch); err != nil {
		s.fail(err)
	}
}

// dispatch handles one server frame; an error ends the session.
func (s *session) dispatch(h wire.Header, body []byte) error {
	switch h.Type {
	case wire.TypePubAck:
		return s.onPubAck(body)
	case wire.TypeData:
		return s.onData(h, body)
	case wire.TypeGap:
		g, err := wire.DecodeGap(body)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		if g.From == 0 || g.To == math.MaxUint64 {
			return protocolErr("GAP %d-%d out of range", g.From, g.To)
		}
		if sub := s.sub(h.ID); sub != nil {
			sub.onGap(s, g)
		}
		return nil
	case wire.TypeSubscribed:
		return s.onSubscribed(h, body)
	case wire.TypePresenceState, wire.TypePresenceEvent, wire.TypeOccupancy:
		if s.welcome.Features&wire.FeaturePresence == 0 {
			return protocolErr("%v, but presence was not negotiated", h.Type)
		}
		switch h.Type {
		case wire.TypePresenceState:
			return s.onPresenceState(h, body)
		case wire.TypePresenceEvent:
			return s.onPresenceEvent(h, body)
		}
		return s.onOccupancy(h, body)
	case wire.TypeUnsubscribed:
		subID, err := wire.DecodeUnsubscribed(body)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		s.mu.Lock()
		if h.ID == 0 {
			// The server ended the subscription (PROTOCOL.md 2.7).
			sub := s.subs[subID]
			delete(s.subs, subID)
			s.subsGen.Add(1)
			s.mu.Unlock()
			if sub != nil {
				sub.end(errRevoked)
			}
			return nil
		}
		e, ok := s.reqs[h.ID]
		delete(s.reqs, h.ID)
		delete(s.subs, subID)
		s.subsGen.Add(1)
		s.mu.Unlock()
		if ok && e.reply != nil {
			e.reply <- nil
		}
		return nil
	case wire.TypePing:
		if err := wire.DecodePing(body); err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		s.queue(func(b []byte) []byte { return wire.AppendPong(b, h.ID) })
		return nil
	case wire.TypePong:
		if err := wire.DecodePong(body); err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		s.pingsOut.Store(0)
		return nil
	case wire.TypeError:
		e, err := wire.DecodeError(h, body)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		return s.onError(h.ID, e)
	case wire.TypeAuthed:
		return s.onAuthed(h, body)
	case wire.TypeFData:
		return s.onFData(h, body)
	case wire.TypeGoAway:
		g, err := wire.DecodeGoAway(body)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		s.onGoAway(g)
		return nil
	default:
		return protocolErr("unexpected %v frame from server", h.Type)
	}
}

// sub returns the subscription subID routes to, or nil; reader only.
func (s *session) sub(subID uint32) *Subscription {
	if s.lastSub != nil && subID == s.lastSubID && s.subsGen.Load() == s.lastGen {
		return s.lastSub // subs unchanged since it was looked up
	}
	s.mu.Lock()
	sub, gen := s.subs[subID], s.subsGen.Load()
	s.mu.Unlock()
	if sub != nil {
		s.lastSub, s.lastSubID, s.lastGen = sub, subID, gen
	}
	return sub
}

func (s *session) onPubAck(body []byte) error {
	acks, err := wire.DecodePubAck(body, s.acks[:0])
	s.acks = acks[:0]
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	compl := s.compl[:0]
	s.mu.Lock()
	for _, a := range acks {
		// An ack for an unknown id (e.g. one already failed) is ignored.
		if pe, ok := s.pending.take(a.ID); ok {
			compl = append(compl, completion{pe, a.Position})
		}
	}
	s.mu.Unlock()
	for i := range compl {
		s.c.complete(compl[i].pe, compl[i].pos, nil)
		compl[i] = completion{}
	}
	s.compl = compl[:0]
	return nil
}

func (s *session) onData(h wire.Header, body []byte) error {
	var first uint64
	var count uint32
	var records []byte
	var err error
	owned := false
	if h.Flags&wire.FlagCompressed != 0 {
		if s.welcome.Features&wire.FeatureS2 == 0 {
			return protocolErr("DATA with flag COMPRESSED, but S2 was not negotiated")
		}
		// A fresh buffer per frame: the messages alias it (no second copy).
		first, count, records, _, err = wire.DecodeDataS2(body, nil, s.fr.rd.MaxBody())
		owned = true
	} else {
		first, count, records, err = wire.DecodeData(body)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	// The last position must leave room for "next position" (last+1).
	if first == 0 || first+uint64(count) < first {
		return protocolErr("DATA positions %d+%d out of range", first, count)
	}
	if sub := s.sub(h.ID); sub != nil {
		sub.onData(s, first, count, records, owned)
	}
	return nil
}

func (s *session) onSubscribed(h wire.Header, body []byte) error {
	info, err := wire.DecodeSubscribed(body)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	s.mu.Lock()
	e, ok := s.reqs[h.ID]
	delete(s.reqs, h.ID)
	s.mu.Unlock()
	switch {
	case !ok:
		return nil // answer to a SUBSCRIBE abandoned by a cancelled Subscribe
	case e.sub == nil:
		return protocolErr("SUBSCRIBED answers request %d, which was no SUBSCRIBE", h.ID)
	case info.SubID != e.sub.id:
		return protocolErr("SUBSCRIBED for sub %d answers SUBSCRIBE of sub %d", info.SubID, e.sub.id)
	}
	e.sub.onSubscribed(s, e.want, info)
	return nil
}

// onError routes an ERROR to the request it answers. id 0, or a fatal code
// that answers nothing we know, ends the session.
func (s *session) onError(id uint32, e wire.Error) error {
	if id == 0 {
		return serverErr("connection", e)
	}
	s.mu.Lock()
	pe, isPub := s.pending.take(id)
	re, isReq := s.reqs[id]
	delete(s.reqs, id)
	if isReq && re.sub != nil {
		delete(s.subs, re.sub.id)
		s.subsGen.Add(1)
	}
	s.mu.Unlock()
	switch {
	case isPub && e.Code == wire.CodeOutcomeUnknown:
		s.c.complete(pe, 0, unknownOutcome(serverErr("publish", e)))
	case isPub:
		s.c.complete(pe, 0, serverErr("publish", e))
	case isReq && re.reply != nil:
		if e.Code == wire.CodeUnknownSubscription {
			re.reply <- nil // already gone: the goal of UNSUBSCRIBE is met
		} else {
			re.reply <- serverErr("unsubscribe", e)
		}
	case isReq && re.sub != nil:
		re.sub.onSubscribeError(s, e)
	case isReq && re.pres != nil:
		re.pres.failed(serverErr("presence", e))
	case e.Code.Fatal():
		return serverErr("connection", e)
	default:
		s.c.log.Warn("server error for unknown request", "id", id, "err", e)
	}
	if e.Code.Fatal() {
		return serverErr("connection", e)
	}
	return nil
}

// onGoAway stops new requests on this session (they wait for the next one),
// moves the reconnect cursor past this address, and drops the connection
// after a grace period if the server has not closed it by then.
func (s *session) onGoAway(g wire.GoAway) {
	s.c.log.Info("server going away", "addr", s.addr, "code", g.Code, "text", g.Text)
	s.mu.Lock()
	s.goaway = true
	s.mu.Unlock()
	s.c.detach(s)
	cause := &ServerError{Op: "goaway", Err: wire.Error{Code: g.Code, Retriable: true, Text: g.Text}}
	t := time.AfterFunc(goawayGrace, func() { s.fail(fmt.Errorf("%w: %w", ErrDisconnected, cause)) })
	go func() {
		<-s.done
		t.Stop()
	}()
}
