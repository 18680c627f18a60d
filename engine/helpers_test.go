package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/sluice-rtm/sluice/cluster"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// waitFor is the longest any test waits for one expected event.
const waitFor = 10 * time.Second

// startTest starts a server on 127.0.0.1:0 with test-friendly options,
// adjusted by mutate, and shuts it down when the test ends.
func startTest(t testing.TB, mutate func(*Options)) *Server {
	t.Helper()
	o := DefaultOptions()
	o.Listen = "127.0.0.1:0"
	o.Loops = 2
	o.Logger = slog.New(slog.NewTextHandler(testLogOut(), nil))
	if mutate != nil {
		mutate(&o)
	}
	s, err := Start(o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		if n := s.ownedRunning(); n != 0 {
			t.Errorf("%d of the server's own goroutines still run when Shutdown returned", n)
		}
	})
	return s
}

// rawConn is a test client speaking frames directly over TCP. One
// goroutine at a time may use it. The methods that take no testing.TB
// (the ...Err variants) only return errors, so they may run on goroutines
// other than the test's.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	r  *wire.Reader
	id uint32
}

// dialErr connects to addr; rcvBuf > 0 sets a small socket receive buffer
// before connecting (to make a client that does not read look slow soon).
func dialErr(t testing.TB, addr string, rcvBuf int) (*rawConn, error) {
	d := net.Dialer{Timeout: waitFor}
	if rcvBuf > 0 {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvBuf)
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, r: wire.NewReader(nc, 64<<20)}, nil
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := dialErr(t, addr, 0)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return c
}

// handshakeErr sends HELLO and reads WELCOME.
func (c *rawConn) handshakeErr() (wire.Welcome, error) {
	if err := c.writeErr(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "test"})); err != nil {
		return wire.Welcome{}, err
	}
	h, body, err := c.tryNext(waitFor)
	if err != nil {
		return wire.Welcome{}, err
	}
	if h.Type != wire.TypeWelcome {
		return wire.Welcome{}, fmt.Errorf("want WELCOME, got %v %s", h.Type, describe(h, body))
	}
	return wire.DecodeWelcome(body)
}

// helloRaw dials and completes the handshake.
func helloRaw(t testing.TB, addr string) (*rawConn, wire.Welcome) {
	t.Helper()
	c := dialRaw(t, addr)
	w, err := c.handshakeErr()
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return c, w
}

// helloSmallBuffer is helloRaw with a 4 KiB socket receive buffer: a
// reader that the server outruns as soon as it stops reading.
func helloSmallBuffer(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := dialErr(t, addr, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.handshakeErr(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return c
}

func (c *rawConn) writeErr(b []byte) error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(waitFor))
	_, err := c.nc.Write(b)
	return err
}

