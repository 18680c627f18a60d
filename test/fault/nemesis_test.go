package fault

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestDeadline: an acknowledgement's deadline is bound after it, or bound
// after the heal of a fault it falls in or that strikes before its
// deadline, through chains of such faults.
func TestDeadline(t *testing.T) {
	t0 := time.Unix(2000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ws := []Window{
		{Fault: Fault{Seq: 2}, From: at(40), Until: at(50)},
		{Fault: Fault{Seq: 1}, From: at(10), Until: at(20)},
		{Fault: Fault{Seq: 3}, From: at(55), Until: at(60)}, // strikes 5 s after #2's heal
	}
	d := Deadline(ws, 12*time.Second)
	for _, tc := range []struct{ ack, want int }{
		{0, 32},  // #1 strikes 10 s later, before the deadline: 20 + 12
		{-5, 7},  // before any fault and its deadline before #1
		{15, 32}, // during #1
		{25, 37}, // after #1, #2 strikes after its deadline
		{30, 72}, // #2 strikes before 42, #3 before 62: 60 + 12
		{61, 73},
	} {
		if got := d(at(tc.ack)); !got.Equal(at(tc.want)) {
			t.Errorf("ack at %d s: deadline %v, want %d s", tc.ack, got.Sub(t0), tc.want)
		}
	}
	if got := Deadline(nil, time.Second)(at(3)); !got.Equal(at(4)) {
		t.Errorf("no fault: %v", got.Sub(t0))
	}
}

func TestContext(t *testing.T) {
	t0 := time.Unix(2000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ws := []Window{
		{Fault: Fault{Seq: 1, Kind: Isolate}, Target: "c", From: at(5), Until: at(13)},
		{Fault: Fault{Seq: 2, Kind: KillLeader}, Target: "b", Note: "the Raft leader", From: at(20), Until: at(30)},
	}
	for _, tc := range []struct {
		at   time.Time
		want string
	}{
		{at(1), "at +1.0s, before any fault"},
		{at(6.25), "at +6.2s, during #1 isolate c (+5.0s..+13.0s)"},
		{at(16), "at +16.0s, 3.0s after #1 isolate c was healed"},
		{at(31), "at +31.0s, 1.0s after #2 kill-leader b (the Raft leader) was healed"},
		{time.Time{}, "unacknowledged"},
	} {
		if got := Context(ws, tc.at, t0); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// TestRaftRoles: the shapes of status JSON that name the Raft leader and
// voters, and today's status, which names neither.
func TestRaftRoles(t *testing.T) {
	names := []string{"a", "b", "c", "ab"}
	for _, tc := range []struct {
		name, json string
		leader     int
		voters     []int
		ok         bool
	}{
		{"today's status", `{"node":"a","members":[{"name":"a","state":"alive"},{"name":"b","state":"alive"}],"copies":{}}`, -1, nil, false},
		{"top level", `{"leader":"b","voters":["a","b","c"]}`, 1, []int{0, 1, 2}, true},
		{"nested, server ids", `{"node":"a","raft":{"leader":"c-7f3e","voters":[{"id":"a-11"},{"id":"c-7f3e"}]}}`, 2, []int{0, 2}, true},
		{"members with roles", `{"members":[{"name":"a","raft":"follower"},{"name":"ab","raft":"leader"},{"name":"b","raft":"nonvoter"}]}`,
			3, []int{0, 3}, true},
		{"members with flags", `{"members":[{"name":"b","voter":true,"leader":true},{"name":"c","voter":true}]}`, 1, []int{1, 2}, true},
		{"leader alone", `{"meta":{"leader_id":"a"}}`, 0, []int{0}, true},
		{"unknown names", `{"leader":"zz","voters":["q"]}`, -1, nil, false},
		{"not json", `cluster status: no answer`, -1, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader, voters, ok := RaftRoles([]byte(tc.json), names)
			if leader != tc.leader || !reflect.DeepEqual(voters, tc.voters) || ok != tc.ok {
				t.Errorf("got %d %v %v, want %d %v %v", leader, voters, ok, tc.leader, tc.voters, tc.ok)
			}
		})
	}
	if SubNode("replay@b/nem.3") != "b" || SubNode("sub@ab/x/y") != "ab" {
		t.Error("SubNode")
	}
}

// TestTally: the counts of the table and the verdict by replica
// count: a GAP lost over acknowledged messages fails N = 2 but not N = 1,
// unless a replay delivered what it announced lost (never exact); a
// stopped subscription, replay losses by node, double acknowledgements.
func TestTally(t *testing.T) {
	t0 := time.Unix(3000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var pubs []Publish
	for i := 1; i <= 4; i++ {
		pubs = append(pubs, Publish{Channel: "c", ID: MsgID{1, i}, Outcome: Acked, Pos: uint64(i), Sent: at(i - 1), Done: at(i)})
	}
	msg := func(i, s int) Event {
		return Event{Kind: Message, Pos: uint64(i), Payload: Payload("c", MsgID{1, i}, 20), At: at(s)}
	}
	lost := Event{Kind: Gap, From: 3, To: 4, Reason: "lost", At: at(6)}
	live := []Sub{
		{Name: "sub@a/c", Channel: "c", From: 1, Events: []Event{msg(1, 2), msg(2, 3), lost}},
		{Name: "sub@b/c", Channel: "c", From: 1, Events: []Event{msg(1, 2), msg(2, 3), msg(3, 4), msg(4, 5)}},
	}
	replayAll := []Sub{{Name: "replay@a/c", Channel: "c", Events: []Event{msg(1, 9), msg(2, 9), msg(3, 9), msg(4, 9)}}}
	replayLost := []Sub{{Name: "replay@a/c", Channel: "c", Events: []Event{msg(1, 9), msg(2, 9), lost}},
		{Name: "replay@b/c", Channel: "c", Events: []Event{msg(1, 9), msg(2, 9)}}}
	deadline := Deadline(nil, 10*time.Second)

	// A channel recreated (an epoch change) under publishing: fine for
	// N = 1 only.
	epoch := []Sub{{Name: "sub@a/c", Channel: "c", From: 1, Events: []Event{msg(1, 2), {Kind: Epoch, Pos: 2, At: at(3)}, msg(2, 3), msg(3, 4), msg(4, 5)}}}
	for _, n := range []int{1, 2} {
		fails := NewTally(n, pubs, epoch, replayAll, deadline, LinResult{}).Failures()
		if (len(fails) == 0) != (n == 1) || (n == 2 && !strings.Contains(fails[0], "1 epoch changes")) {
			t.Errorf("N = %d, an epoch change: failures %q", n, fails)
		}
	}
	// Really lost (no replay has 3 and 4): fine for N = 1 only.
	for _, n := range []int{1, 2} {
		tl := NewTally(n, pubs, live, replayLost[:1], deadline, LinResult{})
		if tl.AnnouncedMsgs != 2 || tl.Live.Announced != 2 || tl.FalseGaps != 0 || tl.Replay.Announced != 2 {
			t.Fatalf("N = %d: %+v", n, tl)
		}
		if fails := tl.Failures(); (len(fails) == 0) != (n == 1) {
			t.Errorf("N = %d: failures %q", n, fails)
		}
	}
	// A GAP over positions far apart (positions that count from a clock):
	// every acknowledged position in it counts.
	wide := []Publish{{Channel: "w", ID: MsgID{3, 1}, Outcome: Acked, Pos: 1 << 40, Done: at(1)},
		{Channel: "w", ID: MsgID{3, 2}, Outcome: Acked, Pos: 1<<40 + 1<<30, Done: at(2)}}
	wl := []Sub{{Name: "sub@a/w", Channel: "w", Events: []Event{{Kind: Gap, From: 1, To: 1 << 41, Reason: "lost", At: at(3)}}}}
	if tl := NewTally(2, wide, wl, nil, deadline, LinResult{}); tl.AnnouncedMsgs != 2 || tl.Live.Announced != 2 {
		t.Fatalf("wide gap: %+v", tl)
	}
	// Announced lost, yet the replay has them: a false GAP, for any N.
	tl := NewTally(1, pubs, live, replayAll, deadline, LinResult{})
	if tl.FalseGaps != 2 || len(tl.Failures()) != 1 || !strings.Contains(tl.Failures()[0], "that a replay delivered") {
		t.Fatalf("false gaps: %+v %q", tl, tl.Failures())
	}
	// A replay on b that stops: missing on b, stopped in no live
	// subscription; a double acknowledgement.
	double := append(append([]Publish(nil), pubs...), Publish{Channel: "c", ID: MsgID{2, 1}, Outcome: Acked, Pos: 4, Done: at(5)})
	tl = NewTally(2, double, live[1:], replayLost, deadline, LinResult{Illegal: []string{"c"}, Why: map[string]string{"c": "position 4 twice"}})
	if tl.ReplayMissingOn["b"] != 2 || tl.ReplayMissingOn["a"] != 2 || tl.Replay.Stopped != 1 || tl.ReplayStoppedOn["b"] != 1 ||
		len(tl.StoppedOn) != 0 || tl.Live.DoubleAcks != 1 {
		t.Fatalf("%+v", tl)
	}
	s := tl.String()
	for _, want := range []string{"acked 4", "(a: 2 acked, b: 2 acked); stopped with no gap: 1 (b: 1 channels)", "positions acknowledged twice 1"} {
		if !strings.Contains(s, want) {
			t.Errorf("String lacks %q:\n%s", want, s)
		}
	}
	fails := strings.Join(tl.Failures(), "; ")
	for _, want := range []string{"1 positions acknowledged for two messages", "2 acknowledged messages announced lost in replays",
		"2 acknowledged messages missing in replays", "1 channels not linearizable (porcupine)"} {
		if !strings.Contains(fails, want) {
			t.Errorf("failures lack %q: %s", want, fails)
		}
	}
	details := strings.Join(tl.Details([]Window{{Fault: Fault{Seq: 1, Kind: Pause}, Target: "b", From: at(3), Until: at(8)}}, t0, 40), "\n")
	for _, want := range []string{"replay stopped: replay@b/c: stopped after position 2", "acknowledged at +3.0s, during #1 pause b",
		"not linearizable: c: position 4 twice"} {
		if !strings.Contains(details, want) {
			t.Errorf("details lack %q:\n%s", want, details)
		}
	}
}
