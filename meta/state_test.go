package meta

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/role"
)

const (
	sec   = int64(time.Second)
	t0    = int64(1_760_000_000_000) * 1_000_000 // a unix time in ns
	ttl   = 60 * sec
	life  = 4 * sec
	limit = 5000
)

// applied encodes c, applies it through the byte path and checks every
// channel's invariants afterwards.
// An OPEN or CREATE written with epoch 0 gets the epoch State.NewEpoch
// proposes, as a proposer's would.
func applied(t *testing.T, s *State, c Cmd) Result {
	t.Helper()
	if (c.Kind == KindOpen || c.Kind == KindCreate) && c.Epoch == 0 {
		c.Epoch = s.NewEpoch(c.Time)
	}
	r := Result(s.Apply(s.Applied()+1, AppendCmd(nil, &c))[0])
	s.Range(func(ch *Channel) bool {
		if e := ch.check(); e != "" {
			t.Fatalf("after %v: channel %q breaks an invariant: %s", c.Kind, ch.Name, e)
		}
		return true
	})
	return r
}

func openCmd(ch string, epoch, tail uint64, end uint64, id uint64, now int64, replicas ...string) Cmd {
	return Cmd{Kind: KindOpen, Time: now, Channel: ch, Epoch: epoch, Tail: tail,
		Seal: Seal{End: end, TTL: ttl}, New: NewStreamlet{ID: id, Replicas: replicas, Life: life}}
}

func mustChan(t *testing.T, s *State, name string) *Channel {
	t.Helper()
	c, ok := s.Channel(name)
	if !ok {
		t.Fatalf("channel %q missing", name)
	}
	return c
}

// Behaviour 1 and 15: publishing to a never-used channel creates it; its
// first message is at position 1 of its epoch.
func TestOpen_CreatesTheChannelAtPosition1(t *testing.T) {
	s := New()
	if r := applied(t, s, openCmd("chat", 0, 0, 0, 7, t0, "a")); r != ResultOK {
		t.Fatalf("open: %v", r)
	}
	c := mustChan(t, s, "chat")
	if c.Epoch != uint64(t0/1e6) || c.Next != 1 || len(c.List) != 1 {
		t.Fatalf("channel %+v", c)
	}
	o, ok := c.Open()
	if !ok || o.ID != 7 || o.First != 1 || o.Host != "a" || o.LeaseEnd != t0+life {
		t.Fatalf("open streamlet %+v", o)
	}
	// A second create-open loses: the channel exists now.
	if r := applied(t, s, openCmd("chat", 0, 0, 0, 8, t0, "b")); r != ResultConflict {
		t.Fatalf("second create: %v, want conflict", r)
	}
	// Channels created at once may share an epoch: none conflicts with
	// another (epochs tell one channel's incarnations apart).
	if r := applied(t, s, openCmd("other", c.Epoch, 0, 0, 9, t0, "b")); r != ResultOK {
		t.Fatalf("create with another channel's epoch: %v", r)
	}
	// A new incarnation's epoch must be above every ended incarnation's.
	applied(t, s, Cmd{Kind: KindCreate, Time: t0, Channel: "gone", Epoch: c.Epoch + 5})
	applied(t, s, Cmd{Kind: KindDrop, Time: t0, Batch: []Ref{{Channel: "gone", Epoch: c.Epoch + 5}}})
	if r := applied(t, s, Cmd{Kind: KindCreate, Time: t0, Channel: "gone", Epoch: c.Epoch + 5}); r != ResultConflict {
		t.Fatalf("CREATE with an ended incarnation's epoch: %v, want conflict", r)
	}
	if r := applied(t, s, openCmd("gone2", c.Epoch+5, 0, 0, 10, t0, "b")); r != ResultConflict {
		t.Fatalf("OPEN creating with an epoch at the floor: %v, want conflict", r)
	}
}

