package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

func TestDecideLive(t *testing.T) {
	for _, tc := range []struct {
		policy         SlowPolicy
		over, skipping bool
		want           liveAction
	}{
		{SlowLag, false, false, actSend},
		{SlowLag, true, false, actLag},
		{SlowSkip, false, false, actSend},
		{SlowSkip, true, false, actSkip},
		{SlowSkip, true, true, actStillSkip},
		{SlowSkip, false, true, actEndSkip},
		{SlowDisconnect, false, false, actSend},
		{SlowDisconnect, true, false, actDisconnect},
	} {
		if got := decideLive(tc.policy, tc.over, tc.skipping); got != tc.want {
			t.Errorf("decideLive(%s, over=%v, skipping=%v) = %d, want %d", tc.policy, tc.over, tc.skipping, got, tc.want)
		}
	}
}

// TestSlowConsumer_LagReadsOnFromHistory: under the default policy a
// subscriber that stops reading leaves the live stream (the fast one and
// the publisher go on), and when it reads again it gets every message in
// order, without a GAP, from retained history, then rejoins the live
// stream.
func TestSlowConsumer_LagReadsOnFromHistory(t *testing.T) {
	if DefaultOptions().SlowPolicy != SlowLag {
		t.Fatalf("default policy %q, want %q", DefaultOptions().SlowPolicy, SlowLag)
	}
	s, pub, slow, fast, from := slowSetup(t, SlowLag)
	seq := 0
	var last uint64
	for w := 0; s.slowLags.Load() == 0; w++ {
		if w == 1600 { // 25 MiB
			t.Fatal("the slow subscriber never lagged")
		}
		last, _ = publishWindow1K(t, pub, &seq)
		fast.waitProgress(t, last)
	}
	for range 256 { // 4 MiB more while it lags: 64 times its outbound limit
		last, _ = publishWindow1K(t, pub, &seq)
		fast.waitProgress(t, last)
	}
	sr := readInBackground(slow)
	sr.onStall = func() { dumpChannel(t, s, "slow") }
	sr.waitProgress(t, last)
	// Caught up, it is live again: the next message reaches it.
	last, _ = publishWindow1K(t, pub, &seq)
	sr.waitProgress(t, last)
	fast.waitProgress(t, last)
	onLoops(t, s, func(l *loop) {
		if lc := l.chans["slow"]; lc != nil && len(lc.catchup) != 0 {
			t.Errorf("loop %d: %d subscribers still catching up", l.idx, len(lc.catchup))
		}
	})
	slowEvs, err := sr.stop()
	if err != nil {
		t.Fatalf("slow subscriber: %v", err)
	}
	fastEvs, err := fast.stop()
	if err != nil {
		t.Fatalf("fast subscriber: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if m := s.Metrics(ctx); m.SlowLags == 0 || m.SlowSkips != 0 {
		t.Fatalf("metrics: %d lags, %d skips", m.SlowLags, m.SlowSkips)
	}
	for name, evs := range map[string][]event{"slow": slowEvs, "fast": fastEvs} {
		msgs, gaps, err := checkStream(evs, 1, from, last)
		if err != nil || len(gaps) > 0 {
			t.Fatalf("%s subscriber: %v, gaps %v", name, err, gaps)
		}
		for p, m := range msgs {
			if want := fmt.Sprintf("%08d", p-from); m[:8] != want {
				t.Fatalf("%s subscriber: position %d carries %q", name, p, m[:8])
			}
		}
	}
}

// TestSlowConsumer_LagLosesExactlyWhatExpired: a lagging subscriber whose
// history expires (here by the retention budget) before it reads it gets
// what it had been sent, GAP expired for exactly the expired positions it
// had not been given (ending just before the earliest retained one), and
// every retained message.
func TestSlowConsumer_LagLosesExactlyWhatExpired(t *testing.T) {
	const budget = 256 << 10
	s := startTest(t, func(o *Options) {
		retentionOpts(budget)(o)
		o.OutboundLimit = 64 << 10
	})
	const ch = "lag.expired"
	slow := helloSmallBuffer(t, s.Addr())
	from := slow.subscribe(1, ch, wire.StartLive, 0).First
	pub, _ := helloRaw(t, s.Addr())
	var pos []uint64
	for len(pos) < 4000 { // ~4 MB: far past the socket buffers, the limit and the budget
		pos = append(pos, publishKiB(t, pub, ch, 200)...)
	}
	last := pos[len(pos)-1]
	if s.slowLags.Load() == 0 {
		t.Fatal("the slow subscriber never lagged")
	}
	eventually(t, waitFor, "the sealed history fits the budget", func() bool {
		s.retentionSweep()
		return overBudget(s, budget) <= 0 && !s.ret.busy.Load()
	})
	info, _ := stateInfo(s, ch)
	if info.Earliest <= from {
		t.Fatalf("nothing expired: earliest %d, first %d", info.Earliest, from)
	}
	sr := readInBackground(slow)
	sr.onStall = func() { dumpChannel(t, s, ch) }
	sr.waitProgress(t, last)
	evs, err := sr.stop()
	if err != nil {
		t.Fatal(err)
	}
	msgs, gaps, err := checkStream(evs, 1, from, last)
	if err != nil {
		t.Fatal(err)
	}
	// Every GAP is reason expired and covers only expired positions (below
	// the earliest retained), the last one ends just before it, and all
	// else arrives. (The kernel may take a little more while the history
	// expires, so a lagging reader can be given messages between gaps.)
	if len(gaps) == 0 || gaps[len(gaps)-1].To != info.Earliest-1 {
		t.Fatalf("gaps %+v, want the last to end at %d (earliest retained %d)", gaps, info.Earliest-1, info.Earliest)
	}
	missing := 0
	for _, g := range gaps {
		if g.Reason != wire.GapExpired || g.To >= info.Earliest {
			t.Fatalf("GAP %+v: want reason expired, below %d", g, info.Earliest)
		}
		missing += int(g.To - g.From + 1)
	}
	if gaps[0].From == from {
		t.Fatalf("GAP %+v: nothing was delivered before it, yet the socket had room for some", gaps[0])
	}
	for i, p := range pos {
		if m, ok := msgs[p]; ok && m != fmt.Sprintf("%s-%06d-%0980d", ch, i%200, 0) {
			t.Fatalf("position %d carries %.20q", p, m)
		}
	}
	if want := int(last-from+1) - missing; len(msgs) != want {
		t.Fatalf("%d messages, want %d", len(msgs), want)
	}
}

// TestSlowConsumer_LagWaitsWithoutWakeups: while a lagging subscriber's
// socket stays full its loop is not woken for it (no polling); once it
// reads, the wake-ups resume its catch-up. The window below is a
// measurement, not a synchronisation: a 2 ms poll would wake it ~50 times
// in it, a 20 ms poll 5 times. A few spurious EPOLLOUTs happen while the
// kernel moves queued bytes on a loaded machine (2 were seen under load
// average 9), so up to 3 are tolerated.
func TestSlowConsumer_LagWaitsWithoutWakeups(t *testing.T) {
	s := startTest(t, func(o *Options) { o.OutboundLimit = 64 << 10 })
	const ch = "lag.idle"
	slow := helloSmallBuffer(t, s.Addr())
	from := slow.subscribe(1, ch, wire.StartLive, 0).First
	pub, _ := helloRaw(t, s.Addr())
	// Publish until it lags and waits for its socket (onLoops runs after
	// what the loops had queued).
	var pos []uint64
	var waitAt uint64
	var before int64
	for waiting := false; !waiting; {
		if len(pos) >= 25000 {
			t.Fatal("the slow subscriber never waited for its socket")
		}
		pos = append(pos, publishKiB(t, pub, ch, 500)...)
		onLoops(t, s, func(l *loop) {
			if lc := l.chans[ch]; lc != nil && len(lc.catchup) == 1 && lc.catchup[0].c.watchArmed {
				waiting = true
				waitAt = lc.catchup[0].cur.pos - from
				before = s.writableWakes.Load() // on the loop: no wake-up runs meanwhile
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	if n := s.writableWakes.Load() - before; n > 3 {
		t.Fatalf("%d wake-ups in 100 ms while the socket was full", n)
	}
	sr := readInBackground(slow)
	sr.waitProgress(t, pos[len(pos)-1])
	evs, err := sr.stop()
	if err != nil {
		t.Fatal(err)
	}
	if _, gaps, err := checkStream(evs, 1, from, pos[len(pos)-1]); err != nil || len(gaps) > 0 {
		t.Fatalf("%v, gaps %v", err, gaps)
	}
	if s.writableWakes.Load() == before {
		dumpChannel(t, s, ch)
		t.Fatalf("the catch-up resumed without a writable wake-up (%d published, waiting at %d)", len(pos), waitAt)
	}
}
