package engine

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func testLimits() limits {
	return limits{msgs: 10, size: 1 << 20, life: time.Second, ttl: 10 * time.Second}
}

// checkInvariants verifies the invariants documented on chanState.
func checkInvariants(t *testing.T, cs *chanState) {
	t.Helper()
	for i, s := range cs.list {
		if i < len(cs.list)-1 && !s.Closed {
			t.Fatalf("entry %d of %d is open", i, len(cs.list))
		}
		if i > 0 {
			prev := cs.list[i-1]
			if prev.End != s.First {
				t.Fatalf("entry %d starts at %d, previous ends at %d", i, s.First, prev.End)
			}
			if s.Closed && s.Expires < prev.Expires {
				t.Fatalf("entry %d expires at %d, before its predecessor (%d)", i, s.Expires, prev.Expires)
			}
		}
	}
	if n := len(cs.list); n > 0 {
		last := cs.list[n-1]
		if !last.Closed && cs.next != last.First {
			t.Fatalf("next %d, open streamlet starts at %d", cs.next, last.First)
		}
		if last.Closed && cs.next != last.End {
			t.Fatalf("next %d, last streamlet ends at %d", cs.next, last.End)
		}
	}
}

func TestChanState_NewStartsAtPositionBase(t *testing.T) {
	cs := newChanState(t0, testLimits())
	if cs.epoch != positionBase(t0) || cs.next != cs.epoch || len(cs.list) != 0 {
		t.Fatalf("new state %+v, want epoch = next = %d", cs, positionBase(t0))
	}
	info := cs.info(0)
	if info.Earliest != cs.next || info.Next != cs.next || len(info.Streamlets) != 0 || info.Epoch != cs.epoch {
		t.Fatalf("info of an empty channel %+v", info)
	}
	if _, ok := cs.open(); ok {
		t.Fatal("a new channel has an open streamlet")
	}
}

func TestChanState_OpenCloseExpireLifecycle(t *testing.T) {
	l := testLimits()
	cs := newChanState(t0, l)
	base := cs.next
	ns := t0.UnixNano()
	ttl := int64(l.ttl)

	a := cs.addOpen(1, "h", ns)
	if a.First != base || a.LeaseEnd != ns+int64(l.life) || a.Closed {
		t.Fatalf("opened %+v", a)
	}
	if g := cs.grantFor("ch", a); g.Streamlet != 1 || g.First != base || g.Epoch != cs.epoch ||
		g.LimitMsgs != l.msgs || g.LimitSize != l.size || g.LeaseEnd != a.LeaseEnd || g.Channel != "ch" {
		t.Fatalf("grant %+v", g)
	}
	if info := cs.info(4); info.Next != base+4 || info.Earliest != base {
		t.Fatalf("info with 4 messages: %+v", info)
	}
	if _, over := cs.leaseOver(a.LeaseEnd - 1); over {
		t.Fatal("lease over before its end")
	}
	if s, over := cs.leaseOver(a.LeaseEnd); !over || s.ID != 1 {
		t.Fatal("lease not over at its end")
	}

	cs.close(1, base+4, ns+10)
	checkInvariants(t, cs)
	if cs.next != base+4 || !cs.list[0].Closed || cs.list[0].Expires != ns+10+ttl {
		t.Fatalf("after close: next %d, %+v", cs.next, cs.list[0])
	}
	if _, over := cs.leaseOver(ns + 1<<40); over {
		t.Fatal("a closed streamlet's lease reported")
	}
	cs.close(1, base+9, ns+20) // already closed: no-op
	cs.close(7, base+9, ns+20) // unknown: no-op
	if cs.next != base+4 || cs.list[0].End != base+4 {
		t.Fatalf("closing twice changed the state: %+v", cs.list)
	}

	b := cs.addOpen(2, "h", ns+30)
	if b.First != base+4 {
		t.Fatalf("second streamlet starts at %d, want %d", b.First, base+4)
	}
	// The clock went backwards: b's expiry is clamped to a's.
	cs.close(2, base+9, ns+5)
	checkInvariants(t, cs)
	if cs.list[1].Expires != cs.list[0].Expires {
		t.Fatalf("later streamlet expires at %d, earlier at %d", cs.list[1].Expires, cs.list[0].Expires)
	}
	c := cs.addOpen(3, "h", ns+40)
	cs.close(3, c.First, ns+50) // closed empty
	d := cs.addOpen(4, "h", ns+60)
	checkInvariants(t, cs)
	if d.First != base+9 {
		t.Fatalf("streamlet after an empty one starts at %d, want %d", d.First, base+9)
	}

	// Expiry removes a prefix, in order, never the open streamlet.
	if got := cs.expire(ns+10+ttl-1, nil); len(got) != 0 {
		t.Fatalf("expired %v before any TTL passed", got)
	}
	got := cs.expire(ns+10+ttl, nil)
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("expired %v, want [1 2]", got)
	}
	checkInvariants(t, cs)
	got = cs.expire(ns+1<<50, got[:0])
	if len(got) != 1 || got[0] != 3 || len(cs.list) != 1 || cs.list[0].ID != 4 {
		t.Fatalf("expired %v, left %+v; want [3] and the open streamlet", got, cs.list)
	}
	if info := cs.info(0); info.Earliest != base+9 || info.Next != base+9 {
		t.Fatalf("info %+v", info)
	}
	cs.close(4, base+12, ns+70)
	cs.expire(ns+1<<50, nil)
	if info := cs.info(0); len(info.Streamlets) != 0 || info.Earliest != base+12 || info.Next != base+12 {
		t.Fatalf("all expired: %+v, want earliest = next = %d", info, base+12)
	}
	if !cs.droppable(ns + 70 + ttl) {
		t.Fatal("an empty, unread channel unused for a TTL is not droppable")
	}
	if cs.droppable(ns + 70 + ttl - 1) {
		t.Fatal("droppable before a TTL of disuse")
	}
	cs.readers = 1
	if cs.droppable(ns + 1<<50) {
		t.Fatal("a channel with readers is droppable")
	}
}