func (c *rawConn) write(b []byte) {
	c.t.Helper()
	if err := c.writeErr(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// next reads one frame, failing the test after waitFor.
func (c *rawConn) next() (wire.Header, []byte) {
	c.t.Helper()
	h, body, err := c.tryNext(waitFor)
	if err != nil {
		c.t.Fatalf("read frame: %v", err)
	}
	return h, body
}

// tryNext reads one frame within d; the body is a copy.
func (c *rawConn) tryNext(d time.Duration) (wire.Header, []byte, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
	h, body, err := c.r.Next()
	return h, append([]byte(nil), body...), err
}

func (c *rawConn) nextID() uint32 { c.id++; return c.id }

// describe renders a frame for failure messages.
func describe(h wire.Header, body []byte) string {
	switch h.Type {
	case wire.TypeError:
		if e, err := wire.DecodeError(h, body); err == nil {
			return fmt.Sprintf("ERROR id=%d %v", h.ID, e)
		}
	case wire.TypeGoAway:
		if g, err := wire.DecodeGoAway(body); err == nil {
			return fmt.Sprintf("GOAWAY %v %q", g.Code, g.Text)
		}
	}
	return fmt.Sprintf("%v id=%d len=%d", h.Type, h.ID, len(body))
}

// publish sends an acked PUBLISH and returns the acknowledged position.
func (c *rawConn) publish(ch string, payload []byte) uint64 {
	c.t.Helper()
	pos, err := c.publishBatch(ch, [][]byte{payload})
	if err != nil {
		c.t.Fatalf("publish: %v", err)
	}
	return pos[0]
}

// publishWindow is how many publishes publishBatch keeps in flight.
const publishWindow = 64

// publishBatch publishes payloads to ch with ACK, pipelining a window of
// them, and returns their positions in order. Frames other than PUBACK
// (DATA for the connection's own subscriptions) are ignored.
func (c *rawConn) publishBatch(ch string, payloads [][]byte) ([]uint64, error) {
	pos := make([]uint64, len(payloads))
	for start := 0; start < len(payloads); start += publishWindow {
		end := min(start+publishWindow, len(payloads))
		first := c.id + 1
		var out []byte
		for _, p := range payloads[start:end] {
			out = wire.AppendPublish(out, c.nextID(), wire.FlagAck, ch, p)
		}
		if err := c.writeErr(out); err != nil {
			return nil, fmt.Errorf("write publishes: %w", err)
		}
		for got := 0; got < end-start; {
			h, body, err := c.tryNext(waitFor)
			if err != nil {
				return nil, fmt.Errorf("waiting for acks (%d of %d): %w", got, end-start, err)
			}
			switch h.Type {
			case wire.TypePubAck:
				acks, err := wire.DecodePubAck(body, nil)
				if err != nil {
					return nil, err
				}
				for _, a := range acks {
					i := int(a.ID-first) + start
					if a.ID < first || i >= end || pos[i] != 0 {
						return nil, fmt.Errorf("unexpected or repeated ack %+v", a)
					}
					pos[i] = a.Position
					got++
				}
			case wire.TypeError, wire.TypeGoAway:
				return nil, fmt.Errorf("publish answered by %s", describe(h, body))
			}
		}
	}
	return pos, nil
}

// subscribeErr sends SUBSCRIBE and returns SUBSCRIBED. DATA and GAP frames
// that arrive first (for other subscriptions) are an error; a PING is
// answered and skipped (the server pings a client that was silent for
// PingInterval, which a slow answer on a loaded machine can outlast).
func (c *rawConn) subscribeErr(sb wire.Subscribe) (wire.Subscribed, error) {
	id := c.nextID()
	if err := c.writeErr(wire.AppendSubscribe(nil, id, sb)); err != nil {
		return wire.Subscribed{}, err
	}
	h, body, err := c.tryNext(waitFor)
	for err == nil && h.Type == wire.TypePing {
		if err = c.writeErr(wire.AppendPong(nil, h.ID)); err == nil {
			h, body, err = c.tryNext(waitFor)
		}
	}
	if err != nil {
		return wire.Subscribed{}, err
	}
	if h.Type != wire.TypeSubscribed || h.ID != id {
		return wire.Subscribed{}, fmt.Errorf("want SUBSCRIBED id %d, got %s", id, describe(h, body))
	}
	return wire.DecodeSubscribed(body)
}

// subscribe sends SUBSCRIBE and returns SUBSCRIBED.
func (c *rawConn) subscribe(subID uint32, ch string, k wire.StartKind, arg uint64) wire.Subscribed {
	c.t.Helper()
	s, err := c.subscribeErr(wire.Subscribe{SubID: subID, Start: k, Arg: arg, Channel: []byte(ch)})
	if err != nil {
		c.t.Fatalf("subscribe %q: %v", ch, err)
	}
	return s
}

// event is a message or a gap seen by a raw subscriber.
type event struct {
	sub     uint32
	pos     uint64
	payload string
	gap     *wire.Gap
}

// last is the last position the event covers.
func (e event) last() uint64 {
	if e.gap != nil {
		return e.gap.To
	}
	return e.pos
}

func (e event) String() string {
	if e.gap != nil {
		return fmt.Sprintf("sub %d GAP %d..%d %v", e.sub, e.gap.From, e.gap.To, e.gap.Reason)
	}
	return fmt.Sprintf("sub %d DATA %d (%d bytes)", e.sub, e.pos, len(e.payload))
}

// appendEvents decodes a DATA or GAP frame into events; other frames add
// nothing. ERROR and GOAWAY are returned as errors.
func appendEvents(out []event, h wire.Header, body []byte) ([]event, error) {
	switch h.Type {
	case wire.TypeData:
		first, count, recs, err := wire.DecodeData(body)
		if err != nil {
			return out, err
		}
		for i := uint32(0); i < count; i++ {
			var p []byte
			p, recs, _ = wire.NextRecord(recs)
			out = append(out, event{sub: h.ID, pos: first + uint64(i), payload: string(p)})
		}
	case wire.TypeGap:
		g, err := wire.DecodeGap(body)
		if err != nil {
			return out, err
		}
		out = append(out, event{sub: h.ID, pos: g.From, gap: &g})
	case wire.TypeError, wire.TypeGoAway:
		return out, fmt.Errorf("unexpected %s", describe(h, body))
	}
	return out, nil
}

// events reads frames until n message/gap events arrived.
func (c *rawConn) events(n int) []event {
	c.t.Helper()
	var out []event
	for len(out) < n {
		h, body := c.next()
		var err error
		if out, err = appendEvents(out, h, body); err != nil {
			c.t.Fatal(err)
		}
	}
	return out
}

// eventsUntil reads frames until subscription subID has been given
// (DATA or GAP) every position up to last, and returns all events read.
func (c *rawConn) eventsUntil(subID uint32, last uint64) ([]event, error) {
	var out []event
	for {
		h, body, err := c.tryNext(waitFor)
		if err != nil {
			return out, fmt.Errorf("sub %d waiting for position %d: %w", subID, last, err)
		}
		n := len(out)
		if out, err = appendEvents(out, h, body); err != nil {
			return out, err
		}
		for _, e := range out[n:] {
			if e.sub == subID && e.last() >= last {
				return out, nil
			}
		}
	}
}

// checkStream verifies the contiguity rule of PROTOCOL.md 2.9 for one
// subscription: its events cover from, from+1, ... without holes or
// overlaps, up to to (inclusive). It returns the messages by position.
func checkStream(evs []event, subID uint32, from, to uint64) (map[uint64]string, []wire.Gap, error) {
	msgs := make(map[uint64]string)
	var gaps []wire.Gap
	next := from
	for _, e := range evs {
		if e.sub != subID {
			continue
		}
		if e.pos != next {
			return nil, nil, fmt.Errorf("sub %d: %v, want position %d next", subID, e, next)
		}
		if e.gap != nil {
			gaps = append(gaps, *e.gap)
		} else {
			msgs[e.pos] = e.payload
		}
		next = e.last() + 1
	}
	if next != to+1 {
		return nil, nil, fmt.Errorf("sub %d: stream ends before %d, want up to %d", subID, next, to)
	}
	return msgs, gaps, nil
}

// expectError reads until an ERROR frame and returns it.
func (c *rawConn) expectError() wire.Error {
	c.t.Helper()
	_, e := c.expectErrorFrame()
	return e
}

// expectErrorFrame reads until an ERROR frame and returns its header too.
func (c *rawConn) expectErrorFrame() (wire.Header, wire.Error) {
	c.t.Helper()
	for {
		h, body := c.next()
		if h.Type == wire.TypeError {
			e, err := wire.DecodeError(h, body)
			if err != nil {
				c.t.Fatal(err)
			}
			return h, e
		}
	}
}

// expectClosed reads until the server closes the connection.
func (c *rawConn) expectClosed() {
	c.t.Helper()
	if err := c.closedErr(); err != nil {
		c.t.Fatal(err)
	}
}

// closedErr reads (and drops) frames until the server closes the
// connection; it fails if that does not happen within waitFor of silence.
func (c *rawConn) closedErr() error {
	for {
		_, _, err := c.tryNext(waitFor)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return errors.New("connection not closed by the server")
		}
		return nil
	}
}

func payloadOf(i int) []byte { return []byte(fmt.Sprintf("m%06d", i)) }

// eventually polls cond every millisecond or so until it holds, failing
// the test with msg after d. It is for conditions that become true on
// another goroutine (ticker, event loop) with no event to wait on.
func eventually(t testing.TB, d time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tk := time.NewTicker(time.Millisecond)
	defer tk.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: %s", d, msg)
		}
		<-tk.C
	}
}

