package membership

import (
	"fmt"
	"testing"
)

func TestTableSnapshotSortedAndFiltered(t *testing.T) {
	tab := newTable()
	tab.apply(EventJoin, "c", "127.0.0.1:3", []byte("c"), false, 0)
	tab.apply(EventJoin, "a", "127.0.0.1:1", []byte("a"), true, 0)
	tab.apply(EventJoin, "b", "127.0.0.1:2", nil, false, 0)
	tab.apply(EventLeave, "b", "127.0.0.1:2", nil, false, Dead)
	if got := names(tab.snapshot(true)); got != "a/alive,c/alive" {
		t.Fatalf("live: %s", got)
	}
	if got := names(tab.snapshot(false)); got != "a/alive,b/dead,c/alive" {
		t.Fatalf("all: %s", got)
	}
	if tab.liveCount() != 2 {
		t.Fatalf("liveCount %d", tab.liveCount())
	}
	m := tab.apply(EventJoin, "b", "127.0.0.1:9", []byte("b2"), false, 0)
	if m.State != Alive || m.Addr != "127.0.0.1:9" || string(m.Meta) != "b2" {
		t.Fatalf("rejoined b: %+v", m)
	}
	if tab.liveCount() != 3 || tab.departed != 0 {
		t.Fatalf("liveCount %d departed %d", tab.liveCount(), tab.departed)
	}
}

func TestTableApplyCopiesMeta(t *testing.T) {
	tab := newTable()
	meta := []byte("abc")
	m := tab.apply(EventJoin, "a", "x:1", meta, false, 0)
	meta[0] = 'X'
	m.Meta[1] = 'Y'
	if got := string(tab.snapshot(true)[0].Meta); got != "abc" {
		t.Fatalf("stored meta %q", got)
	}
}

func TestTableLeaveAnnouncementEitherOrder(t *testing.T) {
	tab := newTable()
	for _, n := range []string{"early", "late", "crashed", "updated"} {
		tab.apply(EventJoin, n, "x:1", nil, false, 0)
	}
	// Announcement before memberlist's departure notice.
	tab.markLeaving("early")
	if m := tab.apply(EventLeave, "early", "x:1", nil, false, Dead); m.State != Left {
		t.Fatalf("early: %v", m.State)
	}
	// Departure notice first, announcement afterwards.
	tab.apply(EventLeave, "late", "x:1", nil, false, Dead)
	tab.markLeaving("late")
	// No announcement: a crash.
	tab.apply(EventLeave, "crashed", "x:1", nil, false, Dead)
	// A meta update between announcement and departure keeps the announcement.
	tab.markLeaving("updated")
	tab.apply(EventUpdate, "updated", "x:1", []byte("m"), false, 0)
	tab.apply(EventLeave, "updated", "x:1", nil, false, Dead)
	if got := names(tab.snapshot(false)); got != "crashed/dead,early/left,late/left,updated/left" {
		t.Fatalf("got %s", got)
	}
	// Unknown names are ignored and not remembered.
	tab.markLeaving("stranger")
	if len(tab.entries) != 4 || len(tab.leaving) != 0 {
		t.Fatalf("entries %d leaving %d", len(tab.entries), len(tab.leaving))
	}
}

func TestTableRejoinCancelsLeaveAnnouncement(t *testing.T) {
	tab := newTable()
	tab.apply(EventJoin, "a", "x:1", nil, false, 0)
	tab.markLeaving("a")
	tab.apply(EventLeave, "a", "x:1", nil, false, Dead) // consumed: Left
	tab.apply(EventJoin, "a", "x:1", nil, false, 0)     // restarted
	if m := tab.apply(EventLeave, "a", "x:1", nil, false, Dead); m.State != Dead {
		t.Fatalf("crash after rejoin reported %v", m.State)
	}
	tab.apply(EventJoin, "b", "x:2", nil, false, 0)
	tab.markLeaving("b")
	tab.apply(EventLeave, "b", "x:2", nil, false, Dead)
	tab.apply(EventJoin, "b", "x:2", nil, false, 0)
	if len(tab.leaving) != 0 {
		t.Fatalf("stale announcements: %v", tab.leaving)
	}
}

func TestTableForgetsOldestDeparted(t *testing.T) {
	tab := newTable()
	tab.apply(EventJoin, "self", "x:0", nil, true, 0)
	for i := range maxDeparted + 10 {
		name := fmt.Sprintf("n%04d", i)
		tab.apply(EventJoin, name, "x:1", nil, false, 0)
		tab.apply(EventLeave, name, "x:1", nil, false, Dead)
	}
	all := tab.snapshot(false)
	if len(all) != maxDeparted+1 || tab.departed != maxDeparted {
		t.Fatalf("%d entries, %d departed; want %d departed plus self", len(all), tab.departed, maxDeparted)
	}
	// The ten oldest went; self (live) stayed.
	if all[0].Name != "n0010" || all[len(all)-1].Name != "self" {
		t.Fatalf("first %s last %s", all[0].Name, all[len(all)-1].Name)
	}
	// A departed member that rejoins is live again and not counted.
	tab.apply(EventJoin, "n0010", "x:1", nil, false, 0)
	if tab.departed != maxDeparted-1 || tab.liveCount() != 2 {
		t.Fatalf("departed %d live %d", tab.departed, tab.liveCount())
	}
}

func TestTableSnapshotMetaCopiesAreIndependent(t *testing.T) {
	tab := newTable()
	tab.apply(EventJoin, "a", "x:1", []byte("aaa"), false, 0)
	tab.apply(EventJoin, "b", "x:2", []byte("bbb"), false, 0)
	ms := tab.snapshot(true)
	ms[0].Meta = append(ms[0].Meta, "ZZZ"...) // must not spill into b's copy
	ms[0].Meta[0] = 'X'
	if string(ms[1].Meta) != "bbb" {
		t.Fatalf("b's copy changed to %q", ms[1].Meta)
	}
	if got := tab.snapshot(true); string(got[0].Meta) != "aaa" || string(got[1].Meta) != "bbb" {
		t.Fatalf("table changed: %q %q", got[0].Meta, got[1].Meta)
	}
}

func BenchmarkTableSnapshot(b *testing.B) {
	tab := newTable()
	for i := range 64 {
		tab.apply(EventJoin, fmt.Sprintf("node-%02d", i), "10.0.0.1:7946", make([]byte, 64), false, 0)
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(tab.snapshot(true)) != 64 {
			b.Fatal("short snapshot")
		}
	}
}
