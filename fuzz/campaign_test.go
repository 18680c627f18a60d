package fuzz

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// goodClient publishes numbered messages to one channel on one connection
// and receives them on a subscription of another, as a well-behaved
// application next to misbehaving ones would.
type goodClient struct {
	channel string
	pub     net.Conn
	pr      *wire.Reader
	sub     net.Conn

	mu   sync.Mutex
	acks []uint64 // position of message i, from its PUBACK
	got  []uint64 // position of message i, from DATA
	err  error    // the first thing that went wrong
	more chan struct{}
	done chan struct{} // closed when the subscriber's reader returned
}

// handshake dials and sends HELLO (plus extra frames), returning the
// connection and a reader positioned after WELCOME.
func handshake(addr string, extra []byte) (net.Conn, *wire.Reader, error) {
	nc, err := net.DialTimeout("tcp", addr, syncTimeout)
	if err != nil {
		return nil, nil, err
	}
	_ = nc.SetDeadline(time.Now().Add(syncTimeout))
	b := append(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "good"}), extra...)
	if _, err := nc.Write(b); err != nil {
		nc.Close()
		return nil, nil, err
	}
	r := wire.NewReader(nc, wire.MinMaxBody)
	h, body, err := r.Next()
	if err == nil && h.Type != wire.TypeWelcome {
		err = fmt.Errorf("want WELCOME, got %v %q", h.Type, body)
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, r, nil
}

func startGood(addr, channel string) (*goodClient, error) {
	g := &goodClient{channel: channel, more: make(chan struct{}, 1), done: make(chan struct{})}
	sub, sr, err := handshake(addr, wire.AppendSubscribe(nil, 2,
		wire.Subscribe{SubID: 1, Start: wire.StartLive, Channel: []byte(channel)}))
	if err != nil {
		return nil, err
	}
	_ = sub.SetReadDeadline(time.Now().Add(syncTimeout))
	h, body, err := sr.Next()
	if err == nil && h.Type != wire.TypeSubscribed {
		err = fmt.Errorf("want SUBSCRIBED, got %v %q", h.Type, body)
	}
	if err != nil {
		sub.Close()
		return nil, err
	}
	_ = sub.SetReadDeadline(time.Time{})
	g.sub = sub
	if g.pub, g.pr, err = handshake(addr, nil); err != nil {
		sub.Close()
		return nil, err
	}
	go g.receive(sr)
	return g, nil
}

func (g *goodClient) fail(err error) {
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
}

// receive reads the subscription: only DATA for subID 1 with message
// numbers in order and contiguous positions is acceptable.
func (g *goodClient) receive(r *wire.Reader) {
	defer close(g.done)
	for {
		h, body, err := r.Next()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				g.fail(fmt.Errorf("subscriber: %w", err))
			}
			return
		}
		if h.Type == wire.TypePing && len(body) == 0 {
			// The server pings a client silent for its ping interval
			// (5 s), which a campaign on a loaded machine outlasts: a
			// good client answers.
			if _, err := g.sub.Write(wire.AppendPong(nil, h.ID)); err != nil {
				g.fail(fmt.Errorf("subscriber: pong: %w", err))
				return
			}
			continue
		}
		if h.Type != wire.TypeData || h.ID != 1 {
			g.fail(fmt.Errorf("subscriber got %v id %d %q", h.Type, h.ID, body))
			return
		}
		first, count, recs, err := wire.DecodeData(body)
		if err != nil {
			g.fail(err)
			return
		}
		g.mu.Lock()
		for i := range uint64(count) {
			var p []byte
			p, recs, _ = wire.NextRecord(recs)
			n := len(g.got)
			if want := fmt.Sprintf("good %d", n); string(p) != want {
				g.mu.Unlock()
				g.fail(fmt.Errorf("subscriber got %q at %d, want %q", p, first+i, want))
				return
			}
			if n > 0 && first+i != g.got[n-1]+1 {
				g.mu.Unlock()
				g.fail(fmt.Errorf("message %d at position %d after %d", n, first+i, g.got[n-1]))
				return
			}
			g.got = append(g.got, first+i)
		}
		g.mu.Unlock()
		select {
		case g.more <- struct{}{}:
		default:
		}
	}
}

