package engine

import (
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/host"
	"github.com/sluice-rtm/sluice/role"
)

func TestReaderStalled(t *testing.T) {
	const s = int64(time.Second)
	for _, tc := range []struct {
		now, at int64
		want    bool
	}{{10 * s, 9 * s, false}, {10 * s, 8 * s, true}, {10 * s, 7 * s, true}, {10 * s, 10 * s, false}} {
		if got := readerStalled(tc.now, tc.at, 2*time.Second); got != tc.want {
			t.Errorf("readerStalled(%d, %d) = %v", tc.now, tc.at, got)
		}
	}
}

func TestCopyStalled(t *testing.T) {
	const s = int64(time.Second)
	for _, tc := range []struct {
		name          string
		now, lastFeed int64
		end, next     uint64
		want          bool
	}{
		{"idle and complete", 10 * s, 1 * s, 100, 100, false},
		{"behind but fed recently", 10 * s, 9 * s, 90, 100, false},
		{"behind and unfed", 10 * s, 7 * s, 90, 100, true},
		{"ahead of a stale next", 10 * s, 1 * s, 110, 100, false},
	} {
		if got := copyStalled(tc.now, tc.lastFeed, tc.end, tc.next, 2*time.Second); got != tc.want {
			t.Errorf("%s: copyStalled = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCopyReopen(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, tc := range []struct {
		name          string
		now, brokenAt int64
		lost          bool
		reopen        bool
		wait          time.Duration
	}{
		{"healthy", 1000 * ms, 0, false, false, 0},
		{"broken, lost at the manager", 1000 * ms, 100 * ms, true, false, 0},
		{"just broken", 1000 * ms, 900 * ms, false, false, 150 * time.Millisecond},
		{"broken long enough", 1000 * ms, 750 * ms, false, true, 0},
	} {
		reopen, wait := copyReopen(tc.now, tc.brokenAt, tc.lost)
		if reopen != tc.reopen || wait != tc.wait {
			t.Errorf("%s: copyReopen = %v, %v; want %v, %v", tc.name, reopen, wait, tc.reopen, tc.wait)
		}
	}
}

func TestSendAway(t *testing.T) {
	const s = int64(time.Second)
	for _, tc := range []struct {
		now, since int64
		want       bool
	}{{10 * s, 0, false}, {10 * s, 7 * s, false}, {10 * s, 6 * s, true}, {10 * s, 1 * s, true}} {
		if got := sendAway(tc.now, tc.since, 2*time.Second); got != tc.want {
			t.Errorf("sendAway(%d, %d) = %v, want %v", tc.now, tc.since, got, tc.want)
		}
	}
}

// TestReadReplica: a reader node's copy reads from a reachable replica
// other than the one whose feed broke and other than itself (a replica
// listed here that this node does not hold: dialing itself is refused as a
// reflected handshake); a single copy reads from its host.
func TestReadReplica(t *testing.T) {
	ref := role.StreamletRef{ID: 7, Host: "a", Replicas: []string{"a", "b", "c"}}
	all := func(string) bool { return true }
	for i := 0; i < 50; i++ {
		r := ref
		r.ID = uint64(i)
		if got := readReplica(r, "a", "", all); got == "a" {
			t.Fatalf("streamlet %d: reader a reads from itself", i)
		}
		if got := readReplica(r, "a", "b", all); got != "c" {
			t.Fatalf("streamlet %d: reader a avoiding b reads from %s, want c", i, got)
		}
	}
	if got := readReplica(ref, "d", "", func(n string) bool { return n == "b" }); got != "b" {
		t.Fatalf("only b reachable: read from %s", got)
	}
	if got := readReplica(role.StreamletRef{ID: 1, Host: "b"}, "a", "", all); got != "b" {
		t.Fatalf("single copy on b: read from %s", got)
	}
}

// TestCheckCatchup: a catch-up cursor (a replay) that has not advanced for
// the stale period lets go of its streamlet, so that its next read looks
// the position up in the list again (nemesis seed 38 of ci-3n-r2: a replay
// on a node isolated while it made its copy of a closed streamlet waited
// on that copy, never fed, for good); one that moves, or waits for its own
// socket to drain, keeps it.
func TestCheckCatchup(t *testing.T) {
	const stale = 2 * time.Second
	l := &loop{srv: &Server{opts: Options{OutboundLimit: 1 << 20}}}
	stuck := &sub{c: &conn{l: l}, cur: cursor{pos: 5, s: &host.Streamlet{}}}
	moving := &sub{c: &conn{l: l}, cur: cursor{pos: 5, s: &host.Streamlet{}}}
	draining := &sub{c: &conn{l: l, watchArmed: true}, cur: cursor{pos: 5, s: &host.Streamlet{}}}
	lc := &loopChan{l: l, catchup: []*sub{stuck, moving, draining}}
	t0 := int64(time.Hour)
	if lc.checkCatchup(t0, stale) {
		t.Fatal("the first look lets go")
	}
	moving.cur.pos++
	if lc.checkCatchup(t0+int64(stale)-1, stale) || stuck.cur.s == nil {
		t.Fatal("let go before the stale period")
	}
	moving.cur.pos++
	if !lc.checkCatchup(t0+int64(stale), stale) {
		t.Fatal("a cursor stuck for the stale period keeps its streamlet")
	}
	if stuck.cur.s != nil || moving.cur.s == nil || draining.cur.s == nil {
		t.Fatalf("let go: stuck %v, moving %v, draining %v; want only the stuck one",
			stuck.cur.s == nil, moving.cur.s == nil, draining.cur.s == nil)
	}
}

func TestListedEnd(t *testing.T) {
	if got := listedEnd(role.StreamletRef{First: 5, End: 9, Closed: true}, 20); got != 9 {
		t.Errorf("closed: %d, want its end 9", got)
	}
	if got := listedEnd(role.StreamletRef{First: 5}, 20); got != 20 {
		t.Errorf("open: %d, want the channel's next 20", got)
	}
}
