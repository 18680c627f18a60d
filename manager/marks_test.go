package manager

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
)

// nodes is a Cluster of several hosts without sockets: down nodes are
// neither hosts nor listed, Choose takes the first node of prefer that is
// up and not excluded, and ListAll answers as package cluster's LIST does
// (each up node's streamlets and its manager's mark).
type nodes struct {
	noCopies
	self    string
	hosts   map[string]*host.Host
	mgrs    map[string]*Manager
	down    map[string]bool
	prefer  []string
	quorate bool
	// listed, when set, runs after each ListAll has read the hosts: what
	// another node does between a rebuild's listing and its next step.
	listed func()
}

func (n *nodes) HostOf(node string) role.Host {
	if h := n.hosts[node]; h != nil && !n.down[node] {
		return h
	}
	return nil
}
func (n *nodes) Choose(_ string, _ uint64, _ Load, exclude []string) (string, bool) {
	for _, p := range n.prefer {
		ok := p != n.self && !n.down[p]
		for _, x := range exclude {
			ok = ok && x != p
		}
		if ok {
			return p, true
		}
	}
	return "", false
}
func (n *nodes) ListAll(ch string) []role.Hosted {
	var out []role.Hosted
	for name, h := range n.hosts {
		if n.down[name] {
			continue
		}
		hs, _ := h.List(ch)
		out = append(out, hs...)
		if m := n.mgrs[name]; m != nil {
			out = append(out, m.Marks(ch)...)
		}
	}
	if n.listed != nil {
		n.listed()
	}
	return out
}
func (n *nodes) Notify(string, []string) {}
func (n *nodes) Managed(string) bool     { return true }
func (n *nodes) Skew() time.Duration     { return time.Second }
func (n *nodes) Quorate() bool           { return n.quorate }
func (n *nodes) Usable(node string) bool { return n.hosts[node] != nil && !n.down[node] }

// marksLimits are the limits of the tests of this file: streamlets of 100
// messages.
var marksLimits = role.Limits{Msgs: 100, Size: 2 << 20, Life: 4 * time.Second, TTL: time.Minute}

// newNodes is a quorate cluster of a host per name, all up, seen from
// node b, that chooses by prefer.
func newNodes(clock func() time.Time, prefer []string, names ...string) *nodes {
	n := &nodes{self: "b", hosts: map[string]*host.Host{}, mgrs: map[string]*Manager{}, down: map[string]bool{},
		prefer: prefer, quorate: true}
	for _, name := range names {
		n.hosts[name] = host.New(name, clock)
	}
	return n
}

// manager is a manager on node name with marksLimits; it is not attached
// to the cluster (SetCluster) nor listed in mgrs.
func (n *nodes) manager(name string, clock func() time.Time) *Manager {
	h := n.hosts[name]
	return New(Config{Node: name, Host: h, NewID: h.NewID, Limits: func(string) role.Limits { return marksLimits }, Clock: clock})
}

// TestForgottenFailoverIsNotReused is the kill-during-partition bug of
// the fault suite as a pure sequence (no sockets). Manager b's channel
// has its open streamlet S1 on c. c is cut off: b declares S1 lost at its
// capacity and opens S2 on a (unrecorded on S1's host, which it cannot
// reach), where messages are acknowledged. Then a dies, and b loses its
// quorum and forgets its channels. c comes back with S1 sealed at its
// real (short) end and names no successor; b regains quorum and rebuilds
// the channel from what the hosts report. The positions S2 handed out
// must be neither reused nor silently skipped: the rebuilt list has them
// in a lost range (readers get GAP lost) and the next streamlet starts
// above them. The same holds when another node rebuilds it (it learns
// b's mark from b's LIST answer). Without the marks the rebuilt channel
// continued at S1's end, below S2's acknowledged positions.
func TestForgottenFailoverIsNotReused(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	l := marksLimits
	cl := newNodes(clock, []string{"c", "a", "b"}, "a", "b", "c")
	for name := range cl.hosts {
		cl.mgrs[name] = cl.manager(name, clock)
	}
	mb := cl.mgrs["b"]
	mb.SetCluster(cl)
	const ch = "failover"
	appendN := func(g role.Grant, n int) (last uint64) {
		s := cl.hosts[g.Host].Streamlet(g.Streamlet)
		for i := 0; i < n; i++ {
			pos, err := s.Append([]byte("m"), now.UnixNano())
			if err != nil {
				t.Fatalf("append to %s: %v", g.Host, err)
			}
			last = pos
		}
		return last
	}
	g1, err := mb.WriteGrant(ch, 0)
	if err != nil || g1.Host != "c" {
		t.Fatalf("first grant %+v, %v; want one on c", g1, err)
	}
	appendN(g1, 3)
	cl.down["c"] = true // c cut off: its link failed
	mb.NodeDown("c")
	g2, err := mb.WriteGrant(ch, g1.Streamlet)
	if err != nil || g2.Host != "a" || g2.First != g1.First+uint64(l.Msgs) {
		t.Fatalf("grant after c's loss %+v, %v; want one on a at %d", g2, err, g1.First+uint64(l.Msgs))
	}
	acked := appendN(g2, 5) // acknowledged at g2.First .. acked
	cl.down["a"] = true     // a killed
	mb.NodeDown("a")
	cl.quorate = false // b alone: no quorum, forgets (package cluster)
	mb.ForgetAll()
	now = now.Add(3 * time.Second)
	if _, err := cl.hosts["c"].Seal(g1.Streamlet, 0, ""); err != nil { // S1's lease ended on c
		t.Fatal(err)
	}
	cl.down["c"] = false // healed: b and c are a majority, and b forgets again
	cl.quorate = true
	mb.ForgetAll()

	check := func(m *Manager, who string) {
		t.Helper()
		info, found := m.Info(ch, false)
		if !found {
			t.Fatalf("%s: channel not found", who)
		}
		covered := false
		for _, r := range info.Streamlets {
			if r.Lost && r.First <= g2.First && acked < r.End {
				covered = true
			}
		}
		if !covered || info.Next <= acked {
			t.Fatalf("%s: the acknowledged positions %d..%d are neither listed lost nor below Next %d: %+v",
				who, g2.First, acked, info.Next, info.Streamlets)
		}
		g3, err := m.WriteGrant(ch, 0)
		if err != nil {
			t.Fatalf("%s: grant after the heal: %v", who, err)
		}
		if g3.First <= acked {
			t.Fatalf("%s: new streamlet at %d reuses positions acknowledged up to %d", who, g3.First, acked)
		}
	}
	// Another node that takes the channel over learns b's mark from
	// b's LIST answer (before b rebuilt it and granted anew).
	mc := cl.mgrs["c"]
	cc := *cl
	cc.self = "c"
	mc.SetCluster(&cc)
	check(mc, "c")
	check(mb, "b")
}