// onLoops runs fn on the goroutine of every event loop of s, one after
// the other, and returns when all have run. Tests use it to look at
// loop-owned state without racing with the loop.
func onLoops(t testing.TB, s *Server, fn func(l *loop)) {
	t.Helper()
	for _, l := range s.loopList() {
		done := make(chan struct{})
		l.execute(func() { fn(l); close(done) })
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Fatalf("loop %d did not run the task", l.idx)
		}
	}
}

// checkedPayload builds a self-checking payload of size n (n >= 16)
// identified by (pub, seq): a header with pub, seq, n and the CRC-32 of
// the body, then a body every byte of which is derived from its offset
// and the identity.
func checkedPayload(pub, seq uint32, n int) []byte {
	p := make([]byte, n)
	for i := 16; i < n; i++ {
		p[i] = byte(uint32(i)*2654435761>>13 ^ pub*31 ^ seq*7)
	}
	binary.BigEndian.PutUint32(p[0:], pub)
	binary.BigEndian.PutUint32(p[4:], seq)
	binary.BigEndian.PutUint32(p[8:], uint32(n))
	binary.BigEndian.PutUint32(p[12:], crc32.ChecksumIEEE(p[16:]))
	return p
}

// verifyPayload checks a payload built by checkedPayload and returns its
// identity.
func verifyPayload(p []byte) (pub, seq uint32, err error) {
	if len(p) < 16 {
		return 0, 0, fmt.Errorf("payload of %d bytes is shorter than its header", len(p))
	}
	pub, seq = binary.BigEndian.Uint32(p[0:]), binary.BigEndian.Uint32(p[4:])
	if n := binary.BigEndian.Uint32(p[8:]); int(n) != len(p) {
		return pub, seq, fmt.Errorf("payload %d/%d: %d bytes, header says %d", pub, seq, len(p), n)
	}
	if crc32.ChecksumIEEE(p[16:]) != binary.BigEndian.Uint32(p[12:]) {
		return pub, seq, fmt.Errorf("payload %d/%d: checksum mismatch", pub, seq)
	}
	for i := 16; i < len(p); i++ {
		if p[i] != byte(uint32(i)*2654435761>>13^pub*31^seq*7) {
			return pub, seq, fmt.Errorf("payload %d/%d: byte %d differs", pub, seq, i)
		}
	}
	return pub, seq, nil
}

