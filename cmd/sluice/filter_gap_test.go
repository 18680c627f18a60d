package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// scriptedConn is one connection of a scripted server: the test reads the
// client's frames and writes the server's.
type scriptedConn struct {
	t  *testing.T
	nc net.Conn
	rd *wire.Reader
}

func acceptScripted(t *testing.T, ln net.Listener) *scriptedConn {
	t.Helper()
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(e2eTimeout))
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &scriptedConn{t: t, nc: nc, rd: wire.NewReader(nc, wire.MaxBodyFor(1<<20))}
}

func (sc *scriptedConn) expect(typ wire.Type) (wire.Header, []byte) {
	sc.t.Helper()
	_ = sc.nc.SetReadDeadline(time.Now().Add(e2eTimeout))
	h, body, err := sc.rd.Next()
	if err != nil || h.Type != typ {
		sc.t.Fatalf("scripted server: got %v (%v), want %v", h.Type, err, typ)
	}
	return h, append([]byte(nil), body...)
}

func (sc *scriptedConn) write(b []byte) {
	sc.t.Helper()
	if _, err := sc.nc.Write(b); err != nil {
		sc.t.Fatal(err)
	}
}

// welcome answers the HELLO with the given features (those the client offered).
func (sc *scriptedConn) welcome(f wire.Features) {
	sc.t.Helper()
	h, body := sc.expect(wire.TypeHello)
	hello, err := wire.DecodeHello(body)
	if err != nil {
		sc.t.Fatal(err)
	}
	sc.write(wire.AppendWelcome(nil, h.ID, wire.Welcome{
		Version: wire.Version1, Features: hello.Features & f, MaxPayload: 1 << 20,
		MaxBody: wire.MaxBodyFor(1 << 20), MaxSubs: 100, ServerName: "old-node",
	}))
}

type cmdResult struct {
	code     int
	out, err string
}

func runCmdAsync(ctx context.Context, args ...string) <-chan cmdResult {
	ch := make(chan cmdResult, 1)
	go func() {
		code, out, errs := runCmd(ctx, "", args...)
		ch <- cmdResult{code, out, errs}
	}()
	return ch
}

// TestSubFilterServerWithoutFilters: `sub --filter` against a server that
// does not offer filters fails with a clear error, both at once and after a
// reconnect to such a server (a rolling downgrade), having printed only
// the matching messages before it; it never goes on unfiltered.
func TestSubFilterServerWithoutFilters(t *testing.T) {
	ctx := ctxE2E(t)
	t.Run("at once", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		res := runCmdAsync(ctx, "sub", "ch", "--server", ln.Addr().String(), "--filter", "payload.price > 100")
		sc := acceptScripted(t, ln)
		sc.welcome(wire.FeatureHeaders)
		r := <-res
		if r.code != exitFail || r.out != "" || !strings.Contains(r.err, "server does not offer filters (server old-node)") {
			t.Fatalf("sub --filter: %d %q %q", r.code, r.out, r.err)
		}
	})
	t.Run("after a reconnect", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		res := runCmdAsync(ctx, "sub", "ch", "--server", ln.Addr().String(), "--filter", "payload.price > 100")
		sc := acceptScripted(t, ln)
		sc.welcome(wire.FeatureHeaders | wire.FeatureFilters)
		h, body := sc.expect(wire.TypeSubscribe)
		sb, _, err := wire.DecodeSubscribeFilter(body)
		if err != nil || h.Flags&wire.FlagFilter == 0 {
			t.Fatalf("SUBSCRIBE flags %#x: %v", h.Flags, err)
		}
		sc.write(wire.AppendSubscribed(nil, h.ID, wire.Subscribed{SubID: sb.SubID, First: 1, Next: 1, Epoch: 1}))
		sc.write(wire.AppendFData(nil, sb.SubID, []wire.FRecord{{Pos: 3, Body: []byte(`{"price":101}`)}}))
		// The client has read the FDATA before the connection drops.
		sc.write(wire.AppendPing(nil, 1))
		sc.expect(wire.TypePong)
		_ = sc.nc.Close()
		sc2 := acceptScripted(t, ln)
		sc2.welcome(wire.FeatureHeaders)
		r := <-res
		if r.code != exitFail || r.out != "3\t{\"price\":101}\n" || !strings.Contains(r.err, "server does not offer filters (server old-node)") {
			t.Fatalf("sub --filter: %d %q %q", r.code, r.out, r.err)
		}
	})
}
