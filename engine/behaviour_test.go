package engine

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// smallStreamlets makes streamlets roll over often: 7 messages or 2 KiB.
func smallStreamlets(o *Options) {
	o.MaxPayload = 1000
	o.LimitMsgs = 7
	o.LimitSize = 2048
}

// checkChain verifies the manager's streamlet list for ch: contiguous,
// only the last open, and covering [Earliest, Next).
func checkChain(t *testing.T, s *Server, ch string) role.ChannelInfo {
	t.Helper()
	info, ok := stateInfo(s, ch)
	if !ok {
		t.Fatalf("channel %q does not exist", ch)
	}
	for i, ref := range info.Streamlets {
		if i < len(info.Streamlets)-1 && !ref.Closed {
			t.Fatalf("streamlet %d of %d is open: %+v", i, len(info.Streamlets), info.Streamlets)
		}
		if i > 0 && info.Streamlets[i-1].End != ref.First {
			t.Fatalf("streamlet %d starts at %d, previous ends at %d", i, ref.First, info.Streamlets[i-1].End)
		}
		if ref.Closed && ref.End < ref.First {
			t.Fatalf("streamlet %d ends at %d before its first %d", i, ref.End, ref.First)
		}
	}
	if n := len(info.Streamlets); n > 0 {
		if info.Earliest != info.Streamlets[0].First {
			t.Fatalf("Earliest %d, first streamlet starts at %d", info.Earliest, info.Streamlets[0].First)
		}
		if last := info.Streamlets[n-1]; last.Closed && last.End != info.Next {
			t.Fatalf("Next %d, last closed streamlet ends at %d", info.Next, last.End)
		}
	}
	return info
}

func TestBehaviour1_PublishCreatesChannel(t *testing.T) {
	s := startTest(t, nil)
	const ch = "fresh.channel"
	if _, ok := stateInfo(s, ch); ok {
		t.Fatalf("channel %q exists before it was used", ch)
	}
	pub, _ := helloRaw(t, s.Addr())
	pos := pub.publish(ch, []byte("first"))
	if pos == 0 {
		t.Fatal("position 0 was assigned")
	}
	info := checkChain(t, s, ch)
	if len(info.Streamlets) != 1 || info.Streamlets[0].Closed {
		t.Fatalf("want one open streamlet, got %+v", info.Streamlets)
	}
	if info.Earliest != pos || info.Next != pos+1 || info.Streamlets[0].First != pos {
		t.Fatalf("info %+v after the first publish at %d", info, pos)
	}
	if s.host.Streamlet(info.Streamlets[0].ID) == nil {
		t.Fatalf("streamlet %d is not hosted", info.Streamlets[0].ID)
	}

	sub, _ := helloRaw(t, s.Addr())
	sb := sub.subscribe(1, ch, wire.StartEarliest, 0)
	if sb.First != pos || sb.Earliest != pos || sb.Next != pos+1 || sb.Epoch == 0 {
		t.Fatalf("SUBSCRIBED %+v, want first=earliest=%d next=%d and an epoch", sb, pos, pos+1)
	}
	ev := sub.events(1)
	if ev[0].pos != pos || ev[0].payload != "first" {
		t.Fatalf("got %v, want the first message at %d", ev[0], pos)
	}
}

