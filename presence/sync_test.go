package presence

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// cluster is registries that push to each other through pump, without
// goroutines or sockets.
type cluster map[string]*Registry

func newCluster(t *testing.T, lim Limits, names ...string) cluster {
	cl := cluster{}
	for _, n := range names {
		cl[n], _ = newTest(n, lim)
	}
	cl.members(names...)
	return cl
}

// members tells every registry the live members.
func (cl cluster) members(alive ...string) {
	for _, n := range alive {
		if r := cl[n]; r != nil {
			r.Peers(alive)
		}
	}
}

// pushOnce makes from's next push to to, if one is due, and reports
// whether it made one.
func (cl cluster) pushOnce(t *testing.T, from, to string) bool {
	t.Helper()
	a, b := cl[from], cl[to]
	body := a.NextPush(to)
	if body == nil {
		return false
	}
	res, err := b.Serve(from, body)
	if err != nil {
		a.Done(to, 0, 0, err)
		return true
	}
	st, inc, err := wire.DecodeSyncResult(res)
	if err != nil {
		t.Fatal(err)
	}
	a.Done(to, st, inc, nil)
	return true
}

// pump pushes until no push is due anywhere.
func (cl cluster) pump(t *testing.T) {
	t.Helper()
	for range 10000 {
		any := false
		for from := range cl {
			for to := range cl {
				if from != to && cl.pushOnce(t, from, to) {
					any = true
				}
			}
		}
		if !any {
			return
		}
	}
	t.Fatal("pushes never ended")
}

// TestPushesMakeTheWholePicture: members and counts of every node reach
// every other node; events of remote members go to local watchers; the
// member's node is the node it is connected to.
func TestPushesMakeTheWholePicture(t *testing.T) {
	cl := newCluster(t, testLimits, "a", "b", "c")
	cl["c"].Watch("room", 0, 1, 1)
	_ = cl["a"].Join("room", 1, "alice", []byte(`{"n":1}`))
	cl["a"].Count("room", 1, 1)
	_ = cl["b"].Join("room", 7, "bob", nil)
	cl["b"].Count("room", 2, 0)
	cl.pump(t)
	for _, n := range []string{"a", "b", "c"} {
		o, ms, partial := query(cl[n], "room")
		if o != (wire.Occupancy{Subscribers: 3, Publishers: 1, Members: 2}) || partial ||
			!slices.Equal(ms, []string{"a/1/alice", "b/7/bob"}) {
			t.Fatalf("%s sees %+v %v partial=%v", n, o, ms, partial)
		}
	}
	if st := cl["c"].Stats(); st.Channels != 1 || st.Parts != 2 || st.ChannelBytes != ChannelCost+2*PartCost {
		t.Fatalf("c's channel records: %+v", st)
	}
	_, ms, _ := cl["c"].Query("room", false, nil)
	for _, m := range ms {
		if m.ClientID == "alice" && string(m.Info) != `{"n":1}` {
			t.Fatalf("alice's info on c: %q", m.Info)
		}
	}
	got := describe(cl["c"].Take(0, nil))
	slices.Sort(got)
	if !slices.Equal(got, []string{"room join a/1/alice", "room join b/7/bob"}) {
		t.Fatalf("c's watcher got %v", got)
	}
	cl["a"].Leave("room", 1, "alice")
	cl["a"].Count("room", -1, -1)
	cl.pump(t)
	expectDeliveries(t, cl["c"], 0, "room leave a/1/alice")
	if o, ms, _ := query(cl["b"], "room"); o != (wire.Occupancy{Subscribers: 2, Members: 1}) || !slices.Equal(ms, []string{"b/7/bob"}) {
		t.Fatalf("b after alice left: %+v %v", o, ms)
	}
}

// TestDeadNodeLeavesEverywhere: when the membership drops a node, every
// other node forgets its members (leave events) and counts at once.
func TestDeadNodeLeavesEverywhere(t *testing.T) {
	cl := newCluster(t, testLimits, "a", "b", "c")
	for i := range 3 {
		_ = cl["b"].Join("room", uint64(i), fmt.Sprint("u", i), nil)
	}
	cl["b"].Count("room", 3, 0)
	cl["a"].Count("room", 1, 0)
	cl.pump(t)
	cl["a"].Watch("room", 1, 1, 0)
	delete(cl, "b")
	cl.members("a", "c")
	got := describe(cl["a"].Take(1, nil))
	slices.Sort(got)
	if !slices.Equal(got, []string{"room leave b/0/u0", "room leave b/1/u1", "room leave b/2/u2"}) {
		t.Fatalf("a's watcher got %v", got)
	}
	for _, n := range []string{"a", "c"} {
		if o, ms, _ := query(cl[n], "room"); o != (wire.Occupancy{Subscribers: 1}) || len(ms) != 0 {
			t.Fatalf("%s after b died: %+v %v", n, o, ms)
		}
	}
	if st := cl["c"].Stats(); st.Parts != 1 || st.Members != 0 || st.Bytes != 0 { // a's count of room is left
		t.Fatalf("c keeps %+v after b died", st)
	}
	if _, err := cl["a"].Serve("b", wire.AppendPresenceSync(nil, wire.PresenceSync{Incarnation: 1, Seq: 1, Flags: wire.SyncBegin}, nil)); !errors.Is(err, ErrNotMember) {
		t.Fatalf("a push from the dead node: %v", err)
	}
}

