package engine

import (
	"context"
	"fmt"
	"runtime/debug"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/ringbuf"
	"github.com/sluice-rtm/sluice/role"
	"github.com/sluice-rtm/sluice/wire"
)

// retentionOpts: 16 KiB streamlets that never close by lease or expire by
// TTL during a test, so that only the budget expires them.
func retentionOpts(budget int) func(*Options) {
	return func(o *Options) {
		o.LimitMsgs = 5000
		o.LimitSize = 16 << 10
		o.LimitLife = time.Hour
		o.TTL = time.Hour
		o.MaxPayload = 4 << 10
		o.MaxRetained = budget
	}
}

// publishKiB publishes n payloads of about 1 KiB to ch and returns their
// positions.
func publishKiB(t *testing.T, c *rawConn, ch string, n int) []uint64 {
	t.Helper()
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = fmt.Appendf(make([]byte, 0, 1000), "%s-%06d-%0980d", ch, i, 0)
	}
	pos, err := c.publishBatch(ch, payloads)
	if err != nil {
		t.Fatal(err)
	}
	return pos
}

// overBudget reports how far the node's sealed history exceeds budget
// (open streamlets do not count: the budget never expires them).
func overBudget(s *Server, budget int) int64 {
	var sealed []host.Retained
	s.host.Footprint(&sealed)
	s.mirrors.footprint(&sealed)
	var n int64
	for _, r := range sealed {
		n += int64(r.FP)
	}
	return n - int64(budget)
}

// TestRetention_BudgetExpiresOldestFirst: past MaxRetained the node
// expires closed streamlets ahead of their TTL, oldest seal first and
// across channels, down to the budget; a reader of the expired range gets
// GAP expired and then every retained message; the metrics count it.
func TestRetention_BudgetExpiresOldestFirst(t *testing.T) {
	const budget = 384 << 10
	s := startTest(t, retentionOpts(budget))
	pub, _ := helloRaw(t, s.Addr())
	old := publishKiB(t, pub, "ret.old", 64)  // sealed first
	neu := publishKiB(t, pub, "ret.new", 320) // ~20 streamlets: more than the budget
	eventually(t, waitFor, "the sealed history fits the budget", func() bool {
		s.retentionSweep()
		return overBudget(s, budget) <= 0 && !s.ret.busy.Load()
	})
	oi := checkChain(t, s, "ret.old")
	if len(oi.Streamlets) != 1 || oi.Streamlets[0].Closed || oi.Earliest == old[0] {
		t.Fatalf("ret.old: %+v; want its closed streamlets expired (the oldest seals), only the open one left", oi)
	}
	ni := checkChain(t, s, "ret.new")
	closed := 0
	for _, r := range ni.Streamlets {
		if r.Closed {
			closed++
		}
	}
	if ni.Earliest <= neu[0] || closed == 0 {
		t.Fatalf("ret.new: earliest %d (first published %d), %d closed retained; want some expired and the newest kept: %+v",
			ni.Earliest, neu[0], closed, ni)
	}

	// A reader of the expired range: GAP expired, then everything retained.
	r, _ := helloRaw(t, s.Addr())
	r.subscribe(3, "ret.new", wire.StartPosition, neu[0])
	evs, err := r.eventsUntil(3, neu[len(neu)-1])
	if err != nil {
		t.Fatal(err)
	}
	msgs, gaps, err := checkStream(evs, 3, neu[0], neu[len(neu)-1])
	if err != nil || len(gaps) != 1 || gaps[0].From != neu[0] || gaps[0].To != ni.Earliest-1 || gaps[0].Reason != wire.GapExpired {
		t.Fatalf("reader: %v, gaps %v; want one GAP %d..%d expired", err, gaps, neu[0], ni.Earliest-1)
	}
	if want := int(neu[len(neu)-1] - ni.Earliest + 1); len(msgs) != want {
		t.Fatalf("reader got %d messages after the gap, want %d", len(msgs), want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	m := s.Metrics(ctx)
	if m.RetentionExpired < int64(len(ni.Streamlets)) || m.RetainedBytes <= 0 {
		t.Fatalf("metrics: expired %d, retained %d bytes", m.RetentionExpired, m.RetainedBytes)
	}
}

// TestRetention_UnderBudgetOrDisabledKeepsHistory: a node under its budget,
// or with the bound disabled, expires nothing early.
func TestRetention_UnderBudgetOrDisabledKeepsHistory(t *testing.T) {
	for _, budget := range []int{1 << 30, 0} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			s := startTest(t, retentionOpts(budget))
			pub, _ := helloRaw(t, s.Addr())
			pos := publishKiB(t, pub, "ret.keep", 320)
			s.retentionSweep() // single node: its expiries are done when it returns
			if info := checkChain(t, s, "ret.keep"); info.Earliest != pos[0] {
				t.Fatalf("earliest %d, want %d: history expired under budget %d", info.Earliest, pos[0], budget)
			}
			if n := s.ret.expired.Load(); n != 0 {
				t.Fatalf("%d expired", n)
			}
			// The running sum the check reads is the walk's total.
			var c []host.Retained
			if sum, walk := s.host.Retained(), s.host.Footprint(&c)+s.mirrors.footprint(&c); sum != walk || sum <= 0 {
				t.Fatalf("retained account %d, walked footprint %d", sum, walk)
			}
			if budget == 0 && overBudget(s, 384<<10) <= 0 {
				t.Fatal("the test did not retain more than the other test's budget")
			}
		})
	}
}

