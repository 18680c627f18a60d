package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// shortLived makes streamlets close after 5 messages or 50ms and expire
// ttl after they close.
func shortLived(ttl time.Duration) func(*Options) {
	return func(o *Options) {
		o.LimitMsgs = 5
		o.LimitLife = 50 * time.Millisecond
		o.TTL = ttl
	}
}

func streamletIDs(info role.ChannelInfo) []uint64 {
	ids := make([]uint64, len(info.Streamlets))
	for i, r := range info.Streamlets {
		ids[i] = r.ID
	}
	return ids
}

// waitExpired polls the committed list until every position before upTo
// has expired, checking at every look that expiry only removed a prefix of
// the streamlet list (a later streamlet never goes before an earlier one),
// and then that what was removed is no longer hosted (the host frees it as
// it applies the change, just after the list shows it).
func waitExpired(t *testing.T, s *Server, ch string, upTo uint64) role.ChannelInfo {
	t.Helper()
	info, _ := stateInfo(s, ch)
	seen := streamletIDs(info)
	var last role.ChannelInfo
	var removed []uint64
	eventually(t, waitFor, fmt.Sprintf("positions before %d of %q expire", upTo, ch), func() bool {
		info, ok := stateInfo(s, ch)
		if !ok {
			t.Fatalf("channel %q was dropped while it had a reader", ch)
		}
		ids := streamletIDs(info)
		k := 0
		for k < len(seen) && (len(ids) == 0 || seen[k] != ids[0]) {
			k++
		}
		if !slices.Equal(seen[k:], ids[:min(len(ids), len(seen)-k)]) {
			t.Fatalf("streamlets went from %v to %v: not a prefix removal", seen, ids)
		}
		removed = append(removed, seen[:k]...)
		seen, last = ids, info
		return info.Earliest >= upTo
	})
	eventually(t, waitFor, "the expired streamlets freed", func() bool {
		for _, id := range removed {
			if s.host.Streamlet(id) != nil {
				return false
			}
		}
		return true
	})
	return last
}