// The compare-and-set: two proposers that both saw streamlet 7 open can
// never both extend the channel; the loser changes nothing.
func TestOpen_CompareAndSetOnTheTail(t *testing.T) {
	s := New()
	applied(t, s, openCmd("c", 0, 0, 0, 7, t0, "a"))
	ep := mustChan(t, s, "c").Epoch
	if r := applied(t, s, openCmd("c", ep, 7, 1+100, 8, t0+sec, "b")); r != ResultOK {
		t.Fatalf("first successor: %v", r)
	}
	before := s.AppendSnapshot(nil)
	for _, c := range []Cmd{
		openCmd("c", ep, 7, 1+50, 9, t0+2*sec, "c"),                                                          // stale tail
		openCmd("c", ep+1, 8, 101+5, 9, t0+2*sec, "c"),                                                       // wrong epoch
		openCmd("c", 0, 0, 0, 9, t0+2*sec, "c"),                                                              // create over an existing channel
		{Kind: KindClose, Time: t0 + 2*sec, Channel: "c", Epoch: ep, Tail: 7, Seal: Seal{End: 60, TTL: ttl}}, // closed already
		openCmd("c", ep, 8, 0, 9, t0+2*sec, "c"),                                                             // the tail is open: it must say how it ends
	} {
		if r := applied(t, s, c); r != ResultConflict {
			t.Fatalf("%v tail %d epoch %d: %v, want conflict", c.Kind, c.Tail, c.Epoch, r)
		}
	}
	if after := s.AppendSnapshot(nil); !bytes.Equal(before[9:], after[9:]) { // (the applied index differs)
		t.Fatalf("a refused command changed the state")
	}
	c := mustChan(t, s, "c")
	if len(c.List) != 2 || c.List[0].End != 101 || c.List[1].First != 101 || c.Next != 101 {
		t.Fatalf("list %+v next %d", c.List, c.Next)
	}
}

// An OPEN that says how the tail ends expects it open: when a CLOSE ended
// it since (the manager that opened it could not host it and closed it
// empty), the OPEN conflicts, since its new streamlet would start at the
// CLOSE's end, not at the end the proposer hosted it at (two managers,
// TestTwoManagersNeverBothExtendAChannel: a streamlet hosted at 751 was
// listed at 651).
func TestOpen_ExpectsTheTailOpenOrClosedAsItSaw(t *testing.T) {
	s := New()
	applied(t, s, openCmd("c", 0, 0, 0, 7, t0, "a"))
	ep := mustChan(t, s, "c").Epoch
	applied(t, s, Cmd{Kind: KindClose, Time: t0 + sec, Channel: "c", Epoch: ep, Tail: 7, Seal: Seal{End: 1, TTL: ttl}})
	if r := applied(t, s, openCmd("c", ep, 7, 1+limit, 8, t0+sec, "b")); r != ResultConflict {
		t.Fatalf("OPEN closing a tail closed since: %v, want conflict", r)
	}
	if r := applied(t, s, openCmd("c", ep, 7, 0, 8, t0+sec, "b")); r != ResultOK {
		t.Fatalf("OPEN after the closed tail: %v", r)
	}
	if o, _ := mustChan(t, s, "c").Open(); o.ID != 8 || o.First != 1 {
		t.Fatalf("open streamlet %+v, want 8 at 1", o)
	}
}

func TestClose_LostKeepsTheReservedRangeAndRecoveryKeepsSurvivors(t *testing.T) {
	s := New()
	applied(t, s, openCmd("c", 0, 0, 0, 7, t0, "a", "b", "c"))
	ep := mustChan(t, s, "c").Epoch
	// Recovery: b and c survived holding 40 records.
	applied(t, s, Cmd{Kind: KindClose, Time: t0 + sec, Channel: "c", Epoch: ep, Tail: 7,
		Seal: Seal{End: 41, Keep: []string{"b", "c"}, TTL: ttl}})
	c := mustChan(t, s, "c")
	if r := c.List[0]; !r.Closed || r.End != 41 || r.Host != "b" || !slices.Equal(r.Replicas, []string{"b", "c"}) || r.Expires != t0+sec+ttl {
		t.Fatalf("recovered %+v", r)
	}
	applied(t, s, openCmd("c", ep, 7, 0, 8, t0+2*sec, "a"))
	// The single copy's host died: lost, ending at First + the limit.
	applied(t, s, Cmd{Kind: KindClose, Time: t0 + 3*sec, Channel: "c", Epoch: ep, Tail: 8,
		Seal: Seal{End: 41 + limit, Lost: true, TTL: ttl}})
	c = mustChan(t, s, "c")
	if r := c.List[1]; !r.Lost || r.End != 41+limit || c.Next != 41+limit {
		t.Fatalf("lost %+v next %d", r, c.Next)
	}
	// An end below First is refused.
	applied(t, s, openCmd("c", ep, 8, 0, 9, t0+4*sec, "a"))
	if r := applied(t, s, Cmd{Kind: KindClose, Time: t0 + 5*sec, Channel: "c", Epoch: ep, Tail: 9,
		Seal: Seal{End: 3, TTL: ttl}}); r != ResultInvalid {
		t.Fatalf("end below first: %v", r)
	}
}

