package bench

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestRelayDeliversEveryMessage: the raw byte relay baseline runs the 1:1
// scenario like a real system and delivers every message intact.
func TestRelayDeliversEveryMessage(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ServeRelay(ln) }()
	defer func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := &RelayDriver{Addr: ln.Addr().String()}
	r, err := Run(ctx, d, "pubsub", Config{Size: 1024, Count: 20_000})
	if err != nil {
		t.Fatal(err)
	}
	if r.Expected != 20_000 || r.Delivered != r.Expected || r.Lost() != 0 {
		t.Fatalf("expected %d, delivered %d, lost %d", r.Expected, r.Delivered, r.Lost())
	}
	// Payloads arrive intact: the handler sees the scenario's body.
	c, err := d.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan string, 1)
	if _, err := c.Subscribe(ctx, "x", StartLive, func(p []byte) { got <- string(p) }); err != nil {
		t.Fatal(err)
	}
	p, err := d.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Publish(ctx, "x", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "hello" {
			t.Fatalf("got %q", m)
		}
	case <-ctx.Done():
		t.Fatal("nothing relayed")
	}
	if err := p.Publish(ctx, "y", nil); err == nil {
		t.Fatal("a second channel on one relay publisher was accepted")
	}
}
