package manager

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
)

func TestChanState_Due(t *testing.T) {
	l := role.Limits{Msgs: 10, Size: 1 << 20, Life: time.Second, TTL: 10 * time.Second}
	open := role.StreamletRef{ID: 2, First: 10, LeaseEnd: 500}
	closed := role.StreamletRef{ID: 1, First: 0, End: 10, Closed: true, Expires: 300}
	closedLater := role.StreamletRef{ID: 2, First: 10, End: 20, Closed: true, Expires: 900}
	for _, tc := range []struct {
		name string
		cs   chanState
		want int64
	}{
		{"empty and unread: droppable TTL after last use", chanState{limits: l, lastUse: 100}, 100 + int64(l.TTL)},
		{"empty with readers: nothing", chanState{limits: l, lastUse: 100, readers: 1}, math.MaxInt64},
		{"open only: its lease end", chanState{limits: l, list: []role.StreamletRef{open}}, 500},
		{"closed before open: the earlier of expiry and lease end", chanState{limits: l, list: []role.StreamletRef{closed, open}}, 300},
		{"lease ends before the expiry", chanState{limits: l, list: []role.StreamletRef{{ID: 1, End: 10, Closed: true, Expires: 800}, open}}, 500},
		{"closed only: the first expiry", chanState{limits: l, list: []role.StreamletRef{closed, closedLater}}, 300},
		{"a list with readers is still due", chanState{limits: l, readers: 2, list: []role.StreamletRef{closedLater}}, 900},
	} {
		if got := tc.cs.due(); got != tc.want {
			t.Errorf("%s: due() = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// leftUndone reports what Tick at now should have done for channel name
// and did not: a lease over, a streamlet expired or a droppable channel
// still in place. It reads the state under the channel's own mutex (not
// lock), so it does not make Tick visit the channel again.
func leftUndone(m *Manager, name string, now int64) string {
	sh := &m.shards[m.shard(name)]
	sh.mu.RLock()
	mc := sh.m[name]
	sh.mu.RUnlock()
	if mc == nil {
		return ""
	}
	mc.mu.Lock()
	defer mc.mu.Unlock()
	cs := mc.st
	if ref, ok := cs.leaseOver(now); ok {
		return fmt.Sprintf("streamlet %d open past its lease end %d", ref.ID, ref.LeaseEnd)
	}
	if len(cs.list) > 0 && cs.list[0].Closed && cs.list[0].Expires <= now {
		return fmt.Sprintf("streamlet %d kept past its expiry %d", cs.list[0].ID, cs.list[0].Expires)
	}
	if cs.droppable(now) {
		return "empty, unread and unused for a TTL, not dropped"
	}
	return ""
}

// TestTick_NothingDueIsLeftUndone: under random grants, appends, rollovers,
// reader changes, expiries and info reads on 40 channels, with the clock
// moving by up to 1.5 s between ticks (leases of 1 s, TTL 3 s), every
// Tick leaves no channel with a lease over, a streamlet expired or an
// idle channel undropped: the channels it passes over (chanState.due)
// never hide work. A due computed too late, or a lock path that does
// not mark its channel for the next visit, fails it.
func TestTick_NothingDueIsLeftUndone(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	h := host.New("h", clock)
	l := role.Limits{Msgs: 5, Size: 1 << 20, Life: time.Second, TTL: 3 * time.Second}
	m := New(Config{Node: "h", Host: h, NewID: h.NewID, Clock: clock, Limits: func(string) role.Limits { return l }})
	rng := rand.New(rand.NewPCG(16, 10000))
	const nch = 40
	names := make([]string, nch)
	readers := make([]int, nch)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	var checks int
	for step := 0; step < 3000; step++ {
		k := rng.IntN(nch)
		ch := names[k]
		switch op := rng.IntN(10); {
		case op < 5: // publish a few messages, rolling over when full
			g, err := m.WriteGrant(ch, 0)
			if err != nil {
				t.Fatal(err)
			}
			for n := rng.IntN(8); n > 0; n-- {
				if _, err := h.Streamlet(g.Streamlet).Append([]byte("m"), now.UnixNano()); err != nil {
					if g, err = m.WriteGrant(ch, g.Streamlet); err != nil {
						t.Fatal(err)
					}
				}
			}
		case op < 7: // a reader comes or goes
			d := 1
			if readers[k] > 0 && rng.IntN(2) == 0 {
				d = -1
			}
			readers[k] += d
			m.Interest(ch, "h", d)
		case op < 8: // the retention budget expires the oldest closed streamlet
			if info, ok := m.Info(ch, false); ok && len(info.Streamlets) > 1 {
				if _, err := m.Expire(ch, info.Streamlets[0].ID); err != nil {
					t.Fatal(err)
				}
			}
		default:
			m.Info(ch, false)
		}
		if rng.IntN(4) == 0 {
			now = now.Add(time.Duration(rng.Int64N(int64(1500 * time.Millisecond))))
			ns := now.UnixNano()
			m.Do(m.Tick(now))
			for _, name := range names {
				if what := leftUndone(m, name, ns); what != "" {
					t.Fatalf("step %d: after Tick at %d, channel %s: %s", step, ns, name, what)
				}
				checks++
			}
		}
	}
	// Quiet: every reader leaves and time runs on; everything expires and
	// every channel is dropped, tick by tick.
	for k, n := range readers {
		if n > 0 {
			m.Interest(names[k], "h", -n)
		}
	}
	for i := 0; i < 20; i++ {
		now = now.Add(500 * time.Millisecond)
		m.Do(m.Tick(now))
		for _, name := range names {
			if what := leftUndone(m, name, now.UnixNano()); what != "" {
				t.Fatalf("quiet tick %d: channel %s: %s", i, name, what)
			}
		}
	}
	if n := m.Channels(); n != 0 {
		t.Errorf("%d channels left after every reader left and 10 s passed, want 0", n)
	}
	if checks == 0 {
		t.Fatal("no tick was checked")
	}
}

// TestTick_PassesOverChannelsWithNothingDue: a single node's Tick does not
// take the lock of a channel that nothing touched since its last visit and
// whose lease end is still ahead (10,000 such channels cost a walk of
// every lock and list per tick before); one whose lease has ended is
// visited and sealed.
func TestTick_PassesOverChannelsWithNothingDue(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	h := host.New("h", clock)
	m := New(testConfig(h, clock)) // 4 s leases
	if _, err := m.WriteGrant("busy", 0); err != nil {
		t.Fatal(err)
	}
	m.Do(m.Tick(now)) // the visit that records what is due
	sh := &m.shards[m.shard("busy")]
	sh.mu.RLock()
	mc := sh.m["busy"]
	sh.mu.RUnlock()
	mc.mu.Lock() // held as by a caller stuck inside; Tick must not wait for it
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Do(m.Tick(now.Add(time.Second)))
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		mc.mu.Unlock()
		<-done
		t.Fatal("Tick took the lock of a channel with nothing due")
	}
	mc.mu.Unlock()
	// Past the lease end Tick visits and seals it.
	g, err := m.WriteGrant("busy", 0)
	if err != nil {
		t.Fatal(err)
	}
	m.Do(m.Tick(now.Add(time.Second))) // visit after the grant's lock
	m.Do(m.Tick(now.Add(5 * time.Second)))
	if what := leftUndone(m, "busy", now.Add(5*time.Second).UnixNano()); what != "" {
		t.Fatal(what)
	}
	if s := h.Streamlet(g.Streamlet); s == nil || !s.Buf().Sealed() {
		t.Fatalf("streamlet %d not sealed after its lease ended", g.Streamlet)
	}
}

// BenchmarkTick: one lifecycle tick of a single node's manager holding
// channels that each have an open streamlet (the 10,000-channel
// scenario), between lease ends: nothing is due.
func BenchmarkTick(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("channels=%d", n), func(b *testing.B) {
			now := time.Unix(1_800_000_000, 0)
			clock := func() time.Time { return now }
			h := host.New("h", clock)
			m := New(testConfig(h, clock))
			for i := 0; i < n; i++ {
				if _, err := m.WriteGrant(fmt.Sprintf("bench.c%d", i), 0); err != nil {
					b.Fatal(err)
				}
			}
			m.Do(m.Tick(now))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m.Do(m.Tick(now.Add(time.Second)))
			}
		})
	}
}
