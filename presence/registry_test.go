package presence

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

var testLimits = Limits{MaxMembers: 1000, MaxBytes: 1 << 20, EventsMax: 100}

// sinkLog records the wakes of a registry's sinks.
type sinkLog struct{ wakes []int }

func newTest(self string, lim Limits) (*Registry, *sinkLog) {
	log := &sinkLog{}
	return New(self, 2, lim, func(s int) { log.wakes = append(log.wakes, s) }), log
}

// names returns "node/conn/id" of members, sorted.
func names(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%s/%d/%s", m.Node, m.Conn, m.ClientID))
	}
	slices.Sort(out)
	return out
}

func query(r *Registry, ch string) (wire.Occupancy, []string, bool) {
	o, ms, partial := r.Query(ch, false, nil)
	return o, names(ms), partial
}

// describe renders deliveries as "join a/1/x", "leave ...", "occ s/p/m[ paused]".
func describe(ds []Delivery) []string {
	var out []string
	for _, d := range ds {
		switch d.Kind {
		case Join, Leave:
			k := "join"
			if d.Kind == Leave {
				k = "leave"
			}
			out = append(out, fmt.Sprintf("%s %s %s/%d/%s", d.Channel, k, d.Member.Node, d.Member.Conn, d.Member.ClientID))
		case Occupancy:
			p := ""
			if d.Paused {
				p = " paused"
			}
			out = append(out, fmt.Sprintf("%s occ %d/%d/%d%s", d.Channel, d.Occ.Subscribers, d.Occ.Publishers, d.Occ.Members, p))
		}
	}
	return out
}