// TestRestartedReceiverGetsASnapshot: a receiver that lost its state
// (restarted) answers the next change RESYNC and gets a whole snapshot;
// a repeated push is ignored.
func TestRestartedReceiverGetsASnapshot(t *testing.T) {
	cl := newCluster(t, testLimits, "a", "b")
	_ = cl["a"].Join("x", 1, "one", nil)
	_ = cl["a"].Join("y", 2, "two", nil)
	cl.pump(t)
	cl["b"], _ = newTest("b", testLimits) // b restarted
	cl["b"].Peers([]string{"a", "b"})
	_ = cl["a"].Join("x", 3, "three", nil)
	body := cl["a"].NextPush("b")
	res, err := cl["b"].Serve("a", body)
	if st, _, _ := wire.DecodeSyncResult(res); err != nil || st != wire.SyncResync {
		t.Fatalf("a's delta to the restarted b: %v %v", st, err)
	}
	cl["a"].Done("b", wire.SyncResync, 0, nil)
	// b also wants to send a snapshot of its own (empty): drop it here.
	cl.pump(t)
	if _, ms, _ := query(cl["b"], "x"); !slices.Equal(ms, []string{"a/1/one", "a/3/three"}) {
		t.Fatalf("b's x after the snapshot: %v", ms)
	}
	if _, ms, _ := query(cl["b"], "y"); !slices.Equal(ms, []string{"a/2/two"}) {
		t.Fatalf("b's y after the snapshot: %v", ms)
	}
	// A repeat of the last push is answered APPLIED and changes nothing.
	_ = cl["a"].Join("x", 4, "four", nil)
	body = cl["a"].NextPush("b")
	for range 2 {
		res, err := cl["b"].Serve("a", body)
		if st, _, _ := wire.DecodeSyncResult(res); err != nil || st != wire.SyncApplied {
			t.Fatalf("push and repeat: %v %v", st, err)
		}
	}
	cl["a"].Done("b", wire.SyncApplied, cl["b"].inc, nil)
	if o, _ := cl["b"].Occupancy("x"); o.Members != 3 {
		t.Fatalf("b counts %d members of x", o.Members)
	}
	if st := cl["b"].Stats().Sync; st.Repeats != 1 || st.Resyncs != 1 {
		t.Fatalf("b's sync stats %+v", st)
	}
}

// TestRestartedSenderReplacesItsPicture: a node that restarts (a new
// incarnation) sends a snapshot that replaces what the others held of it:
// members it no longer has leave, those it still has raise no event.
func TestRestartedSenderReplacesItsPicture(t *testing.T) {
	cl := newCluster(t, testLimits, "a", "b")
	_ = cl["a"].Join("room", 1, "old", nil)
	_ = cl["a"].Join("room", 2, "kept", nil)
	cl["a"].Count("room", 2, 0)
	cl.pump(t)
	cl["b"].Watch("room", 0, 1, 0)
	cl["a"], _ = newTest("a", testLimits)
	cl["a"].Peers([]string{"a", "b"})
	_ = cl["a"].Join("room", 2, "kept", nil)
	_ = cl["a"].Join("room", 3, "new", nil)
	cl["a"].Count("room", 2, 0)
	cl.pump(t)
	expectDeliveries(t, cl["b"], 0, "room join a/3/new", "room leave a/1/old")
	if o, ms, _ := query(cl["b"], "room"); o.Members != 2 || o.Subscribers != 2 || !slices.Equal(ms, []string{"a/2/kept", "a/3/new"}) {
		t.Fatalf("b sees %+v %v", o, ms)
	}
}

// TestLostPushIsSentAgain: a push that got no answer is sent again with
// the same number, and what changed meanwhile follows in the next one.
func TestLostPushIsSentAgain(t *testing.T) {
	cl := newCluster(t, testLimits, "a", "b")
	cl.pump(t)
	_ = cl["a"].Join("c", 1, "x", nil)
	first := cl["a"].NextPush("b")
	cl["a"].Done("b", 0, 0, errors.New("timeout"))
	_ = cl["a"].Join("c", 2, "y", nil)
	if again := cl["a"].NextPush("b"); string(again) != string(first) {
		t.Fatal("the push after a failure is not the same push")
	}
	cl["a"].Done("b", 0, 0, errors.New("timeout"))
	cl.pump(t)
	if _, ms, _ := query(cl["b"], "c"); !slices.Equal(ms, []string{"a/1/x", "a/2/y"}) {
		t.Fatalf("b sees %v", ms)
	}
	if st := cl["a"].Stats().Sync; st.Failures != 2 {
		t.Fatalf("a's sync stats %+v", st)
	}
}