// subscribeMany sends several SUBSCRIBEs at once and reads until each is
// answered. DATA and GAP frames that arrive meanwhile (a replay may start
// before the next SUBSCRIBED) are returned as events, in order.
func (c *rawConn) subscribeMany(sbs []wire.Subscribe) (map[uint32]wire.Subscribed, []event, error) {
	var out []byte
	ids := make(map[uint32]bool)
	for _, sb := range sbs {
		id := c.nextID()
		ids[id] = true
		out = wire.AppendSubscribe(out, id, sb)
	}
	if err := c.writeErr(out); err != nil {
		return nil, nil, err
	}
	got := make(map[uint32]wire.Subscribed)
	var evs []event
	for len(got) < len(sbs) {
		h, body, err := c.tryNext(waitFor)
		if err != nil {
			return nil, nil, err
		}
		if h.Type == wire.TypeSubscribed && ids[h.ID] {
			s, err := wire.DecodeSubscribed(body)
			if err != nil {
				return nil, nil, err
			}
			got[s.SubID] = s
			continue
		}
		if evs, err = appendEvents(evs, h, body); err != nil {
			return nil, nil, err
		}
	}
	return got, evs, nil
}

// readUntil appends to have the events read until every subscription in
// subIDs has been given (DATA or GAP) every position up to last, counting
// the events already in have.
func (c *rawConn) readUntil(have []event, last uint64, subIDs ...uint32) ([]event, error) {
	done := make(map[uint32]bool)
	mark := func(evs []event) {
		for _, e := range evs {
			if e.last() >= last {
				done[e.sub] = true
			}
		}
	}
	complete := func() bool {
		for _, id := range subIDs {
			if !done[id] {
				return false
			}
		}
		return true
	}
	mark(have)
	for !complete() {
		h, body, err := c.tryNext(waitFor)
		if err != nil {
			return have, fmt.Errorf("subs %v waiting for position %d: %w", subIDs, last, err)
		}
		n := len(have)
		if have, err = appendEvents(have, h, body); err != nil {
			return have, err
		}
		mark(have[n:])
	}
	return have, nil
}