// publishWindow publishes the next n messages with ACK and waits for their
// acknowledgements.
func (g *goodClient) publishWindow(n int) error {
	g.mu.Lock()
	next := len(g.acks)
	g.mu.Unlock()
	var b []byte
	for i := range n {
		b = wire.AppendPublish(b, uint32(next+i+1), wire.FlagAck, g.channel, []byte(fmt.Sprintf("good %d", next+i)))
	}
	_ = g.pub.SetDeadline(time.Now().Add(syncTimeout))
	if _, err := g.pub.Write(b); err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	for got := 0; got < n; {
		h, body, err := g.pr.Next()
		if err != nil {
			return fmt.Errorf("publisher: %w", err)
		}
		if h.Type != wire.TypePubAck {
			return fmt.Errorf("publisher got %v %q", h.Type, body)
		}
		acks, err := wire.DecodePubAck(body, nil)
		if err != nil {
			return err
		}
		g.mu.Lock()
		for _, a := range acks {
			if want := uint32(len(g.acks) + 1); a.ID != want {
				g.mu.Unlock()
				return fmt.Errorf("PUBACK for %d, want %d", a.ID, want)
			}
			if k := len(g.acks); k > 0 && a.Position != g.acks[k-1]+1 {
				g.mu.Unlock()
				return fmt.Errorf("message %d acknowledged at %d after %d", k, a.Position, g.acks[k-1])
			}
			g.acks = append(g.acks, a.Position)
		}
		g.mu.Unlock()
		got += len(acks)
	}
	// Wait until the subscriber has the window too: a well-behaved
	// application reads what it asked for, so the server never has a
	// reason to skip it as slow.
	return g.caughtUp()
}

// caughtUp waits until the subscriber has received every acknowledged
// message.
func (g *goodClient) caughtUp() error {
	deadline := time.After(syncTimeout)
	for {
		g.mu.Lock()
		have, want, err := len(g.got), len(g.acks), g.err
		g.mu.Unlock()
		if err != nil {
			return err
		}
		if have >= want {
			return nil
		}
		select {
		case <-g.more:
		case <-g.done:
		case <-deadline:
			return fmt.Errorf("subscriber has %d of %d messages after %v", have, want, syncTimeout)
		}
	}
}

// finish waits until the subscriber has every acknowledged message at the
// acknowledged positions, then closes both connections.
func (g *goodClient) finish() error {
	defer func() {
		g.pub.Close()
		g.sub.Close()
		<-g.done
	}()
	if err := g.caughtUp(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.got) != len(g.acks) {
		return fmt.Errorf("subscriber got %d messages, %d were published", len(g.got), len(g.acks))
	}
	for i := range g.acks {
		if g.got[i] != g.acks[i] {
			return fmt.Errorf("message %d delivered at %d, acknowledged at %d", i, g.got[i], g.acks[i])
		}
	}
	return nil
}

// Campaign size: a few thousand frames in total, in bounded time.
const (
	campaignWorkers = 3
	campaignFrames  = 1500 // per worker
	campaignTime    = 60 * time.Second
	campaignHolders = 64      // connections left hanging inside a frame
	campaignFloods  = 4       // connections that send a flood of random bytes
	floodBytes      = 1 << 20 // per flood
)

// holdPartial opens n connections that complete HELLO and then send half
// a frame header and nothing more, and returns a function closing them.
// They tie up server state for the whole campaign, as a slowloris client
// would.
func holdPartial(addr string, n int) (func(), error) {
	var held []net.Conn
	release := func() {
		for _, nc := range held {
			nc.Close()
		}
	}
	for range n {
		nc, _, err := handshake(addr, []byte{0, 0, 0})
		if err != nil {
			release()
			return nil, err
		}
		held = append(held, nc)
	}
	return release, nil
}

// flood sends HELLO and then floodBytes of random bytes in one write on
// one connection, judged by the protocol model like any fuzz input.
func flood(addr string, rng *rand.Rand) error {
	fc, err := dialF(addr)
	if err != nil {
		return err
	}
	fc.write(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "flood"}))
	junk := make([]byte, floodBytes)
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	fc.write(junk)
	return fc.finish()
}