func TestChanState_ExpiryNeverSkipsAnEarlierStreamlet(t *testing.T) {
	// Even if a later entry claims an earlier expiry (which close never
	// produces), expire stops at the first entry that has not expired.
	cs := newChanState(t0, testLimits())
	cs.list = []StreamletRef{
		{ID: 1, First: 10, End: 20, Closed: true, Expires: 500},
		{ID: 2, First: 20, End: 30, Closed: true, Expires: 100},
		{ID: 3, First: 30, End: 40, Closed: true, Expires: 600},
	}
	cs.next = 40
	if got := cs.expire(200, nil); len(got) != 0 {
		t.Fatalf("expired %v: a later streamlet went before an earlier one", got)
	}
	if got := cs.expire(550, nil); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("expired %v, want [1 2]", got)
	}
}

func TestChanState_CloseClampsEnd(t *testing.T) {
	cs := newChanState(t0, testLimits())
	a := cs.addOpen(1, "h", 0)
	cs.close(1, a.First-5, 1)
	if cs.list[0].End != a.First || cs.next != a.First {
		t.Fatalf("end before first not clamped: %+v next %d", cs.list[0], cs.next)
	}
}

func TestChannelInfo_Locate(t *testing.T) {
	info := ChannelInfo{Earliest: 100, Next: 117, Streamlets: []StreamletRef{
		{ID: 1, First: 100, End: 107, Closed: true},
		{ID: 2, First: 107, End: 107, Closed: true}, // empty
		{ID: 3, First: 107, End: 114, Closed: true},
		{ID: 4, First: 114}, // open, 3 messages
	}}
	for _, tc := range []struct {
		p    uint64
		want int
	}{
		{0, -1}, {99, -1}, {100, 0}, {106, 0}, {107, 2}, {113, 2},
		{114, 3}, {116, 3}, {117, -1}, {1 << 62, -1},
	} {
		if got := info.Locate(tc.p); got != tc.want {
			t.Errorf("Locate(%d) = %d, want %d", tc.p, got, tc.want)
		}
	}
	closed := ChannelInfo{Earliest: 100, Next: 107, Streamlets: []StreamletRef{{ID: 1, First: 100, End: 107, Closed: true}}}
	if got := closed.Locate(107); got != -1 {
		t.Errorf("Locate past a closed end = %d", got)
	}
	var empty ChannelInfo
	if got := empty.Locate(1); got != -1 {
		t.Errorf("Locate in an empty channel = %d", got)
	}
}

func TestPositionBase_Monotonic(t *testing.T) {
	prev := positionBase(t0)
	if prev == 0 || prev&(1<<20-1) != 0 {
		t.Fatalf("base %d is zero or not a multiple of 2^20", prev)
	}
	for _, d := range []time.Duration{time.Millisecond, time.Second, time.Hour, 24 * time.Hour * 365 * 30} {
		b := positionBase(t0.Add(d))
		if b <= prev {
			t.Fatalf("base at +%v is %d, not above %d", d, b, prev)
		}
		prev = b
	}
	// Within one millisecond the base is the same; a channel recreated a
	// millisecond later starts 2^20 positions higher.
	if positionBase(t0.Add(999*time.Microsecond)) != positionBase(t0) {
		t.Fatal("base changed within a millisecond")
	}
	if positionBase(t0.Add(time.Millisecond))-positionBase(t0) != 1<<20 {
		t.Fatal("one millisecond is not 2^20 positions")
	}
	if positionBase(time.UnixMilli(0)) == 0 {
		t.Fatal("base 0 at the Unix epoch")
	}
}

func TestOptions_DefaultsAreValid(t *testing.T) {
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.LimitMsgs != 5000 || o.LimitSize != 2<<20 || o.LimitLife != 4*time.Second ||
		o.TTL != 60*time.Second || o.MaxPayload != 1<<20 {
		t.Fatalf("defaults differ from BRIEF.md: %+v", o)
	}
}