// TestLargeSnapshotSpansPushes: a snapshot over maxPush bytes, including
// one channel whose members alone exceed it, goes in several pushes, and
// members that leave or join while it is sent end up right.
func TestLargeSnapshotSpansPushes(t *testing.T) {
	lim := Limits{MaxMembers: 10000, MaxBytes: 1 << 30, EventsMax: 10}
	cl := newCluster(t, lim, "a", "b")
	info := []byte(strings.Repeat("i", 1000))
	for i := range 1500 { // about 1.5 MB in one channel
		_ = cl["a"].Join("big", uint64(i), fmt.Sprint("m", i), info)
	}
	for i := range 50 {
		_ = cl["a"].Join(fmt.Sprint("small.", i), 1, "s", nil)
	}
	pushes := 0
	for cl.pushOnce(t, "a", "b") {
		pushes++
		if pushes == 2 {
			cl["a"].Leave("big", 0, "m0")                 // maybe sent already: leaves by a delta
			cl["a"].Leave("big", 1499, "m1499")           // not yet sent: never appears
			_ = cl["a"].Join("big", 5000, "late", nil)    // after the snapshot started: a delta
			_ = cl["a"].Join("small.new", 1, "late", nil) // a channel the snapshot did not list
		}
	}
	if pushes < 4 {
		t.Fatalf("%d pushes for a 1.5 MB snapshot", pushes)
	}
	o, ms, partial := cl["b"].Query("big", false, nil)
	if o.Members != 1499 || len(ms) != 1499 || partial {
		t.Fatalf("b sees %d members of big (%d listed, partial %v)", o.Members, len(ms), partial)
	}
	for _, m := range ms {
		if m.ClientID == "m0" || m.ClientID == "m1499" {
			t.Fatalf("b lists %s, who left", m.ClientID)
		}
	}
	if o, _ := cl["b"].Occupancy("small.new"); o.Members != 1 {
		t.Fatalf("small.new on b: %+v", o)
	}
	if st := cl["b"].Stats(); st.Channels != 52 {
		t.Fatalf("b holds %d channels", st.Channels)
	}
}

// TestOverflowFallsBackToSnapshot: changes waiting for a peer that does
// not answer are bounded (maxOps): past it they are dropped and the peer
// gets a snapshot once it answers.
func TestOverflowFallsBackToSnapshot(t *testing.T) {
	cl := newCluster(t, Limits{MaxMembers: 1 << 20, MaxBytes: 1 << 30, EventsMax: 10}, "a", "b")
	cl.pump(t)
	info := []byte(strings.Repeat("i", 4000))
	for i := range maxOps/4000 + 10 {
		_ = cl["a"].Join("c", uint64(i), "m", info)
		if i%2 == 1 {
			cl["a"].Leave("c", uint64(i), "m")
		}
	}
	if st := cl["a"].Stats().Sync; st.Overflows != 1 {
		t.Fatalf("overflows %d", st.Overflows)
	}
	cl.pump(t)
	o, ms, _ := cl["b"].Query("c", false, nil)
	if want := (maxOps/4000 + 10 + 1) / 2; int(o.Members) != want || len(ms) != want {
		t.Fatalf("b sees %d members (%d listed), want %d", o.Members, len(ms), want)
	}
}

// TestRemoteLimitsKeepCountsExact: remote members past a limit are not
// stored; queries say partial while the counts stay exact, and the
// dropped ones leaving brings the picture back to complete.
func TestRemoteLimitsKeepCountsExact(t *testing.T) {
	cl := cluster{}
	cl["a"], _ = newTest("a", Limits{MaxMembers: 100, MaxBytes: 1 << 20, EventsMax: 10})
	cl["b"], _ = newTest("b", Limits{MaxMembers: 3, MaxBytes: 1 << 20, EventsMax: 10})
	cl.members("a", "b")
	for i := range 5 {
		_ = cl["a"].Join("c", uint64(i), "m", nil)
		cl.pump(t) // in order: 0, 1, 2 stored; 3 and 4 dropped
	}
	o, ms, partial := cl["b"].Query("c", false, nil)
	if o.Members != 5 || len(ms) != 3 || !partial {
		t.Fatalf("b: %+v, %d listed, partial %v", o, len(ms), partial)
	}
	if st := cl["b"].Stats(); st.Dropped != 2 || st.Members != 3 {
		t.Fatalf("b's stats %+v", st)
	}
	cl["a"].Leave("c", 3, "m")
	cl["a"].Leave("c", 4, "m")
	cl.pump(t)
	if o, ms, partial := query(cl["b"], "c"); o.Members != 3 || !slices.Equal(ms, []string{"a/0/m", "a/1/m", "a/2/m"}) || partial {
		t.Fatalf("b after the dropped two left: %+v %v partial %v", o, ms, partial)
	}
	cl["a"].Leave("c", 0, "m")
	_ = cl["a"].Join("c", 5, "m", nil)
	cl.pump(t)
	if o, ms, partial := query(cl["b"], "c"); o.Members != 3 || !slices.Equal(ms, []string{"a/1/m", "a/2/m", "a/5/m"}) || partial {
		t.Fatalf("b after a leave and a join: %+v %v partial %v", o, ms, partial)
	}
}