// TestMalformedCampaign runs a fixed pseudo-random campaign of
// misbehaving clients (random bytes, truncated, oversized, mutated and
// out-of-order frames, EOF in the middle of a frame, clients on two
// connections at once, floods of random bytes, and connections left
// hanging inside a frame) against the live server while a well-behaved
// client keeps publishing and receiving. Every misbehaving connection is
// judged by the protocol model as in FuzzServer; the good client must see
// every message it published exactly once, in order, at its acknowledged
// position; afterwards a probe still works, no goroutine is left over and
// the heap is bounded.
func TestMalformedCampaign(t *testing.T) {
	addr := server(t)
	heapBaseline()
	before := runtime.NumGoroutine()
	good, err := startGood(addr, fmt.Sprintf("campaign.good.%d", rand.Uint32()))
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		frames  atomic.Int64
		inputs  atomic.Int64
		stop    atomic.Bool
		errsMu  sync.Mutex
		errs    []error
		timeout = time.Now().Add(campaignTime)
	)
	for w := range campaignWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(0x5eed, uint64(w)))
			for n := 0; n < campaignFrames && !stop.Load() && time.Now().Before(timeout); {
				data := make([]byte, 16+rng.IntN(500))
				for i := range data {
					data[i] = byte(rng.Uint32())
				}
				d, err := runInput(addr, data)
				n += d.frames
				frames.Add(int64(d.frames))
				inputs.Add(1)
				if err != nil {
					errsMu.Lock()
					errs = append(errs, fmt.Errorf("worker %d input % x: %w", w, data, err))
					errsMu.Unlock()
					stop.Store(true)
				}
			}
		}()
	}
	release, err := holdPartial(addr, campaignHolders)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	for i := range campaignFloods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := flood(addr, rand.New(rand.NewPCG(0xf100d, uint64(i)))); err != nil {
				errsMu.Lock()
				errs = append(errs, fmt.Errorf("flood %d: %w", i, err))
				errsMu.Unlock()
			}
		}()
	}
	campaignDone := make(chan struct{})
	go func() { wg.Wait(); close(campaignDone) }()
	windows := 0
publish:
	for {
		select {
		case <-campaignDone:
			break publish
		default:
		}
		if err := good.publishWindow(16); err != nil {
			stop.Store(true)
			<-campaignDone
			t.Fatalf("good client after %d windows: %v", windows, err)
		}
		windows++
	}
	if err := good.finish(); err != nil {
		t.Fatalf("good client: %v", err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if time.Now().After(timeout) {
		t.Fatalf("campaign sent only %d frames in %v", frames.Load(), campaignTime)
	}
	t.Logf("%d frames in %d inputs; the good client published and received %d messages", frames.Load(), inputs.Load(), windows*16)
	if windows == 0 {
		t.Fatal("the good client published nothing during the campaign")
	}
	release()
	if err := errors.Join(probe(addr), settle(before), heapCheck()); err != nil {
		t.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("heap in use after the campaign: %.1f MiB (%.1f MiB at the start, bound %d MiB)",
		float64(ms.HeapInuse)/(1<<20), float64(heapBase)/(1<<20), heapBound>>20)
}

// TestProbeDetectsDeadServer makes sure the after-input probe can fail:
// against a port where nothing listens it must report an error.
func TestProbeDetectsDeadServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := probe(addr); err == nil {
		t.Fatal("probe succeeded against a closed port")
	}
}

// TestHarnessDetectsMisbehaviour checks the checkers on a fake server
// that answers every connection with a PONG to a PING it never got and
// then a DATA frame for a subscription that does not exist.
func TestHarnessDetectsMisbehaviour(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			w := wire.Welcome{Version: 1, MaxPayload: maxPayload, MaxBody: serverMaxBody, MaxSubs: maxSubs}
			b := wire.AppendWelcome(nil, 1, w)
			b = wire.AppendData(b, 9, 1, []byte("stray"))
			_, _ = nc.Write(b)
			_, _ = nc.Read(make([]byte, 64))
			nc.Close()
		}
	}()
	_, err = runInput(ln.Addr().String(), script(nil).hello(1, 0, 0).ping(2))
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("not active")) {
		t.Fatalf("runInput = %v, want the stray DATA reported", err)
	}
}

