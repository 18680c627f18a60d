package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// background reads a subscriber connection on its own goroutine, keeping
// every event and the last position covered, until stop is called or the
// connection fails.
type background struct {
	c        *rawConn
	mu       sync.Mutex
	evs      []event
	progress atomic.Uint64 // last position covered (DATA or GAP)
	err      error         // why reading ended, when not stopped
	stopping atomic.Bool
	done     chan struct{}
	onStall  func() // called when waitProgress fails
}

func readInBackground(c *rawConn) *background {
	b := &background{c: c, done: make(chan struct{})}
	// No read deadline: a timeout would be sticky in wire.Reader. stop
	// (or the test's cleanup) closes the connection to end the goroutine.
	_ = c.nc.SetReadDeadline(time.Time{})
	go func() {
		defer close(b.done)
		for {
			h, body, err := c.r.Next()
			b.mu.Lock()
			if err != nil {
				if !b.stopping.Load() {
					b.err = err
				}
				b.mu.Unlock()
				return
			}
			if h.Type == wire.TypePing {
				// A live client: the server closes one that stays
				// silent for its IdleTimeout.
				_ = c.writeErr(wire.AppendPong(nil, h.ID))
			}
			n := len(b.evs)
			b.evs, err = appendEvents(b.evs, h, body)
			if err != nil && b.err == nil {
				b.err = err
			}
			for _, e := range b.evs[n:] {
				b.progress.Store(e.last())
			}
			b.mu.Unlock()
		}
	}()
	return b
}

// stop closes the connection, ends the reading and returns the events and
// the error that ended reading before stop, if any.
func (b *background) stop() ([]event, error) {
	b.stopping.Store(true)
	b.c.nc.Close()
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.evs, b.err
}

// waitProgress waits until the reader has covered position p.
func (b *background) waitProgress(t *testing.T, p uint64) {
	t.Helper()
	if b.onStall != nil {
		defer func() {
			if t.Failed() {
				b.onStall()
			}
		}()
	}
	eventually(t, waitFor, fmt.Sprintf("reader reaches position %d", p), func() bool {
		if b.progress.Load() >= p {
			return true
		}
		select {
		case <-b.done:
			_, err := b.stop()
			t.Fatalf("reader stopped before position %d: %v", p, err)
		default:
		}
		return false
	})
}

func TestResumeAfterDisconnect_NoLossNoDuplicate(t *testing.T) {
	s := startTest(t, smallStreamlets)
	const ch, total = "resume", 400
	first, _ := helloRaw(t, s.Addr())
	sb := first.subscribe(1, ch, wire.StartLive, 0)
	from, last := sb.First, sb.First+total-1

	pub, _ := helloRaw(t, s.Addr())
	acked := make(map[uint64]string)
	pubErr := make(chan error, 1)
	go func() {
		for i := 0; i < total; i += 20 {
			payloads := make([][]byte, 20)
			for j := range payloads {
				payloads[j] = payloadOf(i + j)
			}
			pos, err := pub.publishBatch(ch, payloads)
			if err != nil {
				pubErr <- err
				return
			}
			for j, p := range pos {
				acked[p] = string(payloads[j])
			}
		}
		pubErr <- nil
	}()

	// Read part of the stream, then drop the connection mid-stream.
	cut := from + 100
	evs, err := first.eventsUntil(1, cut)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := checkStream(evs, 1, from, evs[len(evs)-1].last())
	if err != nil {
		t.Fatal(err)
	}
	lastSeen := evs[len(evs)-1].last()
	first.nc.Close()

	again, _ := helloRaw(t, s.Addr())
	rs, err := again.subscribeErr(wire.Subscribe{SubID: 1, Start: wire.StartPosition, Arg: lastSeen + 1, Epoch: sb.Epoch, Channel: []byte(ch)})
	if err != nil {
		t.Fatal(err)
	}
	if rs.Epoch != sb.Epoch || rs.First != lastSeen+1 {
		t.Fatalf("resumed SUBSCRIBED %+v, want epoch %d first %d", rs, sb.Epoch, lastSeen+1)
	}
	evs, err = again.eventsUntil(1, last)
	if err != nil {
		t.Fatal(err)
	}
	rest, gaps, err := checkStream(evs, 1, lastSeen+1, last)
	if err != nil || len(gaps) > 0 {
		t.Fatalf("after resume: %v, gaps %v", err, gaps)
	}
	if err := <-pubErr; err != nil {
		t.Fatal(err)
	}
	for p, m := range rest {
		got[p] = m
	}
	if len(got) != total || len(acked) != total {
		t.Fatalf("received %d messages, %d acked, want %d", len(got), len(acked), total)
	}
	for p, m := range acked {
		if got[p] != m {
			t.Fatalf("position %d: received %q, acked %q", p, got[p], m)
		}
	}
}