func TestBehaviour2_PositionsIncreaseWithoutGaps(t *testing.T) {
	s := startTest(t, smallStreamlets)

	t.Run("one publisher", func(t *testing.T) {
		const ch, n = "pos.single", 100
		pub, _ := helloRaw(t, s.Addr())
		payloads := make([][]byte, n)
		for i := range payloads {
			payloads[i] = make([]byte, (i*37)%400) // sizes vary, so both limits close streamlets
		}
		pos, err := pub.publishBatch(ch, payloads)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < n; i++ {
			if pos[i] != pos[i-1]+1 {
				t.Fatalf("position %d after %d (message %d)", pos[i], pos[i-1], i)
			}
		}
		info := checkChain(t, s, ch)
		if len(info.Streamlets) < n/7 {
			t.Fatalf("%d streamlets for %d messages at 7 per streamlet", len(info.Streamlets), n)
		}
		if info.Earliest != pos[0] || info.Next != pos[n-1]+1 {
			t.Fatalf("info covers [%d,%d), published [%d,%d]", info.Earliest, info.Next, pos[0], pos[n-1])
		}
	})

	t.Run("concurrent publishers", func(t *testing.T) {
		const ch, pubs, per = "pos.concurrent", 4, 150
		sub, _ := helloRaw(t, s.Addr())
		sb := sub.subscribe(1, ch, wire.StartLive, 0)
		all := make([][]uint64, pubs)
		errs := make(chan error, pubs)
		conns := make([]*rawConn, pubs)
		for p := range conns {
			conns[p], _ = helloRaw(t, s.Addr()) // round robin: both loops get publishers
		}
		var wg sync.WaitGroup
		for p := range pubs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				payloads := make([][]byte, per)
				for i := range payloads {
					payloads[i] = fmt.Appendf(nil, "p%d-%d-%s", p, i, make([]byte, (i*53)%300))
				}
				pos, err := conns[p].publishBatch(ch, payloads)
				all[p] = pos
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		var flat []uint64
		for p, pos := range all {
			for i := 1; i < len(pos); i++ {
				if pos[i] <= pos[i-1] {
					t.Fatalf("publisher %d: position %d after %d", p, pos[i], pos[i-1])
				}
			}
			flat = append(flat, pos...)
		}
		slices.Sort(flat)
		if flat[0] != sb.First {
			t.Fatalf("first position %d, SUBSCRIBED promised %d", flat[0], sb.First)
		}
		for i := 1; i < len(flat); i++ {
			if flat[i] != flat[i-1]+1 {
				t.Fatalf("positions jump from %d to %d (duplicate or hole)", flat[i-1], flat[i])
			}
		}
		info := checkChain(t, s, ch)
		if info.Next != flat[len(flat)-1]+1 {
			t.Fatalf("Next %d after last position %d", info.Next, flat[len(flat)-1])
		}
		evs, err := sub.eventsUntil(1, flat[len(flat)-1])
		if err != nil {
			t.Fatal(err)
		}
		if _, gaps, err := checkStream(evs, 1, flat[0], flat[len(flat)-1]); err != nil || len(gaps) > 0 {
			t.Fatalf("subscriber stream: %v, gaps %v", err, gaps)
		}
	})
}

func TestBehaviour3_StreamletLimitsRollOver(t *testing.T) {
	t.Run("limit-msgs", func(t *testing.T) {
		s := startTest(t, func(o *Options) { o.LimitMsgs = 7 })
		const ch = "limit.msgs"
		pub, _ := helloRaw(t, s.Addr())
		var pos []uint64
		for i := range 7 {
			pos = append(pos, pub.publish(ch, payloadOf(i)))
		}
		info := checkChain(t, s, ch)
		if len(info.Streamlets) != 1 || info.Streamlets[0].Closed {
			t.Fatalf("after 7 messages: %+v, want one open streamlet", info.Streamlets)
		}
		if n, _ := s.host.Len(info.Streamlets[0].ID); n != 7 {
			t.Fatalf("streamlet holds %d messages, want 7", n)
		}
		// The streamlet is full: it refuses the 8th message, which opens a
		// second streamlet right after it.
		if _, err := s.host.Streamlet(info.Streamlets[0].ID).Append([]byte("x"), time.Now().UnixNano()); err == nil {
			t.Fatal("a full streamlet accepted a write")
		}
		pos = append(pos, pub.publish(ch, payloadOf(7)))
		info = checkChain(t, s, ch)
		if len(info.Streamlets) != 2 {
			t.Fatalf("after 8 messages: %d streamlets, want 2", len(info.Streamlets))
		}
		first, second := info.Streamlets[0], info.Streamlets[1]
		if !first.Closed || first.End != pos[0]+7 || second.First != pos[7] || second.Closed {
			t.Fatalf("streamlets %+v, positions %v", info.Streamlets, pos)
		}
		sub, _ := helloRaw(t, s.Addr())
		sub.subscribe(1, ch, wire.StartEarliest, 0)
		for i, e := range sub.events(8) {
			if e.pos != pos[i] || e.payload != string(payloadOf(i)) {
				t.Fatalf("event %d = %v %q, want %d %q", i, e, e.payload, pos[i], payloadOf(i))
			}
		}
	})

	t.Run("limit-size", func(t *testing.T) {
		s := startTest(t, func(o *Options) { o.MaxPayload = 1024; o.LimitSize = 2048; o.LimitMsgs = 1000 })
		const ch = "limit.size"
		pub, _ := helloRaw(t, s.Addr())
		// Stored size is 4+len per message: 1024 + 1024 = 2048 reaches the
		// limit exactly and fits; any third message would exceed it.
		msgs := [][]byte{make([]byte, 1020), make([]byte, 1020), make([]byte, 1)}
		for i := range msgs {
			msgs[i][0] = byte(i + 1)
		}
		p0 := pub.publish(ch, msgs[0])
		p1 := pub.publish(ch, msgs[1])
		info := checkChain(t, s, ch)
		if len(info.Streamlets) != 1 {
			t.Fatalf("2048 bytes under a 2048 limit took %d streamlets", len(info.Streamlets))
		}
		sl := s.host.Streamlet(info.Streamlets[0].ID)
		if b := sl.Buf().Bytes(); b != 2048 {
			t.Fatalf("streamlet stores %d bytes, want 2048", b)
		}
		p2 := pub.publish(ch, msgs[2]) // 2048+5 > 2048
		info = checkChain(t, s, ch)
		if len(info.Streamlets) != 2 || info.Streamlets[0].End != p2 || info.Streamlets[1].First != p2 {
			t.Fatalf("streamlets %+v, third message at %d", info.Streamlets, p2)
		}
		if p1 != p0+1 || p2 != p1+1 {
			t.Fatalf("positions %d %d %d", p0, p1, p2)
		}
		if b := sl.Buf().Bytes(); b > 2048 {
			t.Fatalf("streamlet exceeded its size limit: %d bytes", b)
		}
		sub, _ := helloRaw(t, s.Addr())
		sub.subscribe(1, ch, wire.StartEarliest, 0)
		for i, e := range sub.events(3) {
			if e.pos != p0+uint64(i) || e.payload != string(msgs[i]) {
				t.Fatalf("event %d = %v, want position %d with message %d", i, e, p0+uint64(i), i)
			}
		}
	})
}