// dumpChannel logs each loop's view of channel ch and the manager's list,
// to explain a stalled reader when a test fails.
func dumpChannel(t testing.TB, s *Server, ch string) {
	t.Helper()
	info, ok := stateInfo(s, ch)
	t.Logf("manager: ok=%v earliest=%d next=%d streamlets=%+v", ok, info.Earliest, info.Next, info.Streamlets)
	onLoops(t, s, func(l *loop) {
		lc := l.chans[ch]
		if lc == nil {
			t.Logf("loop %d: no view", l.idx)
			return
		}
		var curS uint64
		if lc.live.s != nil {
			curS = lc.live.s.ID()
		}
		t.Logf("loop %d: nsubs=%d live=%d catchup=%d live.pos=%d live.s=%d scheduled=%v w=%v",
			l.idx, lc.nsubs, len(lc.liveSubs), len(lc.catchup), lc.live.pos, curS, lc.scheduled.Load(), lc.w != nil)
		for _, su := range append(append([]*sub(nil), lc.liveSubs...), lc.catchup...) {
			t.Logf("  sub %d: lagging=%v skipping=%v from=%d cur=%d outbound=%d armed=%v closing=%v closed=%v",
				su.id, su.lagging, su.skipping, su.skipFrom, su.cur.pos, su.c.outbound(), su.c.watchArmed, su.c.closing, su.c.closed)
		}
	})
}

// testLogOut is where test servers log: nowhere, unless SLUICE_TEST_LOG
// is set (debugging).
func testLogOut() io.Writer {
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}

// clu returns a cluster node's cluster layer (nil on a single node), for
// tests that look into it.
func (s *Server) clu() *cluster.Cluster {
	p, _ := s.plane.(clusterPlane)
	return p.cl
}

// ownedRunning counts the goroutines the server and its cluster layer
// started that have not ended (internal/owned), at this instant: no
// retries, unlike goleak, so a goroutine its owner does not wait for is
// caught even if it would end a moment later.
func (s *Server) ownedRunning() int {
	n := s.owned.Running()
	if cl := s.clu(); cl != nil {
		n += cl.Goroutines()
	}
	if s.pres.sync != nil {
		n += s.pres.sync.Goroutines()
	}
	return n
}

// stateInfo is the channel's committed list in s's replica of the metadata
// state, with the open streamlet's length as s sees it.
func stateInfo(s *Server, ch string) (role.ChannelInfo, bool) {
	var info role.ChannelInfo
	var ok bool
	if p, isCluster := s.plane.(clusterPlane); isCluster {
		info, ok, _ = p.cl.Info(ch, false)
	} else {
		info, ok, _ = s.mgr.Info(ch, false)
	}
	return info, ok
}