func TestHoldersAndNodeGone(t *testing.T) {
	s := New()
	applied(t, s, openCmd("c", 0, 0, 0, 7, t0, "a", "b"))
	ep := mustChan(t, s, "c").Epoch
	applied(t, s, openCmd("c", ep, 7, 11, 8, t0+sec, "b"))
	applied(t, s, openCmd("c", ep, 8, 21, 9, t0+2*sec, "c"))
	// A copy of 7 made on c: c leads.
	if r := applied(t, s, Cmd{Kind: KindHolders, Time: t0 + 3*sec, Channel: "c", Epoch: ep, Tail: 7, Add: []string{"c"}}); r != ResultOK {
		t.Fatalf("holders: %v", r)
	}
	if r := mustChan(t, s, "c").List[0]; !slices.Equal(r.Set(), []string{"c", "a", "b"}) {
		t.Fatalf("holders of 7: %v", r.Set())
	}
	// The open streamlet's holders are not changed this way.
	if r := applied(t, s, Cmd{Kind: KindHolders, Time: t0 + 3*sec, Channel: "c", Epoch: ep, Tail: 9, Add: []string{"a"}}); r != ResultConflict {
		t.Fatalf("holders of the open one: %v", r)
	}
	applied(t, s, Cmd{Kind: KindNodeGone, Time: t0 + 4*sec, Node: "b", Instance: "b2"})
	if i, ok := s.Instance("b"); !ok || i != "b2" {
		t.Fatalf("instance of b: %q %v", i, ok)
	}
	c := mustChan(t, s, "c")
	if !slices.Equal(c.List[0].Set(), []string{"c", "a"}) || !c.List[1].Lost || c.List[1].End != 21 {
		t.Fatalf("after b gone: %+v", c.List)
	}
	if o, _ := c.Open(); o.Host != "c" {
		t.Fatalf("open streamlet changed: %+v", o)
	}
}

func TestExpireAndDrop(t *testing.T) {
	s := New()
	applied(t, s, openCmd("c", 0, 0, 0, 7, t0, "a"))
	ep := mustChan(t, s, "c").Epoch
	applied(t, s, openCmd("c", ep, 7, 11, 8, t0+sec, "a"))
	applied(t, s, openCmd("c", ep, 8, 21, 9, t0+2*sec, "a"))
	// Dropping a channel that retains something does nothing; expiring an
	// open streamlet does nothing; the prefix through 8 goes.
	applied(t, s, Cmd{Kind: KindDrop, Time: t0 + 3*sec, Batch: []Ref{{Channel: "c", Epoch: ep}}})
	applied(t, s, Cmd{Kind: KindExpire, Time: t0 + 3*sec, Batch: []Ref{{Channel: "c", Epoch: ep, ID: 9}, {Channel: "c", Epoch: ep, ID: 8}}})
	c := mustChan(t, s, "c")
	if len(c.List) != 1 || c.List[0].ID != 9 || c.Next != 21 {
		t.Fatalf("after expiry: %+v", c)
	}
	applied(t, s, Cmd{Kind: KindClose, Time: t0 + 4*sec, Channel: "c", Epoch: ep, Tail: 9, Seal: Seal{End: 21, TTL: ttl}})
	applied(t, s, Cmd{Kind: KindExpire, Time: t0 + 4*sec, Batch: []Ref{{Channel: "c", Epoch: ep, ID: 9}}})
	if c = mustChan(t, s, "c"); len(c.List) != 0 || c.Next != 21 {
		t.Fatalf("empty channel keeps its next position: %+v", c)
	}
	applied(t, s, Cmd{Kind: KindDrop, Time: t0 + 5*sec, Batch: []Ref{{Channel: "c", Epoch: ep + 1}}})
	if _, ok := s.Channel("c"); !ok {
		t.Fatalf("a drop of another epoch removed the channel")
	}
	applied(t, s, Cmd{Kind: KindDrop, Time: t0 + 5*sec, Batch: []Ref{{Channel: "c", Epoch: ep}}})
	if _, ok := s.Channel("c"); ok || s.Len() != 0 {
		t.Fatalf("channel not dropped")
	}
	// Behaviour 15: a new incarnation changes the epoch, even within the
	// same millisecond, and starts at position 1 again.
	applied(t, s, Cmd{Kind: KindCreate, Time: t0, Channel: "c"})
	if c = mustChan(t, s, "c"); c.Epoch <= ep || c.Next != 1 {
		t.Fatalf("recreated %+v (old epoch %d)", c, ep)
	}
}