// slowSetup starts a server with a 64 KiB outbound limit and connects a
// publisher, a fast subscriber that reads on its own goroutine, and a
// slow subscriber with a tiny receive buffer that does not read.
func slowSetup(t *testing.T, policy SlowPolicy) (s *Server, pub, slow *rawConn, fast *background, from uint64) {
	s = startTest(t, func(o *Options) {
		o.OutboundLimit = 64 << 10
		o.SlowPolicy = policy
	})
	slow = helloSmallBuffer(t, s.Addr())
	from = slow.subscribe(1, "slow", wire.StartLive, 0).First
	fc, _ := helloRaw(t, s.Addr())
	fc.subscribe(1, "slow", wire.StartLive, 0)
	fast = readInBackground(fc)
	fast.onStall = func() { t.Logf("fast reader at %d", fast.progress.Load()); dumpChannel(t, s, "slow") }
	pub, _ = helloRaw(t, s.Addr())
	return s, pub, slow, fast, from
}

// publishWindow1K publishes one window of 16 one-KiB messages and returns
// the last position and how long the acks took. A window is well below the
// outbound limit, and the tests wait for the fast subscriber after each,
// so the fast one never has a window's worth waiting in the server.
func publishWindow1K(t *testing.T, pub *rawConn, seq *int) (uint64, time.Duration) {
	t.Helper()
	payloads := make([][]byte, 16)
	for i := range payloads {
		payloads[i] = fmt.Appendf(make([]byte, 0, 1024), "%08d", *seq)[:1024]
		*seq++
	}
	start := time.Now()
	pos, err := pub.publishBatch("slow", payloads)
	if err != nil {
		t.Fatalf("publisher: %v", err)
	}
	return pos[len(pos)-1], time.Since(start)
}

func TestSlowConsumer_SkipWithGapWhileOthersKeepUp(t *testing.T) {
	s, pub, slow, fast, from := slowSetup(t, SlowSkip)
	seq := 0
	var last uint64
	var slowest time.Duration
	// Publish until the server has started skipping the slow subscriber,
	// keeping the fast one within a window of the publisher.
	for w := 0; s.slowSkips.Load() == 0; w++ {
		if w == 1600 { // 25 MiB
			t.Fatal("the slow subscriber was never skipped")
		}
		var d time.Duration
		last, d = publishWindow1K(t, pub, &seq)
		slowest = max(slowest, d)
		fast.waitProgress(t, last)
	}
	skippedAt := last
	for range 3 {
		var d time.Duration
		last, d = publishWindow1K(t, pub, &seq)
		slowest = max(slowest, d)
		fast.waitProgress(t, last)
	}
	t.Logf("skipping began by position %d (%d KiB published); slowest window of acks: %v",
		skippedAt, (skippedAt - from + 1), slowest)

	// Now the slow subscriber reads again. What it had been sent arrives,
	// then, with the next messages, a GAP slow for what it missed.
	sr := readInBackground(slow)
	eventually(t, waitFor, "slow subscriber catches up", func() bool {
		if sr.progress.Load() >= last {
			return true
		}
		last, _ = publishWindow1K(t, pub, &seq)
		fast.waitProgress(t, last)
		return false
	})
	slowEvs, err := sr.stop()
	if err != nil {
		t.Fatalf("slow subscriber: %v", err)
	}
	fastEvs, err := fast.stop()
	if err != nil {
		t.Fatalf("fast subscriber: %v", err)
	}
	if _, gaps, err := checkStream(fastEvs, 1, from, last); err != nil || len(gaps) > 0 {
		t.Fatalf("fast subscriber: %v, gaps %v", err, gaps)
	}
	msgs, gaps, err := checkStream(slowEvs, 1, from, slowEvs[len(slowEvs)-1].last())
	if err != nil {
		t.Fatalf("slow subscriber: %v", err)
	}
	if len(gaps) == 0 {
		t.Fatal("slow subscriber got no GAP")
	}
	for _, g := range gaps {
		if g.Reason != wire.GapSlow {
			t.Fatalf("gap %+v, want reason slow", g)
		}
	}
	for p, m := range msgs {
		if want := fmt.Sprintf("%08d", p-from); m[:8] != want {
			t.Fatalf("slow subscriber: position %d carries %q", p, m[:8])
		}
	}
}

func TestSlowConsumer_DisconnectPolicy(t *testing.T) {
	s, pub, slow, fast, from := slowSetup(t, SlowDisconnect)
	seq := 0
	var last uint64
	for w := 0; s.conns.Load() == 3; w++ {
		if w == 1600 {
			t.Fatal("the slow subscriber was never disconnected")
		}
		last, _ = publishWindow1K(t, pub, &seq)
		fast.waitProgress(t, last)
	}
	eventually(t, waitFor, "slow subscriber disconnected", func() bool { return s.conns.Load() == 2 })
	// The slow client finds, after what had been sent, an ERROR
	// SLOW_CONSUMER (unless the close overtook it) and then the close.
	sawError := false
	for {
		h, body, err := slow.tryNext(waitFor)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("slow connection not closed")
			}
			break
		}
		if h.Type == wire.TypeError || h.Type == wire.TypeGoAway {
			e, _ := wire.DecodeError(h, body)
			if h.Type != wire.TypeError || e.Code != wire.CodeSlowConsumer {
				t.Fatalf("slow subscriber got %s, want ERROR SLOW_CONSUMER", describe(h, body))
			}
			sawError = true
		}
	}
	t.Logf("slow subscriber saw ERROR SLOW_CONSUMER before the close: %v", sawError)
	// The others carry on.
	last, _ = publishWindow1K(t, pub, &seq)
	fast.waitProgress(t, last)
	fastEvs, err := fast.stop()
	if err != nil {
		t.Fatal(err)
	}
	if _, gaps, err := checkStream(fastEvs, 1, from, last); err != nil || len(gaps) > 0 {
		t.Fatalf("fast subscriber: %v, gaps %v", err, gaps)
	}
}

