package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// counterProvider hands out "tok-1", "tok-2", ... and counts its calls.
func counterProvider(n *atomic.Int32) TokenProvider {
	return func(context.Context) ([]byte, error) {
		return fmt.Appendf(nil, "tok-%d", n.Add(1)), nil
	}
}

// expectRefresh reads until a REFRESH and returns its id and token.
func (fc *fakeConn) expectRefresh() (uint32, string) {
	fc.t.Helper()
	for {
		h, body := fc.read()
		if h.Type == wire.TypePing {
			continue
		}
		if h.Type != wire.TypeRefresh {
			fc.t.Fatalf("fake server got %v, want REFRESH", h.Type)
		}
		tok, err := wire.DecodeRefresh(body)
		if err != nil {
			fc.t.Fatal(err)
		}
		return h.ID, string(tok)
	}
}

// TestTokenProviderRefreshesBeforeExpiry: the provider's token goes in
// HELLO; when AUTHED says it expires, the next one comes in a REFRESH on
// the same connection at 80-90% of the lifetime, and again after every
// AUTHED that answers a REFRESH.
func TestTokenProviderRefreshesBeforeExpiry(t *testing.T) {
	f := newFakeServer(t)
	var calls atomic.Int32
	w := testWelcome()
	w.Features = wire.FeatureRefresh
	c, fc := connect(t, f, w, WithTokenProvider(counterProvider(&calls)))
	if string(fc.hello.Token) != "tok-1" || fc.hello.Features&wire.FeatureRefresh == 0 {
		t.Fatalf("HELLO %+v", fc.hello)
	}
	const life = 300 * time.Millisecond
	sent := time.Now()
	fc.write(wire.AppendAuthed(nil, 1, wire.Authed{ExpiresIn: life, Grace: time.Second, ClientID: "alice"}))
	id, tok := fc.expectRefresh()
	if waited := time.Since(sent); tok != "tok-2" || waited < life*8/10 {
		t.Fatalf("REFRESH %q after %v, want tok-2 after at least %v", tok, waited, life*8/10)
	}
	if c.ClientID() != "alice" {
		t.Fatalf("ClientID %q", c.ClientID())
	}
	fc.write(wire.AppendAuthed(nil, id, wire.Authed{ExpiresIn: life, Grace: time.Second, ClientID: "alice"}))
	if _, tok := fc.expectRefresh(); tok != "tok-3" {
		t.Fatalf("second REFRESH %q", tok)
	}
	if n := c.TokenRefreshes(); n != 1 {
		t.Fatalf("TokenRefreshes %d, want 1", n)
	}
}

// TestTokenProviderOnReconnect: a reconnect asks the provider again.
func TestTokenProviderOnReconnect(t *testing.T) {
	f := newFakeServer(t)
	var calls atomic.Int32
	_, fc := connect(t, f, testWelcome(), WithTokenProvider(counterProvider(&calls)))
	fc.write(wire.AppendError(nil, 0, wire.Error{Code: wire.CodeTokenExpired, Text: "expired"}))
	fc.close()
	fc2 := f.accept()
	_, body := fc2.expect(wire.TypeHello)
	hello, err := wire.DecodeHello(body)
	if err != nil || string(hello.Token) != "tok-2" {
		t.Fatalf("second HELLO token %q, %v", hello.Token, err)
	}
}

// TestTokenProviderErrors: a failing provider fails the Dial; a token over
// the limit is refused before it is sent.
func TestTokenProviderErrors(t *testing.T) {
	f := newFakeServer(t)
	boom := errors.New("backend down")
	_, err := Dial(ctxT(t), f.addr(), WithReconnect(false), WithTokenProvider(func(context.Context) ([]byte, error) { return nil, boom }))
	if !errors.Is(err, boom) {
		t.Fatalf("Dial: %v, want the provider's error", err)
	}
	_, err = Dial(ctxT(t), f.addr(), WithReconnect(false), WithTokenProvider(func(context.Context) ([]byte, error) {
		return make([]byte, wire.MaxTokenLen+1), nil
	}))
	if !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("Dial with an oversized token: %v", err)
	}
	if _, err := Dial(ctxT(t), f.addr(), WithTokenProvider(nil)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("nil provider: %v", err)
	}
}

// TestAuthedWithoutFeatureIsProtocolError: AUTHED is only sent after
// FeatureRefresh was negotiated.
func TestAuthedWithoutFeatureIsProtocolError(t *testing.T) {
	f := newFakeServer(t)
	_, fc := connect(t, f, testWelcome())
	fc.write(wire.AppendAuthed(nil, 1, wire.Authed{}))
	if err := fc.readErr(); err == nil {
		t.Fatal("the client kept the connection")
	}
}