func TestObserverSeesEveryChange(t *testing.T) {
	s := New()
	var got []Change
	s.SetObserver(func(c Change) { got = append(got, c) })
	applied(t, s, openCmd("c", 0, 0, 0, 7, t0, "a"))
	ep := mustChan(t, s, "c").Epoch
	applied(t, s, openCmd("c", ep, 7, 11, 8, t0+sec, "b"))
	applied(t, s, openCmd("c", ep, 7, 11, 9, t0+sec, "b")) // conflict: no change
	applied(t, s, Cmd{Kind: KindExpire, Time: t0 + 2*sec, Batch: []Ref{{Channel: "c", Epoch: ep, ID: 7}}})
	if len(got) != 3 {
		t.Fatalf("%d changes, want 3: %+v", len(got), got)
	}
	if !got[0].Created || got[0].Opened == nil || got[0].Opened.ID != 7 || got[0].Index != 1 {
		t.Fatalf("first change %+v", got[0])
	}
	if got[1].Opened.ID != 8 || len(got[1].Closed) != 1 || got[1].Closed[0].ID != 7 || got[1].Closed[0].End != 11 {
		t.Fatalf("second change %+v", got[1])
	}
	if len(got[2].Freed) != 1 || got[2].Freed[0].ID != 7 || got[2].Kind != KindExpire {
		t.Fatalf("third change %+v", got[2])
	}
}

// TestObserver_RemovedNodes: a HOLDERS change names the nodes it removed,
// a NODE_GONE the node it took out; a close names none (host.Apply frees
// on them, and on a close, the replicas left out).
func TestObserver_RemovedNodes(t *testing.T) {
	s := New()
	var got []Change
	s.SetObserver(func(c Change) { got = append(got, c) })
	applied(t, s, openCmd("c", 0, 0, 0, 7, t0, "a", "b"))
	ep := mustChan(t, s, "c").Epoch
	applied(t, s, openCmd("c", ep, 7, 11, 8, t0+sec, "b"))
	applied(t, s, Cmd{Kind: KindHolders, Time: t0 + 2*sec, Channel: "c", Epoch: ep, Tail: 7, Add: []string{"c"}, Remove: []string{"a"}})
	applied(t, s, Cmd{Kind: KindNodeGone, Time: t0 + 3*sec, Node: "b"})
	if len(got) != 4 || len(got[1].Removed) != 0 {
		t.Fatalf("changes %+v", got)
	}
	if !slices.Equal(got[2].Removed, []string{"a"}) || !slices.Equal(got[3].Removed, []string{"b"}) {
		t.Fatalf("removed: HOLDERS %v, NODE_GONE %v", got[2].Removed, got[3].Removed)
	}
}

func TestApply_MalformedChangesNothing(t *testing.T) {
	s := New()
	applied(t, s, openCmd("c", 0, 0, 0, 7, t0, "a"))
	before := s.AppendSnapshot(nil)
	for _, b := range [][]byte{nil, {0x02}, {0x63, 0, 0, 0, 0, 0, 0, 0, 0}, AppendCmd(nil, &Cmd{Kind: KindCreate, Channel: "x"})[:12]} {
		if r := Result(s.Apply(2, b)[0]); r != ResultInvalid {
			t.Fatalf("%x: %v", b, r)
		}
	}
	if after := s.AppendSnapshot(nil); !bytes.Equal(before[9:], after[9:]) {
		t.Fatalf("a malformed command changed the state")
	}
}

