package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// checkUnread fails when l.unread is not exactly the views of l.chans
// that no subscription on l reads.
func checkUnread(t *testing.T, l *loop) {
	t.Helper()
	n := 0
	for name, lc := range l.chans {
		_, in := l.unread[lc]
		if in != (lc.nsubs == 0) {
			t.Errorf("view %q with %d subscriptions: in unread %v", name, lc.nsubs, in)
		}
		if in {
			n++
		}
	}
	if n != len(l.unread) {
		t.Errorf("unread holds %d views, %d of them not in chans", len(l.unread), len(l.unread)-n)
	}
}

// TestSweepForgetsViewsOnlyWhenUnread: the loop's sweep forgets an idle
// channel view that no subscription reads, keeps one that is read however
// idle, and forgets that one too once its last subscriber left; it looks
// only at the unread views (loop.unread).
func TestSweepForgetsViewsOnlyWhenUnread(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := startTest(t, func(o *Options) { o.now = clock; o.Loops = 1 })
	sub, _ := helloRaw(t, s.Addr())
	sub.subscribe(1, "read", wire.StartLive, 0)
	pub, _ := helloRaw(t, s.Addr())
	pub.publish("read", []byte("r"))
	pub.publish("idle", []byte("i"))
	views := func() (names []string) {
		onLoops(t, s, func(l *loop) {
			checkUnread(t, l)
			for name := range l.chans {
				names = append(names, name)
			}
		})
		return names
	}
	if v := views(); len(v) != 2 {
		t.Fatalf("views %v, want read and idle", v)
	}
	advance(2 * time.Second)
	onLoops(t, s, func(l *loop) { l.sweep() })
	if v := views(); len(v) != 1 || v[0] != "read" {
		t.Fatalf("views after an idle sweep %v, want only the one read", v)
	}
	sub.write(wire.AppendUnsubscribe(nil, 9, 1))
	for {
		if h, _ := sub.next(); h.Type == wire.TypeUnsubscribed {
			break
		}
	}
	if v := views(); len(v) != 1 {
		t.Fatalf("views after the unsubscribe %v, want read until the sweep", v)
	}
	advance(2 * time.Second)
	onLoops(t, s, func(l *loop) { l.sweep() })
	if v := views(); len(v) != 0 {
		t.Fatalf("views after the last subscriber left and a sweep %v, want none", v)
	}
	// A new subscription of a forgotten channel makes a view that is read.
	sub.subscribe(2, "read", wire.StartLive, 0)
	if v := views(); len(v) != 1 {
		t.Fatalf("views after a new subscription %v", v)
	}
}