func expectDeliveries(t *testing.T, r *Registry, sink int, want ...string) {
	t.Helper()
	got := describe(r.Take(sink, nil))
	if !slices.Equal(got, want) {
		t.Fatalf("sink %d got\n  %s\nwant\n  %s", sink, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestJoinCountsOncePerConnection: two presence subscriptions of one
// (client id, connection) make one member, which leaves at the second
// Leave; a second connection of the same client id is a member of its own.
func TestJoinCountsOncePerConnection(t *testing.T) {
	r, _ := newTest("a", testLimits)
	for _, j := range []struct {
		conn uint64
		id   string
	}{{1, "alice"}, {1, "alice"}, {2, "alice"}, {3, ""}} {
		if err := r.Join("room", j.conn, j.id, []byte("i-"+j.id)); err != nil {
			t.Fatal(err)
		}
	}
	o, ms, partial := query(r, "room")
	if o.Members != 3 || partial || !slices.Equal(ms, []string{"a/1/alice", "a/2/alice", "a/3/"}) {
		t.Fatalf("after joins: %+v %v partial=%v", o, ms, partial)
	}
	r.Leave("room", 1, "alice")
	if o, ms, _ := query(r, "room"); o.Members != 3 || len(ms) != 3 {
		t.Fatalf("after one of two leaves of conn 1: %+v %v", o, ms)
	}
	r.Leave("room", 1, "alice")
	r.Leave("room", 9, "nobody") // not a member: nothing
	if o, ms, _ := query(r, "room"); o.Members != 2 || !slices.Equal(ms, []string{"a/2/alice", "a/3/"}) {
		t.Fatalf("after both leaves of conn 1: %+v %v", o, ms)
	}
	r.Leave("room", 2, "alice")
	r.Leave("room", 3, "")
	if st := r.Stats(); st.Channels != 0 || st.Members != 0 || st.Bytes != 0 {
		t.Fatalf("empty registry keeps %+v", st)
	}
}

// TestCountsAndOccupancy: Count adds subscriptions and publishers; the
// channel goes when every count is back to 0.
func TestCountsAndOccupancy(t *testing.T) {
	r, _ := newTest("a", testLimits)
	r.Count("c", 3, 0)
	r.Count("c", 0, 2)
	r.Count("c", -1, 0)
	if err := r.Join("c", 1, "x", nil); err != nil {
		t.Fatal(err)
	}
	if o, paused := r.Occupancy("c"); o != (wire.Occupancy{Subscribers: 2, Publishers: 2, Members: 1}) || paused {
		t.Fatalf("occupancy %+v paused=%v", o, paused)
	}
	if o, ms, _ := r.Query("c", true, nil); o.Subscribers != 2 || len(ms) != 0 {
		t.Fatalf("counts only: %+v %v", o, ms)
	}
	r.Count("c", -2, -2)
	r.Leave("c", 1, "x")
	if o, _ := r.Occupancy("c"); o != (wire.Occupancy{}) || r.Stats().Channels != 0 {
		t.Fatalf("after everything left: %+v, %d channels", o, r.Stats().Channels)
	}
}

// TestLimitsRefuseLocalJoins: a channel at MaxMembers refuses the next
// member (ErrChannelFull), a node at MaxBytes the next entry
// (ErrNodeFull); a refused join leaves nothing behind and is counted.
func TestLimitsRefuseLocalJoins(t *testing.T) {
	r, _ := newTest("a", Limits{MaxMembers: 2, MaxBytes: 3 * EntryCost("x", nil), EventsMax: 10})
	for i := range 2 {
		if err := r.Join("c", uint64(i), "x", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Join("c", 9, "x", nil); !errors.Is(err, ErrChannelFull) {
		t.Fatalf("third member of c: %v", err)
	}
	if err := r.Join("c", 0, "x", nil); err != nil { // an existing member joins again: fine
		t.Fatal(err)
	}
	if err := r.Join("d", 1, "x", nil); err != nil {
		t.Fatal(err)
	}
	if err := r.Join("e", 1, "x", nil); !errors.Is(err, ErrNodeFull) {
		t.Fatalf("fourth entry on the node: %v", err)
	}
	st := r.Stats()
	if st.Refused != 2 || st.Members != 3 || st.Bytes != 3*EntryCost("x", nil) || st.Channels != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestEventsInOrderToWatchingSinks: joins and leaves reach the sinks that
// watch the channel's events, in order, with one wake per sink until it
// takes them; a sink that watches only occupancy gets none of them, and
// an unwatched channel queues nothing.
func TestEventsInOrderToWatchingSinks(t *testing.T) {
	r, log := newTest("a", testLimits)
	_ = r.Join("quiet", 1, "x", nil)
	r.Watch("c", 0, 1, 0)
	r.Watch("c", 1, 0, 1)
	_ = r.Join("c", 1, "x", nil)
	_ = r.Join("c", 2, "y", []byte("info"))
	r.Leave("c", 1, "x")
	if !slices.Equal(log.wakes, []int{0}) {
		t.Fatalf("wakes %v, want [0]", log.wakes)
	}
	expectDeliveries(t, r, 0, "c join a/1/x", "c join a/2/y", "c leave a/1/x")
	expectDeliveries(t, r, 1)
	_ = r.Join("c", 3, "z", nil)
	if !slices.Equal(log.wakes, []int{0, 0}) {
		t.Fatalf("wakes %v after Take and a change", log.wakes)
	}
	r.Watch("c", 0, -1, 0)
	_ = r.Join("c", 4, "w", nil)
	expectDeliveries(t, r, 0, "c join a/3/z")
}

// TestTickCoalescesOccupancy: occupancy watchers get one delivery per
// Tick with the counts of its time, and none when nothing changed.
func TestTickCoalescesOccupancy(t *testing.T) {
	r, _ := newTest("a", testLimits)
	r.Watch("c", 1, 0, 1)
	for range 5 {
		r.Count("c", 1, 0)
	}
	_ = r.Join("c", 1, "x", nil)
	expectDeliveries(t, r, 1) // nothing before the Tick
	r.Tick()
	expectDeliveries(t, r, 1, "c occ 5/0/1")
	r.Tick()
	expectDeliveries(t, r, 1)
	r.Count("c", 0, 1)
	r.Tick()
	expectDeliveries(t, r, 1, "c occ 5/1/1")
}

// TestPauseAndResumeEvents: past EventsMax members the channel sends its
// event watchers an occupancy with Paused instead of the join, then
// occupancy on Ticks, and no join or leave; at ResumeAt members an
// occupancy without Paused, and events again.
func TestPauseAndResumeEvents(t *testing.T) {
	lim := testLimits
	lim.EventsMax = 4 // resumes at 3
	r, _ := newTest("a", lim)
	r.Watch("c", 0, 1, 0)
	for i := range 4 {
		_ = r.Join("c", uint64(i), "m", nil)
	}
	expectDeliveries(t, r, 0, "c join a/0/m", "c join a/1/m", "c join a/2/m", "c join a/3/m")
	_ = r.Join("c", 4, "m", nil)
	_ = r.Join("c", 5, "m", nil)
	expectDeliveries(t, r, 0, "c occ 0/0/5 paused")
	if _, paused := r.Occupancy("c"); !paused {
		t.Fatal("Occupancy does not say paused")
	}
	r.Tick()
	expectDeliveries(t, r, 0, "c occ 0/0/6 paused")
	r.Leave("c", 5, "m")
	r.Leave("c", 4, "m")
	r.Tick()
	expectDeliveries(t, r, 0, "c occ 0/0/4 paused")
	r.Leave("c", 3, "m")
	expectDeliveries(t, r, 0, "c occ 0/0/3")
	r.Leave("c", 2, "m")
	expectDeliveries(t, r, 0, "c leave a/2/m")
	if ResumeAt(4) != 3 || ResumeAt(100) != 75 || ResumeAt(1) != 1 {
		t.Fatalf("ResumeAt: %d %d %d", ResumeAt(4), ResumeAt(100), ResumeAt(1))
	}
}