// TestRandomCommandsKeepTheInvariants applies random commands, stale ones
// among them (what proposers with old views send), and checks after each
// the invariants (applied does) and that no position is ever covered by
// two streamlets of one incarnation, against a model that remembers the
// highest end ever covered per epoch. Two replicas applying the same
// commands end identical.
func TestRandomCommandsKeepTheInvariants(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed))
		a, b := New(), New()
		covered := map[uint64]uint64{} // epoch -> highest position covered + 1
		nextID := uint64(1)
		now := t0
		chans := []string{"a", "b", "c"}
		nodes := []string{"n1", "n2", "n3", "n4"}
		for i := 0; i < 3000; i++ {
			now += int64(rng.IntN(int(sec)))
			name := chans[rng.IntN(len(chans))]
			cur, ok := a.Channel(name)
			var c Cmd
			switch k := rng.IntN(10); {
			case k < 5:
				ep, tail, end := uint64(0), uint64(0), uint64(0)
				if ok {
					ep, tail = cur.Epoch, cur.TailID()
					if o, open := cur.Open(); open {
						end = o.First + uint64(rng.IntN(50))
					}
				}
				if rng.IntN(5) == 0 && ok { // a stale view
					tail = uint64(rng.IntN(int(nextID + 1)))
				}
				nextID++
				c = openCmd(name, ep, tail, end, nextID, now, nodes[rng.IntN(4)], nodes[rng.IntN(4)])
				if c.New.Replicas[0] == c.New.Replicas[1] {
					c.New.Replicas = c.New.Replicas[:1]
				}
				c.Seal.Lost = rng.IntN(8) == 0
			case k < 6 && ok:
				if o, open := cur.Open(); open {
					c = Cmd{Kind: KindClose, Time: now, Channel: name, Epoch: cur.Epoch, Tail: o.ID,
						Seal: Seal{End: o.First + uint64(rng.IntN(50)), TTL: int64(rng.IntN(int(ttl)))}}
				} else {
					continue
				}
			case k < 7 && ok && len(cur.List) > 0:
				r := cur.List[rng.IntN(len(cur.List))]
				c = Cmd{Kind: KindHolders, Time: now, Channel: name, Epoch: cur.Epoch, Tail: r.ID,
					Add: []string{nodes[rng.IntN(4)]}, Remove: []string{nodes[rng.IntN(4)]}}
			case k < 8:
				c = Cmd{Kind: KindNodeGone, Time: now, Node: nodes[rng.IntN(4)]}
			case k < 9 && ok && len(cur.List) > 0:
				c = Cmd{Kind: KindExpire, Time: now, Batch: []Ref{{Channel: name, Epoch: cur.Epoch, ID: cur.List[rng.IntN(len(cur.List))].ID}}}
			case ok:
				c = Cmd{Kind: KindDrop, Time: now, Batch: []Ref{{Channel: name, Epoch: cur.Epoch}}}
			default:
				c = Cmd{Kind: KindCreate, Time: now, Channel: name}
			}
			ra := applied(t, a, c)
			if rb := applied(t, b, c); ra != rb {
				t.Fatalf("seed %d step %d: replicas answered %v and %v", seed, i, ra, rb)
			}
			if c.Kind == KindOpen && ra == ResultOK {
				after := mustChan(t, a, name)
				o, _ := after.Open()
				if o.First < covered[after.Epoch] {
					t.Fatalf("seed %d step %d: streamlet %d starts at %d, below %d already covered", seed, i, o.ID, o.First, covered[after.Epoch])
				}
				if n := len(after.List); n > 1 {
					covered[after.Epoch] = max(covered[after.Epoch], after.List[n-2].End)
				}
				covered[after.Epoch] = max(covered[after.Epoch], o.First)
			}
		}
		if sa, sb := a.AppendSnapshot(nil), b.AppendSnapshot(nil); !bytes.Equal(sa, sb) {
			t.Fatalf("seed %d: replicas diverged", seed)
		}
	}
}

