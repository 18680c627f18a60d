package engine

import (
	"testing"
	"time"
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
