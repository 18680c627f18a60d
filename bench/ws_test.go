package bench

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client/wsdial"
	"github.com/sluice-rtm/sluice/engine"
)

// TestScenariosOverWebSocket: the same SDK, scenarios and accounting run
// through the WebSocket gateway (the driver wscompare measures).
func TestScenariosOverWebSocket(t *testing.T) {
	opts := engine.DefaultOptions()
	opts.Listen, opts.WSListen = "127.0.0.1:0", "127.0.0.1:0"
	opts.Logger = slog.New(slog.DiscardHandler)
	srv, err := engine.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	d := &SluiceDriver{Addr: srv.WSURL(), Dial: wsdial.Dialer(wsdial.Options{})}
	for _, tc := range []struct {
		name string
		cfg  Config
		exp  int64
	}{
		{"pubsub", Config{Count: 3000, Size: 128}, 3000},
		{"fanout", Config{Count: 500, Subs: 10, Size: 128}, 5000},
		{"latency", Config{Rate: 5000, Duration: 200 * time.Millisecond, Subs: 2, Size: 128}, 2000},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		r, err := Run(ctx, d, tc.name, tc.cfg)
		cancel()
		if err != nil {
			t.Fatalf("%s over WebSocket: %v", tc.name, err)
		}
		if r.Expected != tc.exp || r.Delivered != tc.exp || r.Dropped != 0 {
			t.Fatalf("%s over WebSocket: expected/delivered/dropped %d/%d/%d, want %d", tc.name, r.Expected, r.Delivered, r.Dropped, tc.exp)
		}
	}
	if m := srv.Metrics(context.Background()); m.MessagesIn == 0 {
		t.Fatal("nothing published through the gateway")
	}
}