func TestOptions_ValidateNamesTheField(t *testing.T) {
	cases := []struct {
		field  string
		mutate func(*Options)
	}{
		{"Listen", func(o *Options) { o.Listen = "no-port" }},
		{"Loops", func(o *Options) { o.Loops = -1 }},
		{"Loops", func(o *Options) { o.Loops = 1025 }},
		{"ServerName", func(o *Options) { o.ServerName = strings.Repeat("x", 256) }},
		{"MaxConns", func(o *Options) { o.MaxConns = 0 }},
		{"MaxSubsPerConn", func(o *Options) { o.MaxSubsPerConn = 0 }},
		{"MaxSubsPerConn", func(o *Options) { o.MaxSubsPerConn = 65536 }},
		{"MaxPayload", func(o *Options) { o.MaxPayload = 0 }},
		{"MaxPayload", func(o *Options) { o.MaxPayload = 64<<20 + 1 }},
		{"OutboundLimit", func(o *Options) { o.OutboundLimit = 64<<10 - 1 }},
		{"MaxRetained", func(o *Options) { o.MaxRetained = -1 }},
		{"SlowPolicy", func(o *Options) { o.SlowPolicy = "drop" }},
		{"PingInterval", func(o *Options) { o.PingInterval = -time.Second }},
		{"HandshakeTimeout", func(o *Options) { o.HandshakeTimeout = 0 }},
		{"LimitMsgs", func(o *Options) { o.LimitMsgs = 0 }},
		{"LimitMsgs", func(o *Options) { o.LimitMsgs = 1<<24 + 1 }},
		{"LimitSize", func(o *Options) { o.LimitSize = o.MaxPayload + 3 }},
		{"LimitSize", func(o *Options) { o.LimitSize = 1<<30 + 1 }},
		{"LimitLife", func(o *Options) { o.LimitLife = time.Millisecond - 1 }},
		{"TTL", func(o *Options) { o.TTL = -1 }},
		{"ChannelRules[0].Prefix", func(o *Options) { o.ChannelRules = []ChannelRule{{Prefix: ""}} }},
		{"ChannelRules[1].LimitMsgs", func(o *Options) {
			o.ChannelRules = []ChannelRule{{Prefix: "a", LimitMsgs: 3}, {Prefix: "b", LimitMsgs: -1}}
		}},
		{"ChannelRules[0].LimitSize", func(o *Options) { o.ChannelRules = []ChannelRule{{Prefix: "a", LimitSize: 100}} }},
		{"ChannelRules[0].LimitLife", func(o *Options) { o.ChannelRules = []ChannelRule{{Prefix: "a", LimitLife: time.Microsecond}} }},
		{"ChannelRules[0].TTL", func(o *Options) { o.ChannelRules = []ChannelRule{{Prefix: "a", TTL: -time.Second}} }},
	}
	for _, tc := range cases {
		o := DefaultOptions()
		tc.mutate(&o)
		err := o.Validate()
		if err == nil {
			t.Errorf("%s: invalid value accepted", tc.field)
			continue
		}
		if !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: error %v does not wrap ErrInvalidOptions", tc.field, err)
		}
		if !strings.Contains(err.Error(), ": "+tc.field+": ") {
			t.Errorf("error %q does not name field %s", err, tc.field)
		}
	}
	// Boundary values that are valid.
	o := DefaultOptions()
	o.Loops, o.MaxSubsPerConn, o.LimitSize, o.LimitLife, o.TTL = 1024, 65535, o.MaxPayload+4, time.Millisecond, 0
	o.OutboundLimit = 64 << 10
	o.ChannelRules = []ChannelRule{{Prefix: "x", LimitMsgs: 1}}
	if err := o.Validate(); err != nil {
		t.Fatalf("boundary values rejected: %v", err)
	}
}

func TestOptions_LimitsForLongestPrefix(t *testing.T) {
	o := DefaultOptions()
	o.ChannelRules = []ChannelRule{
		{Prefix: "a.b.", LimitMsgs: 20, TTL: 2 * time.Second},
		{Prefix: "a.", LimitMsgs: 10, LimitSize: 3 << 20, LimitLife: time.Second},
		{Prefix: "a.b.c", LimitSize: 4 << 20},
	}
	server := limits{o.LimitMsgs, o.LimitSize, o.LimitLife, o.TTL}
	for _, tc := range []struct {
		name string
		want limits
	}{
		{"other", server},
		{"a", server}, // shorter than every prefix
		{"a.x", limits{10, 3 << 20, time.Second, o.TTL}},
		// The longest rule wins alone: its zero fields come from the
		// server, not from shorter matching rules.
		{"a.b.x", limits{20, o.LimitSize, o.LimitLife, 2 * time.Second}},
		{"a.b.c.d", limits{o.LimitMsgs, 4 << 20, o.LimitLife, o.TTL}},
		{"b.a.", server},
	} {
		if got := o.limitsFor(tc.name); got != tc.want {
			t.Errorf("limitsFor(%q) = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
