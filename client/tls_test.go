package client

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/internal/testcert"
	"github.com/sluice-rtm/sluice/wire"
)

func newTLSFake(t *testing.T) (*fakeServer, *testcert.Set) {
	t.Helper()
	set, err := testcert.New("sluice.test")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return newFakeServerOn(t, tls.NewListener(ln, set.ServerConfig())), set
}

func TestTLSConnectionCarriesTokenAndTraffic(t *testing.T) {
	f, set := newTLSFake(t)
	for _, name := range []string{"sluice.test", ""} { // "" = the host dialled, 127.0.0.1
		cfg := set.ClientConfig()
		cfg.ServerName = name
		c, fc := connect(t, f, testWelcome(), WithTLS(cfg), WithToken([]byte("s3cret")))
		if _, ok := fc.nc.(*tls.Conn); !ok {
			t.Fatalf("server side is a %T", fc.nc)
		}
		if string(fc.hello.Token) != "s3cret" {
			t.Fatalf("token %q", fc.hello.Token)
		}
		done := make(chan error, 1)
		go func() {
			pos, err := c.Publish(ctxT(t), "ch", []byte("over tls"))
			if err == nil && pos != 42 {
				t.Errorf("position %d", pos)
			}
			done <- err
		}()
		id, ch, payload := fc.expectPublish()
		if ch != "ch" || payload != "over tls" {
			t.Fatalf("server got %q %q", ch, payload)
		}
		fc.write(wire.AppendPubAck(nil, []wire.Ack{{ID: id, Position: 42}}))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
}

func TestTLSRefusesUntrustedServer(t *testing.T) {
	f, set := newTLSFake(t)
	other, err := testcert.New("sluice.test")
	if err != nil {
		t.Fatal(err)
	}
	wrongName := set.ClientConfig()
	wrongName.ServerName = "elsewhere.test"
	for _, cfg := range []*tls.Config{other.ClientConfig(), wrongName} {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := Dial(ctx, f.addr(), WithTLS(cfg), WithReconnect(false))
		cancel()
		if err == nil {
			t.Fatal("Dial trusted a server it should not")
		}
	}
	if err := WithTLS(nil)(&options{}); err == nil {
		t.Fatal("WithTLS(nil) accepted")
	}
}