// TestStateBuiltWithoutQuorumIsRebuiltBeforeGranting: a lookup while the
// node sees no majority builds the channel from the hosts it reaches,
// here none: a new incarnation. When the majority is back, the first
// grant must not continue that state (before package cluster forgets
// it): it rebuilds from the hosts, which hold the channel's streamlets,
// and continues the same incarnation after them.
func TestStateBuiltWithoutQuorumIsRebuiltBeforeGranting(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	cl := newNodes(clock, []string{"c", "b"}, "b", "c")
	mb := cl.manager("b", clock)
	mb.SetCluster(cl)
	const ch = "window"
	g1, err := mb.WriteGrant(ch, 0)
	if err != nil || g1.Host != "c" {
		t.Fatalf("grant %+v, %v", g1, err)
	}
	mb.ForgetAll() // b lost its quorum
	cl.quorate, cl.down["c"] = false, true
	if _, err := cl.hosts["c"].Seal(g1.Streamlet, 0, ""); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	if info, _ := mb.Info(ch, true); info.Epoch == g1.Epoch {
		t.Fatalf("the lookup without quorum found the channel's epoch %d; the test needs it not to", info.Epoch)
	}
	cl.quorate, cl.down["c"] = true, false // back, not forgotten yet
	g2, err := mb.WriteGrant(ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Epoch != g1.Epoch || g2.First != g1.First {
		t.Fatalf("granted %+v after the quorum came back; want epoch %d continuing at %d", g2, g1.Epoch, g1.First)
	}
}

// TestMarksExpire: a mark is served until the streamlets it covers can no
// longer be reported (lease + TTL + skew + 1 min), then forgotten by the
// tick.
func TestMarksExpire(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	l := marksLimits
	cl := newNodes(clock, []string{"c"}, "b", "c")
	m := cl.manager("b", clock)
	m.SetCluster(cl)
	if _, err := m.WriteGrant("x", 0); err != nil {
		t.Fatal(err)
	}
	m.ForgetAll()
	if mk := m.Marks("x"); len(mk) != 1 || !mk[0].Mark || mk[0].Host != "b" {
		t.Fatalf("marks %+v, want b's one", mk)
	}
	now = now.Add(l.Life + l.TTL + time.Second + time.Minute - time.Millisecond)
	m.Tick(now)
	if len(m.Marks("x")) != 1 {
		t.Fatal("the mark expired early")
	}
	now = now.Add(time.Millisecond)
	m.Tick(now)
	if mk := m.Marks("x"); len(mk) != 0 || len(m.marks) != 0 {
		t.Fatalf("after expiry: marks %+v, %d kept", mk, len(m.marks))
	}
}

// TestUnfoundSuccessorIsBarred: manager b rebuilds a channel whose newest
// streamlet X names a successor Y that no host reports: another manager
// recorded Y on X's host and has not hosted it yet (a view that disagreed
// for a moment; pause-manager of the fault suite) or died. b continues
// above a lost range, and first seals Y at the node chosen for it (barring it there), which
// then refuses to host Y: the other manager cannot continue the channel
// beside b (it rebuilds and finds b's streamlet). When Y was hosted
// meanwhile, b continues after it instead. Without the bar both
// managers continued the channel, and the readers of each missed the
// other's messages.
func TestUnfoundSuccessorIsBarred(t *testing.T) {
	for _, hostedMeanwhile := range []bool{false, true} {
		now := time.Unix(1_800_000_000, 0)
		clock := func() time.Time { return now }
		cl := newNodes(clock, []string{"c"}, "a", "b", "c")
		mb := cl.manager("b", clock)
		mb.SetCluster(cl)
		const ch = "race"
		gx, end, gy := successorRecorded(t, cl, mb, ch, now)
		y := gy.Streamlet
		if hostedMeanwhile {
			if err := cl.hosts["a"].HostStreamlet(gy); err != nil {
				t.Fatal(err)
			}
			mb.ForgetAll() // b rebuilds while Y is listed: the case where no bar is needed
			cl.hosts["a"].Streamlet(y).Append([]byte("y"), now.UnixNano())
			cl.down["a"] = true // ... but its listing misses it
			mb.Info(ch, false)
			cl.down["a"] = false
		}
		g, err := mb.WriteGrant(ch, gx.Streamlet)
		if err != nil {
			t.Fatalf("hosted meanwhile %v: %v", hostedMeanwhile, err)
		}
		if hostedMeanwhile {
			if g.First != end+1 || g.Streamlet == y {
				t.Fatalf("granted %+v; want a streamlet after Y, at %d", g, end+1)
			}
			continue
		}
		if g.Streamlet == y || g.First <= end {
			t.Fatalf("granted %+v; want one above X's end %d, not Y", g, end)
		}
		if err := cl.hosts["a"].HostStreamlet(gy); !errors.Is(err, role.ErrSuccessorTaken) {
			t.Fatalf("the other manager hosted Y after b continued the channel: %v", err)
		}
	}
}

// TestSuccessorHostedDuringTheRebuildIsKept: the other manager (a node
// that managed the channel while this one was away, whose view still
// lags) has recorded Y as X's successor and hosts it just after this
// manager's rebuild listed the hosts. The rebuild waits for Y to be
// hosted and lists again: Y is the channel's open streamlet, nothing is
// lost and nothing is barred. Before, the rebuild took Y for lost at once:
// the channel continued above a lost range (readers got GAP lost) while
// the other manager's Y and its successors took acknowledged messages
// (the N = 2 rolling restart).
func TestSuccessorHostedDuringTheRebuildIsKept(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	cl := newNodes(clock, []string{"c"}, "a", "b", "c")
	mb := cl.manager("b", clock)
	mb.SetCluster(cl)
	const ch = "rejoin"
	gx, end, gy := successorRecorded(t, cl, mb, ch, now)
	y := gy.Streamlet
	hosted := false
	cl.listed = func() {
		if !hosted {
			hosted = true
			if err := cl.hosts["a"].HostStreamlet(gy); err != nil {
				t.Error(err)
			}
		}
	}
	mb.ForgetAll() // b rebuilds at the next use
	// What readers are told at once: Y, not a lost range.
	info, _ := mb.Info(ch, true)
	for _, r := range info.Streamlets {
		if r.Lost {
			t.Fatalf("list %+v has a lost range", info.Streamlets)
		}
	}
	g, err := mb.WriteGrant(ch, gx.Streamlet)
	if err != nil {
		t.Fatal(err)
	}
	if g.Streamlet != y || g.First != end {
		t.Fatalf("granted %+v, want Y (%d) at %d, the other manager's streamlet", g, y, end)
	}
	if _, ok := cl.hosts["a"].Len(y); !ok || cl.hosts["a"].Streamlet(y).Buf().Sealed() {
		t.Fatal("Y was barred or sealed")
	}
}

// successorRecorded has manager mb grant ch's first streamlet X (on c),
// writes three records to it, and then does what another manager does
// that takes the channel over: it seals X recording a successor Y to be
// hosted on a, and does not host Y yet. It returns X's grant, X's end and
// the grant that would host Y.
func successorRecorded(t *testing.T, cl *nodes, mb *Manager, ch string, now time.Time) (gx role.Grant, end uint64, gy role.Grant) {
	t.Helper()
	gx, err := mb.WriteGrant(ch, 0)
	if err != nil {
		t.Fatal(err)
	}
	if gx.Host != "c" {
		t.Fatalf("X granted on %s, want c", gx.Host)
	}
	s := cl.hosts["c"].Streamlet(gx.Streamlet)
	for i := 0; i < 3; i++ {
		if _, err := s.Append([]byte("x"), now.UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	y := cl.hosts["a"].NewID()
	if end, err = cl.hosts["c"].Seal(gx.Streamlet, y, "a"); err != nil {
		t.Fatal(err)
	}
	gy = role.Grant{Channel: ch, Epoch: gx.Epoch, Streamlet: y, Host: "a", First: end, LimitMsgs: 100, LimitSize: 1 << 20,
		LeaseEnd: now.Add(marksLimits.Life).UnixNano()}
	return gx, end, gy
}

func (n *nodes) Claim(ch string, id uint64, node string, over uint64) (bool, uint64, string) {
	return claimAt(n.hosts, n.down, ch, id, node, over)
}