func TestBehaviour5_ReadsStartExactlyAndFollow(t *testing.T) {
	s := startTest(t, smallStreamlets)
	const ch = "reads"
	pub, _ := helloRaw(t, s.Addr())
	payloads := make([][]byte, 20)
	for i := range payloads {
		payloads[i] = payloadOf(i)
	}
	pos, err := pub.publishBatch(ch, payloads) // 3 streamlets of 7 messages
	if err != nil {
		t.Fatal(err)
	}
	base := pos[0]
	if n := len(checkChain(t, s, ch).Streamlets); n != 3 {
		t.Fatalf("%d streamlets, want 3", n)
	}
	byPos := func(p uint64) string { return string(payloadOf(int(p - base))) }

	// check reads the subscription's events from `from` through the last
	// published position, then publishes more and expects them live.
	live := 20
	check := func(t *testing.T, c *rawConn, subID uint32, from uint64) {
		t.Helper()
		last := base + uint64(live) - 1
		if from <= last {
			evs, err := c.eventsUntil(subID, last)
			if err != nil {
				t.Fatal(err)
			}
			msgs, gaps, err := checkStream(evs, subID, from, last)
			if err != nil || len(gaps) > 0 {
				t.Fatalf("history: %v, gaps %v", err, gaps)
			}
			for p, m := range msgs {
				if m != byPos(p) {
					t.Fatalf("position %d carries %q, want %q", p, m, byPos(p))
				}
			}
		}
		more := make([][]byte, 3)
		for i := range more {
			more[i] = payloadOf(live + i)
		}
		if _, err := pub.publishBatch(ch, more); err != nil {
			t.Fatal(err)
		}
		evs, err := c.eventsUntil(subID, last+3)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := checkStream(evs, subID, max(from, last+1), last+3); err != nil {
			t.Fatalf("live: %v", err)
		}
		live += 3
	}

	t.Run("position", func(t *testing.T) {
		for _, off := range []uint64{0, 5, 6, 7, 13, 19} {
			c, _ := helloRaw(t, s.Addr())
			sb := c.subscribe(1, ch, wire.StartPosition, base+off)
			if sb.First != base+off {
				t.Fatalf("start %d: SUBSCRIBED first %d", base+off, sb.First)
			}
			check(t, c, 1, base+off)
			c.nc.Close()
		}
	})
	t.Run("live edge", func(t *testing.T) {
		c, _ := helloRaw(t, s.Addr())
		next := base + uint64(live)
		sb := c.subscribe(1, ch, wire.StartLive, 0)
		if sb.First != next || sb.Next != next {
			t.Fatalf("SUBSCRIBED %+v, want first=next=%d", sb, next)
		}
		check(t, c, 1, next)
	})
	t.Run("earliest", func(t *testing.T) {
		c, _ := helloRaw(t, s.Addr())
		sb := c.subscribe(1, ch, wire.StartEarliest, 0)
		if sb.First != base || sb.Earliest != base {
			t.Fatalf("SUBSCRIBED %+v, want first=earliest=%d", sb, base)
		}
		check(t, c, 1, base)
	})
	t.Run("last", func(t *testing.T) {
		for _, n := range []uint64{1, 4, 9} {
			c, _ := helloRaw(t, s.Addr())
			next := base + uint64(live)
			sb := c.subscribe(1, ch, wire.StartLast, n)
			if sb.First != next-n {
				t.Fatalf("last %d: SUBSCRIBED first %d, want %d", n, sb.First, next-n)
			}
			check(t, c, 1, next-n)
			c.nc.Close()
		}
		c, _ := helloRaw(t, s.Addr())
		if sb := c.subscribe(1, ch, wire.StartLast, 1<<40); sb.First != base {
			t.Fatalf("last 2^40: first %d, want the earliest %d", sb.First, base)
		}
	})
	t.Run("since", func(t *testing.T) {
		const ch = "reads.since"
		const sep = 600 * time.Millisecond // between the two batches
		const margin = 300 * time.Millisecond
		before, err := pub.publishBatch(ch, [][]byte{[]byte("a1"), []byte("a2")})
		if err != nil {
			t.Fatal(err)
		}
		// Let the clock move on: messages are stamped with the time the
		// server read them, so the batches must be apart in time. This
		// waits for time itself to pass, not for another goroutine.
		<-time.After(sep)
		tB := time.Now()
		after, err := pub.publishBatch(ch, [][]byte{[]byte("b1"), []byte("b2")})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := helloRaw(t, s.Addr())
		// The server resolves "since" against its own clock when it
		// handles SUBSCRIBE; margin (< sep) covers the time until then.
		back := time.Since(tB) + margin
		sb := c.subscribe(1, ch, wire.StartSince, uint64(back.Milliseconds())+1)
		if sb.First != after[0] {
			t.Fatalf("since %v: first %d, want %d (batch before at %v)", back, sb.First, after[0], before)
		}
		evs := c.events(2)
		if evs[0].payload != "b1" || evs[1].payload != "b2" {
			t.Fatalf("since: got %v", evs)
		}
		c2, _ := helloRaw(t, s.Addr())
		if sb := c2.subscribe(1, ch, wire.StartSince, uint64(time.Hour.Milliseconds())); sb.First != before[0] {
			t.Fatalf("since 1h: first %d, want the earliest %d", sb.First, before[0])
		}
	})
}