// TestCheckAnswers makes sure the answer accounting can fail: a missing
// answer, a second answer, an answer of the wrong type or code, and an
// answer to a request that needs none are reported.
func TestCheckAnswers(t *testing.T) {
	m := newModel()
	m.feed(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1}))
	m.feed(wire.AppendPing(nil, 7))
	m.feed(wire.AppendPublish(nil, 8, wire.FlagAck, "fz.a", nil))
	m.feed(wire.AppendPublish(nil, 9, 0, "bad name", nil))
	m.feed(wire.AppendPublish(nil, 10, 0, "fz.a", nil))
	m.feed(wire.AppendSubscribe(nil, 11, wire.Subscribe{SubID: 3, Channel: []byte("fz.a")}))
	m.feed(wire.AppendSubscribe(nil, 12, wire.Subscribe{SubID: 3, Channel: []byte("fz.b")}))
	m.feed(wire.AppendUnsubscribe(nil, 13, 4))
	if m.closed {
		t.Fatalf("model closed: %s", m.why)
	}
	answer := func(frames ...[]byte) error {
		mm := m
		mm.expect = slices.Clone(m.expect)
		oc := newOutCheck()
		for _, f := range append([][]byte{wire.AppendWelcome(nil, 1, wire.Welcome{Version: 1, MaxPayload: maxPayload,
			MaxBody: serverMaxBody, MaxSubs: maxSubs})}, frames...) {
			h, body, _, err := wire.Split(f, ^uint32(0))
			if err != nil {
				t.Fatal(err)
			}
			if err := oc.frame(h, body); err != nil {
				return err
			}
		}
		return mm.checkAnswers(oc.answers)
	}
	pong := wire.AppendPong(nil, 7)
	refusal := wire.AppendError(nil, 9, wire.Error{Code: wire.CodeInvalidChannel})
	subscribed := wire.AppendSubscribed(nil, 11, wire.Subscribed{SubID: 3, First: 5, Earliest: 1, Next: 5, Epoch: 1})
	exists := wire.AppendError(nil, 12, wire.Error{Code: wire.CodeSubscriptionExists})
	unknown := wire.AppendError(nil, 13, wire.Error{Code: wire.CodeUnknownSubscription})
	ack := wire.AppendPubAck(nil, []wire.Ack{{ID: 8, Position: 5}})
	if err := answer(pong, refusal, subscribed, exists, unknown, ack); err != nil {
		t.Fatalf("complete answers: %v", err)
	}
	for name, frames := range map[string][][]byte{
		"missing refusal":    {pong, subscribed, exists, unknown, ack},
		"second PONG":        {pong, pong, refusal, subscribed, exists, unknown, ack},
		"PONG for a publish": {pong, wire.AppendPong(nil, 8), refusal, subscribed, exists, unknown},
		"wrong code": {pong, wire.AppendError(nil, 9, wire.Error{Code: wire.CodePayloadTooLarge}),
			subscribed, exists, unknown, ack},
		"second subscription accepted": {pong, refusal, subscribed,
			wire.AppendSubscribed(nil, 12, wire.Subscribed{SubID: 3, First: 5, Earliest: 1, Next: 5, Epoch: 1}), unknown, ack},
		"answer to a publish without ACK": {pong, refusal, subscribed, exists, unknown, ack,
			wire.AppendPubAck(nil, []wire.Ack{{ID: 10, Position: 6}})},
	} {
		if err := answer(frames...); err == nil {
			t.Errorf("%s: not reported", name)
		}
	}
}

// TestNonReadingClientIsCut: a client that sends PINGs as fast as it can
// and never reads its PONGs must not make the server buffer without bound.
// The server closes it (OutboundLimit is exceeded twice over) long before
// the client has written maxWrite bytes, and the heap stays bounded.
func TestNonReadingClientIsCut(t *testing.T) {
	const maxWrite = 64 << 20
	addr := server(t)
	before := runtime.NumGoroutine()
	nc, _, err := handshake(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var chunk []byte
	for i := range (64 << 10) / wire.HeaderLen {
		chunk = wire.AppendPing(chunk, uint32(i))
	}
	written := 0
	for written < maxWrite {
		_ = nc.SetWriteDeadline(time.Now().Add(syncTimeout))
		n, err := nc.Write(chunk)
		written += n
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("server stopped reading after %d bytes without closing", written)
			}
			t.Logf("server cut the connection after %d MiB: %v", written>>20, err)
			break
		}
	}
	if written >= maxWrite {
		t.Fatalf("server took %d MiB of PINGs from a client that reads no PONG", written>>20)
	}
	nc.Close()
	if err := errors.Join(probe(addr), settle(before), heapCheck()); err != nil {
		t.Fatal(err)
	}
}

// TestHeapCheckDetectsGrowth makes sure the heap bound can fail: with more
// live memory held than the bound allows, heapCheck must report it.
func TestHeapCheckDetectsGrowth(t *testing.T) {
	heapBaseline()
	hold := make([]byte, heapBound-heapBase+(16<<20))
	err := heapCheck()
	runtime.KeepAlive(hold)
	if err == nil {
		t.Fatal("heapCheck accepted a heap over its bound")
	}
	if err := heapCheck(); err != nil {
		t.Fatalf("after release: %v", err)
	}
}