func TestSnapshotRestoresTheSameState(t *testing.T) {
	s := New()
	applied(t, s, openCmd("x", 0, 0, 0, 7, t0, "a", "b"))
	ep := mustChan(t, s, "x").Epoch
	applied(t, s, openCmd("x", ep, 7, 11, 8, t0+sec, "c"))
	applied(t, s, Cmd{Kind: KindCreate, Time: t0 + sec, Channel: "empty"})
	applied(t, s, Cmd{Kind: KindCreate, Time: t0 + 2*sec, Channel: "dropped"})
	dropped := mustChan(t, s, "dropped").Epoch
	applied(t, s, Cmd{Kind: KindDrop, Time: t0 + 2*sec, Batch: []Ref{{Channel: "dropped", Epoch: dropped}}})
	applied(t, s, Cmd{Kind: KindNodeGone, Time: t0 + sec, Node: "n", Instance: "n7"})
	snap := s.AppendSnapshot(nil)
	r := New()
	if err := r.Restore(bytes.NewReader(snap), 1<<20); err != nil {
		t.Fatal(err)
	}
	if got := r.AppendSnapshot(nil); !bytes.Equal(got, snap) {
		t.Fatalf("restored state encodes differently")
	}
	for _, name := range []string{"x", "empty"} {
		want, got := mustChan(t, s, name), mustChan(t, r, name)
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%s: restored %+v, want %+v", name, got, want)
		}
	}
	if i, ok := r.Instance("n"); !ok || i != "n7" {
		t.Fatalf("restored instance %q %v", i, ok)
	}
	if r.Len() != 2 || r.Applied() != s.Applied() {
		t.Fatalf("len %d applied %d", r.Len(), r.Applied())
	}
	// The epoch floor survives a restore: a recreated channel's epoch is
	// above its ended incarnation's.
	applied(t, r, Cmd{Kind: KindCreate, Time: 0, Channel: "dropped"})
	if c := mustChan(t, r, "dropped"); c.Epoch <= dropped {
		t.Fatalf("epoch %d after restore, the ended incarnation's was %d", c.Epoch, dropped)
	}
	// Limits and broken invariants are refused, leaving the state alone.
	if err := r.Restore(bytes.NewReader(snap), int64(len(snap)-1)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("oversized: %v", err)
	}
	bad := slices.Clone(snap)
	bad[0] = 9
	if err := r.Restore(bytes.NewReader(bad), 1<<20); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad version: %v", err)
	}
	if r.Len() != 3 {
		t.Fatalf("a refused restore changed the state")
	}
}

func TestCheckFindsBrokenInvariants(t *testing.T) {
	ok := func() *Channel {
		return &Channel{Name: "c", Epoch: 5, Next: 21, List: []role.StreamletRef{
			{ID: 1, Host: "a", First: 1, End: 11, Closed: true, Expires: 10},
			{ID: 2, Host: "a", First: 11, End: 21, Closed: true, Expires: 10},
		}}
	}
	if e := ok().check(); e != "" {
		t.Fatalf("valid channel: %s", e)
	}
	for name, broken := range map[string]func(*Channel){
		"gap":           func(c *Channel) { c.List[1].First = 12 },
		"open not last": func(c *Channel) { c.List[0].Closed = false },
		"expiry order":  func(c *Channel) { c.List[1].Expires = 9 },
		"next":          func(c *Channel) { c.Next = 20 },
		"epoch 0":       func(c *Channel) { c.Epoch = 0 },
		"id 0":          func(c *Channel) { c.List[0].ID = 0 },
		"end before":    func(c *Channel) { c.List[1].End = 10 },
		"lost open":     func(c *Channel) { c.List[1].Closed = false; c.List[1].Lost = true; c.Next = 11 },
		"open no host":  func(c *Channel) { c.List[1].Closed = false; c.List[1].Host = ""; c.Next = 11 },
		"repeated id":   func(c *Channel) { c.List[1].ID = 1 },
		"zero first":    func(c *Channel) { c.List[0].First = 0 },
		"next zero":     func(c *Channel) { c.List = nil; c.Next = 0 },
	} {
		c := ok()
		broken(c)
		if c.check() == "" {
			t.Errorf("%s: not found", name)
		}
	}
}