func TestGracefulShutdown(t *testing.T) {
	s := startTest(t, nil)
	sub, _ := helloRaw(t, s.Addr())
	sub.subscribe(1, "bye", wire.StartLive, 0)
	idle, _ := helloRaw(t, s.Addr())
	pub, _ := helloRaw(t, s.Addr())
	p := pub.publish("bye", []byte("last words"))

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- s.Shutdown(ctx) }()

	for i, c := range []*rawConn{sub, idle, pub} {
		var evs []event
		for {
			h, body := c.next()
			if h.Type == wire.TypeGoAway {
				g, err := wire.DecodeGoAway(body)
				if err != nil || g.Code != wire.CodeShuttingDown || h.ID != 0 {
					t.Fatalf("client %d: GOAWAY id=%d %+v %v, want id 0 SHUTTING_DOWN", i, h.ID, g, err)
				}
				break
			}
			var err error
			if evs, err = appendEvents(evs, h, body); err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
		}
		if c == sub && (len(evs) != 1 || evs[0].pos != p) {
			t.Fatalf("subscriber got %v before GOAWAY, want position %d", evs, p)
		}
		_, _, err := c.tryNext(waitFor)
		if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("client %d: after GOAWAY got %v, want EOF", i, err)
		}
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Shutdown did not return")
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Shutdown returned")
	}
	if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("the server still accepts connections after Shutdown")
	}
}

func TestThousandConcurrentConnections(t *testing.T) {
	const n = 1000
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if need := uint64(2*n + 256); lim.Cur < need { // both ends live in this process
		if lim.Max < need {
			t.Fatalf("RLIMIT_NOFILE hard limit %d is below the %d this test needs", lim.Max, need)
		}
		old := lim
		lim.Cur = need
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	}
	s := startTest(t, nil)
	conns := make([]*rawConn, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 20 {
				c, err := dialErr(t, s.Addr(), 0)
				if err == nil {
					_, err = c.handshakeErr()
				}
				if err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := s.conns.Load(); got != n {
		t.Fatalf("server counts %d connections, want %d", got, n)
	}
	// A sample subscribes and publishes; every connection still answers.
	var subs []*rawConn
	for i := 0; i < n; i += 100 {
		conns[i].subscribe(1, "crowd", wire.StartLive, 0)
		subs = append(subs, conns[i])
	}
	var pos []uint64
	for i := 50; i < n; i += 100 {
		pos = append(pos, conns[i].publish("crowd", fmt.Appendf(nil, "from %d", i)))
	}
	for _, c := range subs {
		evs, err := c.eventsUntil(1, pos[len(pos)-1])
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := checkStream(evs, 1, pos[0], pos[len(pos)-1]); err != nil {
			t.Fatal(err)
		}
	}
	var ping []byte
	for i := range conns {
		ping = wire.AppendPing(ping[:0], uint32(i))
		conns[i].write(ping)
	}
	for i, c := range conns {
		h, body := c.next()
		if h.Type != wire.TypePong || h.ID != uint32(i) {
			t.Fatalf("connection %d: got %s, want PONG", i, describe(h, body))
		}
	}
}

// A subscriber that was being skipped when the channel went quiet still
// learns of its gap: once its connection drains, the server sends GAP slow
// up to the live edge without waiting for another message.
func TestSlowConsumer_GapArrivesWhenChannelGoesQuiet(t *testing.T) {
	s, pub, slow, fast, from := slowSetup(t, SlowSkip)
	seq := 0
	var last uint64
	for w := 0; s.slowSkips.Load() == 0; w++ {
		if w == 1600 {
			t.Fatal("the slow subscriber was never skipped")
		}
		last, _ = publishWindow1K(t, pub, &seq)
		fast.waitProgress(t, last)
	}
	last, _ = publishWindow1K(t, pub, &seq)
	fast.waitProgress(t, last)
	// No more publishing: the slow subscriber reads and must cover every
	// position up to last with messages and GAP slow.
	sr := readInBackground(slow)
	sr.waitProgress(t, last)
	evs, err := sr.stop()
	if err != nil {
		t.Fatalf("slow subscriber: %v", err)
	}
	_, gaps, err := checkStream(evs, 1, from, last)
	if err != nil {
		t.Fatalf("slow subscriber: %v", err)
	}
	if len(gaps) == 0 || gaps[len(gaps)-1].Reason != wire.GapSlow {
		t.Fatalf("gaps %v, want a final GAP slow", gaps)
	}
	if _, err := fast.stop(); err != nil {
		t.Fatalf("fast subscriber: %v", err)
	}
}