func TestBehaviour7_ClosedStreamletsServeUntilExpiry(t *testing.T) {
	s := startTest(t, shortLived(300*time.Millisecond))
	const ch = "expiry"
	reader, _ := helloRaw(t, s.Addr())
	reader.subscribe(9, ch, wire.StartLive, 0) // keeps the channel alive

	pub, _ := helloRaw(t, s.Addr())
	payloads := make([][]byte, 12)
	for i := range payloads {
		payloads[i] = payloadOf(i)
	}
	pos, err := pub.publishBatch(ch, payloads)
	if err != nil {
		t.Fatal(err)
	}
	p0, pl := pos[0], pos[11]
	info := checkChain(t, s, ch)
	if len(info.Streamlets) < 3 || !info.Streamlets[0].Closed || info.Earliest != p0 {
		t.Fatalf("want at least 3 streamlets, the first closed at %d: %+v", p0, info)
	}

	// Closed streamlets still serve reads.
	early, _ := helloRaw(t, s.Addr())
	early.subscribe(1, ch, wire.StartPosition, p0)
	evs, err := early.eventsUntil(1, pl)
	if err != nil {
		t.Fatal(err)
	}
	msgs, gaps, err := checkStream(evs, 1, p0, pl)
	if err != nil || len(gaps) > 0 {
		t.Fatalf("reading closed streamlets: %v, gaps %v", err, gaps)
	}
	for i, p := range pos {
		if msgs[p] != string(payloadOf(i)) {
			t.Fatalf("position %d: %q", p, msgs[p])
		}
	}

	// All of them expire (the last one after its lease ends), in order,
	// and are freed.
	info = waitExpired(t, s, ch, pl+1)
	if info.Next != pl+1 || len(info.Streamlets) != 0 {
		t.Fatalf("after expiry: %+v, want nothing retained and next %d", info, pl+1)
	}
	if n := s.host.Load().Hosted; n != 0 {
		t.Fatalf("host still holds %d streamlets", n)
	}

	// A read of the expired range gets GAP expired, then the live data.
	late, _ := helloRaw(t, s.Addr())
	sb := late.subscribe(2, ch, wire.StartPosition, p0)
	if sb.First != pl+1 || sb.Earliest != pl+1 {
		t.Fatalf("SUBSCRIBED %+v after expiry, want first=earliest=%d", sb, pl+1)
	}
	p := pub.publish(ch, []byte("after"))
	ev := late.events(2)
	if g := ev[0].gap; g == nil || g.From != p0 || g.To != pl || g.Reason != wire.GapExpired {
		t.Fatalf("got %v, want GAP %d..%d expired", ev[0], p0, pl)
	}
	if ev[1].pos != p || ev[1].payload != "after" {
		t.Fatalf("got %v, want the live message at %d", ev[1], p)
	}
	// The reader that stayed live saw everything, expiry or not.
	evs, err = reader.eventsUntil(9, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, gaps, err := checkStream(evs, 9, p0, p); err != nil || len(gaps) > 0 {
		t.Fatalf("live reader: %v, gaps %v", err, gaps)
	}
}

func TestEpoch_StableAndLostOnMismatch(t *testing.T) {
	s := startTest(t, shortLived(150*time.Millisecond))
	const ch = "epoch"
	a, _ := helloRaw(t, s.Addr())
	sa := a.subscribe(1, ch, wire.StartLive, 0)
	if sa.Epoch == 0 {
		t.Fatal("epoch 0 in SUBSCRIBED")
	}
	pub, _ := helloRaw(t, s.Addr())
	payloads := make([][]byte, 12)
	for i := range payloads {
		payloads[i] = payloadOf(i)
	}
	pos, err := pub.publishBatch(ch, payloads) // several streamlets
	if err != nil {
		t.Fatal(err)
	}
	b, _ := helloRaw(t, s.Addr())
	if sb := b.subscribe(1, ch, wire.StartEarliest, 0); sb.Epoch != sa.Epoch {
		t.Fatalf("epoch changed from %d to %d across streamlet rollovers", sa.Epoch, sb.Epoch)
	}
	b.nc.Close()
	waitExpired(t, s, ch, pos[11]+1)

	same, _ := helloRaw(t, s.Addr())
	sb, err := same.subscribeErr(wire.Subscribe{SubID: 1, Start: wire.StartPosition, Arg: pos[0], Epoch: sa.Epoch, Channel: []byte(ch)})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Epoch != sa.Epoch {
		t.Fatalf("epoch changed from %d to %d after expiry", sa.Epoch, sb.Epoch)
	}
	if g := same.events(1)[0].gap; g == nil || g.Reason != wire.GapExpired || g.From != pos[0] || g.To != sb.Earliest-1 {
		t.Fatalf("same epoch: got %v, want GAP %d..%d expired", g, pos[0], sb.Earliest-1)
	}

	other, _ := helloRaw(t, s.Addr())
	so, err := other.subscribeErr(wire.Subscribe{SubID: 1, Start: wire.StartPosition, Arg: pos[0], Epoch: sa.Epoch + 1, Channel: []byte(ch)})
	if err != nil {
		t.Fatal(err)
	}
	if so.Epoch != sa.Epoch {
		t.Fatalf("SUBSCRIBED epoch %d, want the channel's %d", so.Epoch, sa.Epoch)
	}
	if g := other.events(1)[0].gap; g == nil || g.Reason != wire.GapLost || g.From != pos[0] || g.To != so.Earliest-1 {
		t.Fatalf("other epoch: got %v, want GAP %d..%d lost", g, pos[0], so.Earliest-1)
	}

	// With every reader gone the channel is dropped; when it is used
	// again it is a new incarnation: a new epoch, positions from 1
	// (behaviour 15; a client that kept the old epoch is told so).
	a.nc.Close()
	same.nc.Close()
	other.nc.Close()
	eventually(t, waitFor, "idle channel dropped", func() bool {
		_, ok := stateInfo(s, ch)
		return !ok
	})
	again, _ := helloRaw(t, s.Addr())
	sg := again.subscribe(1, ch, wire.StartLive, 0)
	if sg.Epoch <= sa.Epoch || sg.Next != 1 {
		t.Fatalf("recreated channel: %+v, want an epoch above %d and next 1", sg, sa.Epoch)
	}
	if p := pub.publish(ch, []byte("again")); p != 1 {
		t.Fatalf("recreated channel published at %d, want 1", p)
	}
}

func TestBehaviour8_SubscribersShareOneReadStream(t *testing.T) {
	s := startTest(t, smallStreamlets)
	const ch, conns, perConn = "shared", 8, 5
	pub, _ := helloRaw(t, s.Addr())
	history := make([][]byte, 30)
	for i := range history {
		history[i] = payloadOf(i)
	}
	hpos, err := pub.publishBatch(ch, history)
	if err != nil {
		t.Fatal(err)
	}
	// Half the subscriptions start live, half replay the history and
	// then must merge into the shared stream.
	readers := make([]*rawConn, conns)
	starts := make(map[uint32]uint64)
	early := make([][]event, conns) // events that came with the SUBSCRIBEDs
	for i := range readers {
		readers[i], _ = helloRaw(t, s.Addr())
		var sbs []wire.Subscribe
		for j := range perConn {
			id := uint32(i*perConn + j + 1)
			k := wire.StartLive
			if id%2 == 0 {
				k = wire.StartEarliest
			}
			sbs = append(sbs, wire.Subscribe{SubID: id, Start: k, Channel: []byte(ch)})
		}
		got, evs, err := readers[i].subscribeMany(sbs)
		if err != nil {
			t.Fatal(err)
		}
		for id, sb := range got {
			starts[id] = sb.First
		}
		early[i] = evs
	}
	live := make([][]byte, 30)
	for i := range live {
		live[i] = payloadOf(100 + i)
	}
	lpos, err := pub.publishBatch(ch, live)
	if err != nil {
		t.Fatal(err)
	}
	last := lpos[len(lpos)-1]
	for i, c := range readers {
		var ids []uint32
		for j := range perConn {
			ids = append(ids, uint32(i*perConn+j+1))
		}
		evs, err := c.readUntil(early[i], last, ids...)
		if err != nil {
			t.Fatal(err)
		}
		for j := range perConn {
			id := uint32(i*perConn + j + 1)
			if _, gaps, err := checkStream(evs, id, starts[id], last); err != nil || len(gaps) > 0 {
				t.Fatalf("sub %d: %v, gaps %v", id, err, gaps)
			}
		}
	}
	if starts[2] != hpos[0] {
		t.Fatalf("earliest subscription started at %d, want %d", starts[2], hpos[0])
	}

	// Structure: on each loop one view of the channel, one live cursor at
	// the live edge, every subscription of the loop on it, none replaying.
	total, loopsWithReaders := 0, 0
	onLoops(t, s, func(l *loop) {
		lc := l.chans[ch]
		if lc == nil || lc.nsubs == 0 {
			return
		}
		loopsWithReaders++
		total += lc.nsubs
		if len(lc.liveSubs) != lc.nsubs || len(lc.catchup) != 0 {
			t.Errorf("loop %d: %d subscriptions, %d on the shared stream, %d replaying",
				l.idx, lc.nsubs, len(lc.liveSubs), len(lc.catchup))
		}
		if lc.live.pos != last+1 {
			t.Errorf("loop %d: shared cursor at %d, want %d", l.idx, lc.live.pos, last+1)
		}
		s.gw.mu.Lock()
		gc := s.gw.m[ch]
		s.gw.mu.Unlock()
		if gc == nil || gc.readers[l.idx].Load() != lc {
			t.Errorf("loop %d is not registered as the channel's one reader", l.idx)
		}
	})
	if total != conns*perConn || loopsWithReaders != 2 {
		t.Fatalf("%d subscriptions on %d loops, want %d on 2", total, loopsWithReaders, conns*perConn)
	}
}

func TestBehaviour9_NoPartialMessages(t *testing.T) {
	s := startTest(t, func(o *Options) {
		o.MaxPayload = 300 << 10
		o.LimitSize = 1 << 20
		o.LimitMsgs = 64
		o.OutboundLimit = 64 << 20 // this test is about integrity, not slowness
	})
	const ch, pubs, per, subs = "integrity", 4, 60, 3
	readers := make([]*rawConn, subs)
	var from uint64
	for i := range readers {
		readers[i], _ = helloRaw(t, s.Addr())
		from = readers[i].subscribe(1, ch, wire.StartLive, 0).First
	}
	last := from + pubs*per - 1
	results := make(chan error, subs)
	for _, c := range readers {
		go func() { results <- verifyStream(c, 1, from, last, pubs) }()
	}
	errs := make(chan error, pubs)
	for p := range pubs {
		c, _ := helloRaw(t, s.Addr())
		go func() {
			rng := rand.New(rand.NewPCG(uint64(p), 9))
			payloads := make([][]byte, per)
			for i := range payloads {
				n := 16 + rng.IntN(4096)
				if i%10 == 0 {
					n = 100<<10 + rng.IntN(200<<10)
				}
				payloads[i] = checkedPayload(uint32(p), uint32(i), n)
			}
			_, err := c.publishBatch(ch, payloads)
			errs <- err
		}()
	}
	for range pubs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for range subs {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	// Replay of the same history from the streamlets is as intact.
	c, _ := helloRaw(t, s.Addr())
	c.subscribe(1, ch, wire.StartPosition, from)
	if err := verifyStream(c, 1, from, last, pubs); err != nil {
		t.Fatalf("replay: %v", err)
	}
}

// verifyStream reads subscription subID through position last and checks
// that the stream is contiguous from from, that every payload is intact,
// and that each publisher's messages come in the order it sent them.
func verifyStream(c *rawConn, subID uint32, from, last uint64, pubs int) error {
	evs, err := c.eventsUntil(subID, last)
	if err != nil {
		return err
	}
	msgs, gaps, err := checkStream(evs, subID, from, last)
	if err != nil {
		return err
	}
	if len(gaps) > 0 {
		return fmt.Errorf("unexpected gaps %v", gaps)
	}
	next := make([]uint32, pubs)
	for p := from; p <= last; p++ {
		pub, seq, err := verifyPayload([]byte(msgs[p]))
		if err != nil {
			return fmt.Errorf("position %d: %w", p, err)
		}
		if int(pub) >= pubs || seq != next[pub] {
			return fmt.Errorf("position %d: message %d/%d out of order", p, pub, seq)
		}
		next[pub]++
	}
	return nil
}
