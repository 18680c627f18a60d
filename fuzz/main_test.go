package fuzz

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/engine"
	"github.com/sluice-rtm/sluice/wire"
)

// Limits of the shared server. They are small so that short fuzz inputs
// reach them: payloads over maxPayload, subscriptions over maxSubs,
// streamlet rollover after a few messages, leases and TTLs that end while
// the fuzzer runs.
const (
	maxPayload       = 4 << 10
	maxSubs          = 8
	outboundLimit    = 64 << 10
	handshakeTimeout = time.Second
	limitMsgs        = 32
	limitSize        = 16 << 10
	limitLife        = 50 * time.Millisecond
	ttl              = 500 * time.Millisecond
)

// serverMaxBody is the body limit the server announces and enforces.
var serverMaxBody = wire.MaxBodyFor(maxPayload)

var (
	srvOnce sync.Once
	srv     *engine.Server
	srvErr  error
)

// fuzzOptions returns the options of the shared server.
func fuzzOptions() engine.Options {
	o := engine.DefaultOptions()
	o.Listen = "127.0.0.1:0"
	o.Loops = 2
	o.ServerName = "fuzz"
	o.MaxPayload = maxPayload
	o.MaxSubsPerConn = maxSubs
	o.OutboundLimit = outboundLimit
	o.HandshakeTimeout = handshakeTimeout
	o.LimitMsgs = limitMsgs
	o.LimitSize = limitSize
	o.LimitLife = limitLife
	o.TTL = ttl
	// The model predicts every answer: no rate limit (it would refuse valid
	// publishes depending on timing), no cap per address (every client of the
	// harness is 127.0.0.1), no authentication, no side listeners.
	o.PublishRate = 0
	o.MaxConnsPerAddr = 0
	o.Auth = nil
	o.MetricsListen = ""
	o.TLSListen = ""
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return o
}

// server returns the address of the one engine of this test process,
// starting it on first use. Every test and fuzz input shares it, as the
// clients of a long-running server do; TestMain shuts it down.
func server(tb testing.TB) string {
	tb.Helper()
	srvOnce.Do(func() {
		if srv, srvErr = engine.Start(fuzzOptions()); srvErr == nil {
			srvErr = warmUp(srv.Addr())
		}
	})
	if srvErr != nil {
		tb.Fatalf("engine: %v", srvErr)
	}
	return srv.Addr()
}

// warmUp serves one probe and waits until the goroutine count has been
// steady for a while: gnet starts some of its goroutines (event loops, its
// worker pool's housekeeping) after Start returns, and they must be part
// of the baseline that leak checks compare against.
func warmUp(addr string) error {
	if err := probe(addr); err != nil {
		return err
	}
	deadline := time.Now().Add(syncTimeout)
	last, steady := runtime.NumGoroutine(), 0
	for steady < 50 {
		if time.Now().After(deadline) {
			return fmt.Errorf("goroutine count did not settle after start (%d)", last)
		}
		time.Sleep(time.Millisecond)
		if n := runtime.NumGoroutine(); n != last {
			last, steady = n, 0
		} else {
			steady++
		}
	}
	return nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if wsSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := wsSrv.Shutdown(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "fuzz: shutdown: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		cancel()
	}
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := srv.Shutdown(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "fuzz: shutdown: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		cancel()
	}
	os.Exit(code)
}
