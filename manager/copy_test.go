package manager

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
)

func TestChanState_ToCopy(t *testing.T) {
	closed := func(id uint64, h string) role.StreamletRef {
		return role.StreamletRef{ID: id, Host: h, First: id * 10, End: id*10 + 10, Closed: true}
	}
	lost := closed(4, "d")
	lost.Lost = true
	hole := role.StreamletRef{First: 50, End: 60, Closed: true, Lost: true}
	open := role.StreamletRef{ID: 7, Host: "d", First: 70}
	list := []role.StreamletRef{closed(1, "d"), closed(2, "a"), closed(3, "d"), lost, hole, closed(6, "d"), open}
	usable := func(n string) bool { return n != "d" }
	cases := []struct {
		name   string
		usable func(string) bool
		busy   []uint64
		want   []uint64
	}{
		{"nothing drains", func(string) bool { return true }, nil, nil},
		{"the drainer's closed streamlets, oldest first; not lost ones, holes or the open one", usable, nil, []uint64{1, 3, 6}},
		{"those being copied are left out", usable, []uint64{3}, []uint64{1, 6}},
		{"every node drains: still only closed data", func(string) bool { return false }, nil, []uint64{1, 2, 3, 6}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := &chanState{list: slices.Clone(list)}
			var got []uint64
			for _, r := range cs.toCopy(tc.usable, func(id uint64) bool { return slices.Contains(tc.busy, id) }, nil) {
				got = append(got, r.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("toCopy = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestChanState_MoveHolderAndSuccessor(t *testing.T) {
	cs := &chanState{list: []role.StreamletRef{
		{ID: 1, Host: "d", First: 0, End: 10, Closed: true},
		{ID: 2, Host: "d", First: 10, End: 20, Closed: true},
		{First: 20, End: 30, Closed: true, Lost: true}, // a lost successor's range
		{ID: 4, Host: "a", First: 30, End: 40, Closed: true, Lost: true},
		{ID: 5, Host: "b", First: 40},
	}}
	if succ, host, ok := cs.successorOf(1); !ok || succ != 2 || host != "d" {
		t.Errorf("successorOf(1) = %d %q %v, want 2 d", succ, host, ok)
	}
	if _, _, ok := cs.successorOf(2); ok {
		t.Error("successorOf(2): a hole is no successor to record (the old holder's own record travels with the copy)")
	}
	if _, _, ok := cs.successorOf(5); ok {
		t.Error("successorOf(open last) reported one")
	}
	cs.claim(5, 99)
	if succ, _, ok := cs.successorOf(5); !ok || succ != 99 {
		t.Errorf("successorOf(5) with a claimed successor = %d %v, want 99", succ, ok)
	}
	for _, tc := range []struct {
		id  uint64
		was []string
		to  string
		ok  bool
	}{
		{1, []string{"d"}, "a", true},
		{1, []string{"d"}, "c", false},      // the set changed meanwhile
		{1, []string{"a", "d"}, "d", false}, // holds it already
		{2, []string{"x"}, "a", false},      // another holder
		{4, []string{"a"}, "c", false},      // lost
		{5, []string{"b"}, "c", false},      // open
		{9, []string{"d"}, "a", false},      // expired
		{1, []string{"a", "d"}, "c", true},  // a third holder
	} {
		if got := cs.addHolder(tc.id, tc.was, tc.to); got != tc.ok {
			t.Errorf("addHolder(%d, %v, %s) = %v, want %v", tc.id, tc.was, tc.to, got, tc.ok)
		}
	}
	if r := cs.list[0]; r.Host != "c" || !slices.Equal(r.Replicas, []string{"c", "a", "d"}) || cs.list[1].Host != "d" || cs.list[1].Replicas != nil {
		t.Errorf("holders after the copies: %+v %+v, want c first of [c a d], and d alone", r, cs.list[1])
	}
	full := &chanState{list: []role.StreamletRef{{ID: 1, Host: "n0", Closed: true}}}
	for i := 1; i < 20; i++ {
		full.addHolder(1, full.list[0].Set(), fmt.Sprintf("n%d", i))
	}
	if n := len(full.list[0].Replicas); n != maxHolders {
		t.Errorf("%d holders listed, at most %d", n, maxHolders)
	}
}

// TestChanState_ToCopyReplicated: with Limits.Replicas N, a closed
// streamlet is copied while fewer than N of its holders are usable: a
// replica that died (taken out of the set) or drains (still in it) is
// made up for; copySource reads from a usable holder when there is one.
func TestChanState_ToCopyReplicated(t *testing.T) {
	usable := func(n string) bool { return n != "d" }
	ref := func(id uint64, set ...string) role.StreamletRef {
		r := role.StreamletRef{ID: id, Host: set[0], Closed: true}
		if len(set) > 1 {
			r.Replicas = set
		}
		return r
	}
	cs := &chanState{limits: role.Limits{Replicas: 2}, list: []role.StreamletRef{
		ref(1, "a", "b"),      // two usable: fine
		ref(2, "a"),           // one left after a death
		ref(3, "d", "b"),      // one drains
		ref(4, "a", "b", "d"), // copied already, the drainer still listed
		ref(5, "d"),           // the only holder drains
	}}
	var got []uint64
	for _, r := range cs.toCopy(usable, func(uint64) bool { return false }, nil) {
		got = append(got, r.ID)
	}
	if !slices.Equal(got, []uint64{2, 3, 5}) {
		t.Fatalf("toCopy = %v, want [2 3 5]", got)
	}
	for _, tc := range []struct {
		r    role.StreamletRef
		want string
	}{{ref(3, "d", "b"), "b"}, {ref(5, "d"), "d"}, {ref(1, "a", "b"), "a"}} {
		if got := copySource(tc.r, usable); got != tc.want {
			t.Errorf("copySource(%v) = %s, want %s", tc.r.Set(), got, tc.want)
		}
	}
}

// drainNodes is a Cluster of in-process hosts; the nodes in draining are
// not usable. Copy makes the copy the way a node does: a NewCopy on the
// target filled from the holder's records, then adopted with the holder's
// own report.
type drainNodes struct {
	hosts    map[string]*host.Host
	draining map[string]bool
	self     string
	failCopy bool
	copies   *int
}

func (c drainNodes) HostOf(n string) role.Host {
	if h := c.hosts[n]; h != nil {
		return h
	}
	return nil
}
func (c drainNodes) Choose(_ string, seq uint64, _ Load, exclude []string) (string, bool) {
	var names []string
	for n := range c.hosts {
		if !c.draining[n] && !slices.Contains(exclude, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "", false
	}
	slices.Sort(names)
	return names[seq%uint64(len(names))], true
}
func (c drainNodes) ListAll(ch string) []role.Hosted {
	var out []role.Hosted
	for _, h := range c.hosts {
		hs, _ := h.List(ch)
		out = append(out, hs...)
	}
	return out
}
func (c drainNodes) Notify(string, []string) {}
func (c drainNodes) Managed(string) bool     { return true }
func (c drainNodes) Skew() time.Duration     { return time.Second }
func (c drainNodes) Quorate() bool           { return true }
func (c drainNodes) Usable(n string) bool    { return !c.draining[n] }
func (c drainNodes) Go(f func()) bool        { f(); return true }
func (c drainNodes) Copy(to, channel string, epoch uint64, ref role.StreamletRef) error {
	if c.failCopy {
		return errors.New("copy refused")
	}
	*c.copies++
	src := c.hosts[ref.Host].Streamlet(ref.ID)
	if src == nil {
		return role.ErrUnknownStreamlet
	}
	dst := c.hosts[to].NewCopy(ref.ID, channel, ref.First, role.Limits{Msgs: 100, Size: 1 << 20}, ref.Host)
	b := src.Buf()
	b.Acquire()
	n := b.Len()
	recs := make([][]byte, n)
	for i := range n {
		recs[i] = append([]byte(nil), b.Get(i)...)
	}
	b.Release()
	dst.Fill(0, n, func(i int) ([]byte, bool, int64) { return recs[i], false, 1 }, true)
	hs, _ := c.hosts[ref.Host].List(channel)
	for _, h := range hs {
		if h.ID == ref.ID {
			if h.Epoch != epoch {
				return fmt.Errorf("epoch %d, want %d", h.Epoch, epoch)
			}
			return c.hosts[to].Adopt(dst, h)
		}
	}
	return role.ErrUnknownStreamlet
}

// TestTick_CopiesADrainingHoldersStreamlets: the closed streamlets held
// by a draining node are copied to other nodes, at most maxCopies per
// tick, and the list names the new holders; the copy holds the same
// records and the successor, so a manager that rebuilds the channel from
// the live hosts alone (the drained one gone) finds the same list.
func TestTick_CopiesADrainingHoldersStreamlets(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	hosts := map[string]*host.Host{"a": host.New("a", clock), "b": host.New("b", clock), "d": host.New("d", clock)}
	copies := 0
	cl := drainNodes{hosts: hosts, draining: map[string]bool{}, self: "a", copies: &copies}
	cfg := testConfig(hosts["a"], clock)
	l := role.Limits{Msgs: 3, Size: 1 << 20, Life: time.Hour, TTL: time.Hour}
	cfg.Limits = func(string) role.Limits { return l }
	m := New(cfg)
	// Every streamlet on d: the only usable choice before the drain.
	pin := drainNodes{hosts: map[string]*host.Host{"d": hosts["d"]}, draining: map[string]bool{}, copies: &copies}
	m.SetCluster(pin)
	const ch = "drained"
	var after uint64
	pos := uint64(0)
	for k := 0; k < 7; k++ { // six full streamlets and an open one
		g, err := m.WriteGrant(ch, after)
		if err != nil {
			t.Fatal(err)
		}
		s := hosts["d"].Streamlet(g.Streamlet)
		for {
			p, err := s.Append(fmt.Appendf(nil, "m%d", pos), now.UnixNano())
			if err != nil {
				break
			}
			pos = p + 1
			if k == 6 {
				break
			}
		}
		after = g.Streamlet
	}
	m.SetCluster(cl)
	cl.draining["d"] = true
	// The drain seals the open streamlet; the next grant closes it in the list.
	hosts["d"].SetDraining()
	g, err := m.WriteGrant(ch, after)
	if err != nil || g.Host == "d" {
		t.Fatalf("grant after the drain: %+v %v", g, err)
	}
	info0, _ := m.Info(ch, false)
	for ticks := 0; ; ticks++ {
		if ticks > 3 {
			t.Fatalf("still copying after %d ticks: %+v", ticks, m.lockExisting(ch).st.list)
		}
		acts := m.Tick(now)
		if len(acts) > maxCopies {
			t.Fatalf("tick started %d copies, limit %d", len(acts), maxCopies)
		}
		m.Do(acts)
		if len(acts) == 0 {
			break
		}
	}
	info, _ := m.Info(ch, false)
	if len(info.Streamlets) != len(info0.Streamlets) {
		t.Fatalf("list changed length: %d -> %d", len(info0.Streamlets), len(info.Streamlets))
	}
	for i, r := range info.Streamlets {
		if r.Host == "d" || r.Lost {
			t.Errorf("streamlet %d: %+v still on the drained node or lost", i, r)
		}
		if r.ID != info0.Streamlets[i].ID || r.First != info0.Streamlets[i].First || r.End != info0.Streamlets[i].End {
			t.Errorf("streamlet %d changed: %+v -> %+v", i, info0.Streamlets[i], r)
		}
	}
	if done, failed, running, waiting := m.CopyStats(); done != 7 || failed != 0 || running != 0 || waiting != 0 {
		t.Errorf("CopyStats = %d done, %d failed, %d running, %d waiting; want 7 0 0 0", done, failed, running, waiting)
	}
	// Rebuild from a and b alone (d gone): the same streamlets, the same
	// next position, nothing lost.
	delete(hosts, "d")
	m2 := New(cfg)
	m2.SetCluster(drainNodes{hosts: hosts, draining: map[string]bool{}, copies: &copies})
	info2, _ := m2.Info(ch, false)
	if info2.Next != info.Next || len(info2.Streamlets) != len(info.Streamlets) {
		t.Fatalf("rebuilt without the drained node: next %d (want %d), %d streamlets (want %d)", info2.Next, info.Next,
			len(info2.Streamlets), len(info.Streamlets))
	}
	for i, r := range info2.Streamlets {
		if r.Lost || r.ID != info.Streamlets[i].ID {
			t.Errorf("rebuilt streamlet %d: %+v, want %+v", i, r, info.Streamlets[i])
		}
	}
	// The records themselves moved.
	r0 := info.Streamlets[0]
	s := hosts[r0.Host].Streamlet(r0.ID)
	if p, want := s.Buf().Get(1), fmt.Sprintf("m%d", r0.First+1); string(p) != want {
		t.Errorf("record 1 of the first copy: %q, want %q", p, want)
	}
}

// TestTick_FailedCopyIsRetried: a copy that fails leaves the list as it
// was and is started again at the next tick; with no node to copy to,
// the streamlet keeps waiting (counted as waiting, not as failed).
func TestTick_FailedCopyIsRetried(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	hosts := map[string]*host.Host{"a": host.New("a", clock), "d": host.New("d", clock)}
	copies := 0
	m := New(testConfig(hosts["a"], clock))
	m.SetCluster(drainNodes{hosts: map[string]*host.Host{"d": hosts["d"]}, draining: map[string]bool{}, copies: &copies})
	g, err := m.WriteGrant("c", 0)
	if err != nil {
		t.Fatal(err)
	}
	hosts["d"].SetDraining()
	cl := drainNodes{hosts: hosts, draining: map[string]bool{"d": true}, failCopy: true, copies: &copies}
	m.SetCluster(cl)
	if g2, err := m.WriteGrant("c", g.Streamlet); err != nil || g2.Host != "a" {
		t.Fatalf("grant after the drain: %+v %v", g2, err)
	}
	for range 2 {
		m.Do(m.Tick(now))
	}
	if done, failed, running, waiting := m.CopyStats(); done != 0 || failed != 2 || running != 0 || waiting != 1 {
		t.Errorf("failing: CopyStats = %d done, %d failed, %d running, %d waiting; want 0 2 0 1", done, failed, running, waiting)
	}
	cl.failCopy = false
	m.SetCluster(cl)
	m.Do(m.Tick(now))
	info, _ := m.Info("c", false)
	if r := info.Streamlets[0]; r.Host != "a" || r.Lost {
		t.Errorf("after the retry: %+v, want held by a", r)
	}
	// Only the drainer left to copy to: nothing starts, the streamlet waits.
	f := host.New("f", clock)
	m2 := New(testConfig(hosts["a"], clock))
	m2.SetCluster(drainNodes{hosts: map[string]*host.Host{"f": f}, draining: map[string]bool{}, copies: &copies})
	g, err = m2.WriteGrant("e", 0)
	if err != nil {
		t.Fatal(err)
	}
	f.SetDraining()
	m2.SetCluster(drainNodes{hosts: map[string]*host.Host{"f": f}, draining: map[string]bool{"f": true}, copies: &copies})
	if _, err := m2.WriteGrant("e", g.Streamlet); err == nil {
		t.Fatal("granted with no usable host")
	}
	m2.Do(m2.Tick(now))
	if done, failed, _, waiting := m2.CopyStats(); done != 0 || failed != 0 || waiting != 1 {
		t.Errorf("no target: CopyStats = %d done, %d failed, %d waiting; want 0 0 1 (waiting is no failure)", done, failed, waiting)
	}
}

func (c drainNodes) Claim(ch string, id uint64, node string, over uint64) (bool, uint64, string) {
	return claimAt(c.hosts, nil, ch, id, node, over)
}
func (drainNodes) Confirm(string) (bool, string) { return true, "" }
