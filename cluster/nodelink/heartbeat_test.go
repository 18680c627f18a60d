package nodelink

import (
	"testing"
	"time"
)

func TestLinkDead(t *testing.T) {
	const s = int64(time.Second)
	for _, tc := range []struct {
		now, last int64
		timeout   time.Duration
		dead      bool
	}{
		{10 * s, 10 * s, time.Second, false},
		{10 * s, 9 * s, time.Second, false}, // exactly the timeout: still alive
		{10 * s, 9*s - 1, time.Second, true},
		{10 * s, 5 * s, 2 * time.Second, true},
		{10 * s, 11 * s, time.Second, false}, // received after the tick was taken
	} {
		if got := linkDead(tc.now, tc.last, tc.timeout); got != tc.dead {
			t.Errorf("linkDead(%d, %d, %v) = %v, want %v", tc.now, tc.last, tc.timeout, got, tc.dead)
		}
	}
}