func TestBehaviour6_AllSubscribersSeeOneOrder(t *testing.T) {
	s := startTest(t, smallStreamlets)
	const ch, subs, pubs, per = "order", 5, 3, 120
	readers := make([]*rawConn, subs)
	var from uint64
	for i := range readers {
		readers[i], _ = helloRaw(t, s.Addr()) // round robin: both loops get readers
		sb := readers[i].subscribe(uint32(i+1), ch, wire.StartLive, 0)
		from = sb.First
	}
	writers := make([]*rawConn, pubs)
	for i := range writers {
		writers[i], _ = helloRaw(t, s.Addr())
	}
	last := from + pubs*per - 1
	type result struct {
		msgs map[uint64]string
		err  error
	}
	results := make(chan result, subs)
	for i, c := range readers {
		go func() {
			evs, err := c.eventsUntil(uint32(i+1), last)
			if err != nil {
				results <- result{err: err}
				return
			}
			msgs, gaps, err := checkStream(evs, uint32(i+1), from, last)
			if err == nil && len(gaps) > 0 {
				err = fmt.Errorf("unexpected gaps %v", gaps)
			}
			results <- result{msgs, err}
		}()
	}
	acked := make([]map[uint64]string, pubs)
	errs := make(chan error, pubs)
	for p, c := range writers {
		go func() {
			payloads := make([][]byte, per)
			for i := range payloads {
				payloads[i] = fmt.Appendf(nil, "w%d-%d", p, i)
			}
			pos, err := c.publishBatch(ch, payloads)
			m := make(map[uint64]string)
			for i, q := range pos {
				m[q] = string(payloads[i])
			}
			acked[p] = m
			errs <- err
		}()
	}
	for range pubs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	want := make(map[uint64]string)
	for _, m := range acked {
		for q, p := range m {
			want[q] = p
		}
	}
	for range subs {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		for q := from; q <= last; q++ {
			if r.msgs[q] != want[q] {
				t.Fatalf("position %d: subscriber saw %q, publisher was acked %q", q, r.msgs[q], want[q])
			}
		}
	}
}
