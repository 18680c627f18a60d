package bench

import (
	"context"
	"testing"
	"time"
)

// TestNoAckPublishers: with SluiceDriver.NoAck the fire-and-forget
// publishers use PublishNoAck; Flush must still order the end of the
// publishing phase after every message reached the server, so every
// expected message is delivered and counted.
func TestNoAckPublishers(t *testing.T) {
	d := startEngine(t)
	d.NoAck = true
	cases := []struct {
		name     string
		cfg      Config
		pub, exp int64
	}{
		{"pub", Config{Count: 3000, Size: 16}, 3000, 0},
		{"pubsub", Config{Count: 3000}, 3000, 3000},
		{"fanout", Config{Count: 1000, Subs: 3, Size: 1024}, 1000, 3000},
		{"latency", Config{Rate: 5000, Duration: 200 * time.Millisecond}, 1000, 1000},
		{"ack-async", Config{Count: 2000, Window: 100}, 2000, 0}, // stays acknowledged
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			r, err := Run(ctx, d, tc.name, tc.cfg)
			if err != nil {
				t.Fatalf("%s: %v (%+v)", tc.name, err, r)
			}
			if r.Published != tc.pub || r.Expected != tc.exp || r.Delivered != tc.exp {
				t.Errorf("published %d expected %d delivered %d, want %d/%d", r.Published, r.Expected, r.Delivered, tc.pub, tc.exp)
			}
		})
	}
}
