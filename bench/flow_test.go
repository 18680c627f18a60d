package bench

import (
	"context"
	"testing"
	"time"
)

// TestFlowMonitorLiveAllowance: in the live regime the allowance lets the
// publishers run at most Live messages ahead of the subscriber furthest
// behind on one channel, and of the average subscriber over many channels
// (in publisher messages: Live divided by each subscriber's share); wait
// blocks at the allowance until ctx ends.
func TestFlowMonitorLiveAllowance(t *testing.T) {
	ks := []*counter{newCounter(0, nil), newCounter(0, nil)}
	m := newFlowMonitor(Config{Channels: 1, Live: 100, Size: 10}, ks, 2000, 1000)
	m.published.Store(500)
	ks[0].n.Store(480)
	ks[1].n.Store(450) // furthest behind: 50 to go
	m.sample(time.Millisecond)
	if got := m.allowed.Load(); got != 550 {
		t.Fatalf("one channel: allowed %d, want 550", got)
	}
	// 10 channels over 2 subscribers: each gets half of what is published.
	m = newFlowMonitor(Config{Channels: 10, Live: 100, Size: 10}, ks, 1000, 1000)
	m.published.Store(500)
	ks[0].n.Store(240)
	ks[1].n.Store(220) // average 230 of 250: 20 to go, room 80 per subscriber
	m.sample(time.Millisecond)
	if got := m.allowed.Load(); got != 660 {
		t.Fatalf("many channels: allowed %d, want 660", got)
	}
	m.published.Store(660)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if m.wait(ctx) {
		t.Fatal("wait returned true at the allowance")
	}
	m.allowed.Store(661)
	if !m.wait(context.Background()) {
		t.Fatal("wait under the allowance")
	}
}

// TestFlowMonitorOverload: the overload time adds up the samples whose
// backlog per subscriber (payload bytes) is past OverMark, and the largest
// backlog is kept; overload runs have no allowance to wait for.
func TestFlowMonitorOverload(t *testing.T) {
	ks := []*counter{newCounter(0, nil)}
	m := newFlowMonitor(Config{Channels: 1, OverMark: 1000, Size: 100}, ks, 100, 100)
	m.published.Store(20)
	ks[0].n.Store(5) // 15 behind: 1500 bytes
	m.sample(3 * time.Millisecond)
	ks[0].n.Store(15) // 5 behind: 500 bytes
	m.sample(4 * time.Millisecond)
	if m.overload != 3*time.Millisecond || m.maxBacklog != 1500 {
		t.Fatalf("overload %v max backlog %v", m.overload, m.maxBacklog)
	}
	m.published.Store(1 << 40)
	if !m.wait(context.Background()) {
		t.Fatal("overload: wait blocked")
	}
}