// TestCluster_RetentionBudget: hosts past their budget have the channel's
// manager (another node) expire their oldest streamlets, and a reader
// node's copies count against its own budget; a later reader of the range
// gets GAP expired.
func TestCluster_RetentionBudget(t *testing.T) {
	const budget = 256 << 10
	nodes := startCluster3(t, retentionOpts(budget))
	a, b, c := nodes[0], nodes[1], nodes[2]
	ch := channelManagedBy(t, a, "a", "ret")
	pub, _ := helloRaw(t, a.Addr())
	pos := publishKiB(t, pub, ch, 600)
	// A reader on c from the first position: c copies what b hosts.
	rd, _ := helloRaw(t, c.Addr())
	rd.subscribe(5, ch, wire.StartPosition, pos[0])
	if _, err := rd.eventsUntil(5, pos[len(pos)-1]); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitFor, "every node's sealed history fits its budget", func() bool {
		ok := true
		for _, s := range nodes {
			s.retentionSweep()
			if overBudget(s, budget) > 0 || s.ret.busy.Load() {
				ok = false
			}
		}
		return ok
	})
	info, found := stateInfo(a, ch)
	if !found || info.Earliest <= pos[0] {
		t.Fatalf("manager a: %+v; want the oldest streamlets expired", info)
	}
	if b.ret.expired.Load()+c.ret.expired.Load() == 0 {
		t.Fatal("no host or reader node expired anything")
	}
	late, _ := helloRaw(t, b.Addr())
	late.subscribe(6, ch, wire.StartPosition, pos[0])
	evs, err := late.eventsUntil(6, pos[len(pos)-1])
	if err != nil {
		t.Fatal(err)
	}
	_, gaps, err := checkStream(evs, 6, pos[0], pos[len(pos)-1])
	if err != nil || len(gaps) == 0 || gaps[0].From != pos[0] || gaps[0].Reason != wire.GapExpired {
		t.Fatalf("late reader: %v, gaps %v; want GAP expired from %d first", err, gaps, pos[0])
	}
}

// TestCluster_OrphanStreamletsAreFreed: a streamlet idle for the orphan
// grace that the committed lists do not name (hosted for an OPEN that did
// not commit) is freed by its host; an old streamlet the lists name is
// kept.
func TestCluster_OrphanStreamletsAreFreed(t *testing.T) {
	nodes := startCluster3(t, nil)
	a := nodes[0]
	ch := channelManagedBy(t, a, "a", "orphan")
	pub, _ := helloRaw(t, a.Addr())
	pos := publishKiB(t, pub, ch, 250) // 100 per streamlet: two closed, one open
	info := checkChain(t, a, ch)
	listed := info.Streamlets[0]
	var host *Server
	for _, s := range nodes {
		if s.opts.ServerName == listed.Host {
			host = s
		}
	}
	if host == nil || !listed.Closed {
		t.Fatalf("first streamlet %+v", listed)
	}
	// An orphan on the same host: hosted, sealed, in no list.
	orphan := host.host.NewID()
	if err := host.host.HostStreamlet(role.Grant{Channel: ch, Epoch: info.Epoch, Streamlet: orphan, Host: listed.Host,
		First: 1, LimitMsgs: 10, LimitSize: 1 << 20, LeaseEnd: time.Now().Add(time.Hour).UnixNano()}); err != nil {
		t.Fatal(err)
	}
	if _, err := host.host.Seal(orphan); err != nil {
		t.Fatal(err)
	}
	longAgo := time.Now().Add(-24 * time.Hour).UnixNano()
	host.host.Streamlet(orphan).Backdate(longAgo)
	host.host.Streamlet(listed.ID).Backdate(longAgo)

	host.plane.(clusterPlane).reapOrphans()
	if host.host.Streamlet(orphan) != nil {
		t.Fatal("the orphan was kept")
	}
	if host.host.Streamlet(listed.ID) == nil {
		t.Fatal("a streamlet its manager lists was freed")
	}
	// The listed one still serves reads.
	r, _ := helloRaw(t, nodes[1].Addr())
	r.subscribe(1, ch, wire.StartPosition, pos[0])
	evs, err := r.eventsUntil(1, pos[len(pos)-1])
	if err != nil {
		t.Fatal(err)
	}
	if _, gaps, err := checkStream(evs, 1, pos[0], pos[len(pos)-1]); err != nil || len(gaps) != 0 {
		t.Fatalf("reading after the reap: %v, gaps %v", err, gaps)
	}
}

// BenchmarkRetentionSweep: the budget check of a node with 100k hosted
// streamlets under its budget (the common case, every retentionInterval):
// one atomic load, no walk.
func BenchmarkRetentionSweep(b *testing.B) {
	o := DefaultOptions()
	s := &Server{opts: o, host: host.New("n", time.Now), clock: time.Now}
	s.mirrors = newMirrorSet(s)
	for i := 0; i < 100_000; i++ {
		id := s.host.NewID()
		if err := s.host.HostStreamlet(role.Grant{Channel: fmt.Sprintf("c%d", i), Streamlet: id, First: 1,
			LimitMsgs: 10, LimitSize: 1 << 10, LeaseEnd: time.Now().Add(time.Hour).UnixNano()}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s.retentionSweep()
	}
}

// TestMemSweepReturnsOnlyWhenQuiet: a busy server forces no collection
// and keeps its free history resident up to keepFree (trimHistory returns
// the rest); a quiet one returns all its free history and, past
// memQuietFree of free heap, forces two returns of the heap one sweep
// apart, then none until it has been busy again.
func TestMemSweepReturnsOnlyWhenQuiet(t *testing.T) {
	s := startTest(t, nil)
	s.tickStop <- struct{}{} // nothing else runs the sweeps meanwhile
	ringbuf.Trim(0, 0)
	free, allocs, rate := int64(memQuietFree), int64(1), int64(memQuiet)
	s.mem.freeBytes = func() int64 { return free }
	s.mem.allocBytes = func() int64 { allocs += rate; return allocs }
	s.memSweep()
	base, trimmed := s.mem.frees, s.mem.trimmed
	// Expired history: 4 chunks of 64 KiB on the arena's free list.
	buf := ringbuf.New(10, 1<<20)
	for range 4 {
		if _, err := buf.Append(make([]byte, 60<<10), 0); err != nil {
			t.Fatal(err)
		}
	}
	buf.Free()
	if _, f, _, _ := ringbuf.OffHeap(); f < 4*64<<10 {
		t.Fatalf("%d bytes free after freeing 4 chunks of 64 KiB", f)
	}
	for range 3 { // busy, with free heap past memQuietFree
		s.memSweep()
		s.trimHistory()
	}
	if s.mem.frees != base || s.mem.trimmed != trimmed {
		t.Fatalf("busy: %d forced returns, %d bytes of history returned", s.mem.frees-base, s.mem.trimmed-trimmed)
	}
	rate = memQuiet - 1
	for i, want := range []int64{1, 2, 2, 2} {
		s.memSweep()
		if got := s.mem.frees - base; got != want {
			t.Fatalf("quiet sweep %d: %d forced returns, want %d", i, got, want)
		}
		if _, f, _, _ := ringbuf.OffHeap(); f != 0 || s.mem.trimmed-trimmed < 4*64<<10 {
			t.Fatalf("quiet: %d bytes of history still free (returned %d)", f, s.mem.trimmed-trimmed)
		}
	}
	rate = memQuiet // busy again, then quiet with little free heap: no return
	s.memSweep()
	rate, free = memQuiet-1, memQuietFree-1
	s.memSweep()
	if got := s.mem.frees - base; got != 2 {
		t.Fatalf("quiet with %d free bytes: %d forced returns, want 2 (none more)", free, got)
	}
}

// TestTrimHistoryKeepsBoundedFree: under load, trimHistory returns free
// history beyond keepFree, at most trimStep per call, and keeps the
// runtime's memory limit at MemoryLimit minus the history resident.
func TestTrimHistoryKeepsBoundedFree(t *testing.T) {
	s := startTest(t, nil)
	s.tickStop <- struct{}{}
	ringbuf.Trim(0, 0)
	s.opts.MaxRetained = 16 << 20 // keepFree: keepFreeMin, 64 MiB
	s.opts.MemoryLimit = 1 << 30
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	var bufs []*ringbuf.Buffer
	for range 40 { // 80 MiB of 64 KiB chunks
		b := ringbuf.New(100, 4<<20)
		for range 32 {
			if _, err := b.Append(make([]byte, 60<<10), 0); err != nil {
				t.Fatal(err)
			}
		}
		bufs = append(bufs, b)
	}
	s.trimHistory()
	inUse, _, _, _ := ringbuf.OffHeap()
	if got, want := debug.SetMemoryLimit(-1), int64(1<<30)-inUse; got < want-memLimitStep || got > want+memLimitStep {
		t.Fatalf("memory limit %d with %d of history in use, want about %d", got, inUse, want)
	}
	for _, b := range bufs {
		b.Free()
	}
	trimmed := s.mem.trimmed
	s.trimHistory()
	if _, f, _, _ := ringbuf.OffHeap(); s.mem.trimmed-trimmed > trimStep || f < keepFreeMin {
		t.Fatalf("one call returned %d (step %d), %d left free", s.mem.trimmed-trimmed, trimStep, f)
	}
	for range 3 {
		s.trimHistory()
	}
	if _, f, _, _ := ringbuf.OffHeap(); f > keepFreeMin {
		t.Fatalf("%d bytes free after trimming to %d", f, keepFreeMin)
	}
	ringbuf.Trim(0, 0)
}

// TestRetentionBudgetCoversOutbound: output waiting for a subscriber that
// does not read counts against MaxRetained, so history that fits the
// budget alone is expired when history and that output together exceed
// it; the metrics show both parts.
func TestRetentionBudgetCoversOutbound(t *testing.T) {
	s := startTest(t, func(o *Options) {
		o.MaxRetained = 16 << 20
		o.OutboundLimit = 64 << 20
		o.LimitMsgs = 100
	})
	sub := helloSmallBuffer(t, s.Addr()) // a small receive buffer; never read
	sub.subscribe(1, "ob", wire.StartLive, 0)
	pub, _ := helloRaw(t, s.Addr())
	payload := make([]byte, 1024)
	for i := 0; i < 120; i++ { // 12,000 messages, 12 MiB: under the budget alone
		batch := make([][]byte, 100)
		for j := range batch {
			batch[j] = payload
		}
		if _, err := pub.publishBatch("ob", batch); err != nil {
			t.Fatal(err)
		}
	}
	// The budget is enforced by sweeps every retentionInterval, each with
	// the outbound bytes the loops last reported: the first expiry may be
	// computed before the output grew, so wait for the sweeps to catch up.
	eventually(t, waitFor, "history expired for the outbound bytes", func() bool {
		m := s.Metrics(context.Background())
		return m.RetentionExpired > 0 && m.OutboundBytes > 2<<20 && m.RetainedBytes+m.OutboundBytes <= 16<<20+2<<20
	})
}

// TestOutboundPressureLowersTheLimit: output waiting for subscribers that
// never read cannot be expired like history, so while it exceeds half of
// MaxRetained every connection's outbound limit drops to pressureLimit.
// Six subscribers that never read, each allowed 2 MiB, would hold 12 MiB
// under an 8 MiB budget; with the lower limit under pressure they lag
// (policy lag) and the node's output stays within the budget.
func TestOutboundPressureLowersTheLimit(t *testing.T) {
	const budget = 8 << 20
	s := startTest(t, func(o *Options) {
		o.MaxRetained = budget
		o.OutboundLimit = 2 << 20
		o.LimitMsgs = 1000
	})
	for i := range 6 {
		sub := helloSmallBuffer(t, s.Addr()) // a small receive buffer; never read
		sub.subscribe(uint32(i+1), "press", wire.StartLive, 0)
	}
	pub, _ := helloRaw(t, s.Addr())
	payload := make([]byte, 1024)
	batch := make([][]byte, 100)
	for j := range batch {
		batch[j] = payload
	}
	maxOut := int64(0)
	for range 240 { // 24,000 messages, 24 MiB
		if _, err := pub.publishBatch("press", batch); err != nil {
			t.Fatal(err)
		}
		maxOut = max(maxOut, s.outbound())
	}
	if maxOut > budget || s.outbound() > budget {
		t.Fatalf("output waiting reached %d bytes (now %d) under a budget of %d", maxOut, s.outbound(), budget)
	}
	if s.slowLags.Load() == 0 {
		t.Fatal("no subscriber lagged")
	}
	// The loops' count is exact again after a sweep.
	for _, l := range s.loopList() {
		l.execute(l.sweep)
	}
	eventually(t, waitFor, "the swept count within the budget", func() bool {
		return s.Metrics(context.Background()).OutboundBytes <= budget
	})
}
