package engine

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// TestFatalErrorReachesAWritingClient: a client that keeps writing after
// a frame the server rejects as fatal still reads the ERROR and then an
// orderly end of stream, not a connection reset that can destroy the
// ERROR before it is read.
func TestFatalErrorReachesAWritingClient(t *testing.T) {
	s := startTest(t, nil)
	for round := 0; round < 20; round++ {
		c, _ := helloRaw(t, s.Addr())
		junk := make([]byte, 64<<10)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = c.nc.SetWriteDeadline(time.Now().Add(waitFor))
			if c.writeErr(headerOnly(wire.TypePublish, 7, s.maxBody+1)) != nil {
				return
			}
			for i := 0; i < 64; i++ { // 4 MiB after the bad header
				if _, err := c.nc.Write(junk); err != nil {
					return
				}
			}
		}()
		h, body, err := c.tryNext(waitFor)
		if err != nil {
			t.Fatalf("round %d: reading the ERROR: %v", round, err)
		}
		if h.Type != wire.TypeError {
			t.Fatalf("round %d: got %s", round, describe(h, body))
		}
		if _, _, err := c.tryNext(waitFor); !errors.Is(err, io.EOF) {
			t.Fatalf("round %d: after the ERROR: %v, want EOF", round, err)
		}
		c.nc.Close()
		<-done
	}
}

// TestLingeringConnectionIsClosed: a client that got a fatal ERROR and
// end of stream but keeps its socket open is closed by the server after
// lingerTime; meanwhile the server reads and drops what it sends.
func TestLingeringConnectionIsClosed(t *testing.T) {
	s := startTest(t, nil)
	c, _ := helloRaw(t, s.Addr())
	c.write(headerOnly(wire.TypePublish, 7, s.maxBody+1))
	if h, body := c.next(); h.Type != wire.TypeError {
		t.Fatalf("got %s, want ERROR", describe(h, body))
	}
	if _, _, err := c.tryNext(waitFor); !errors.Is(err, io.EOF) {
		t.Fatalf("after the ERROR: %v, want EOF", err)
	}
	c.write(make([]byte, 1<<20)) // dropped by the server
	eventually(t, waitFor, "the lingering connection closed", func() bool { return s.conns.Load() == 0 })
}

// TestRefusalAtOpenLingers: a connection refused as it is accepted
// (TOO_MANY_CONNECTIONS, over MaxConns or MaxConnsPerAddr) by a client
// that sends its HELLO and more at once still reads the ERROR, with id 0,
// and then an orderly end of stream: the refusal lingers like every other
// fatal ERROR instead of closing with the HELLO unread (a reset).
func TestRefusalAtOpenLingers(t *testing.T) {
	for name, mutate := range map[string]func(*Options){
		"max_conns":          func(o *Options) { o.MaxConns = 1 },
		"max_conns_per_addr": func(o *Options) { o.MaxConnsPerAddr = 1 },
	} {
		t.Run(name, func(t *testing.T) {
			s := startTest(t, mutate)
			helloRaw(t, s.Addr()) // takes the one place
			for round := 0; round < 20; round++ {
				c := dialRaw(t, s.Addr())
				done := make(chan struct{})
				go func() {
					defer close(done)
					_ = c.nc.SetWriteDeadline(time.Now().Add(waitFor))
					if c.writeErr(wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "late"})) != nil {
						return
					}
					junk := wire.AppendPublish(nil, 2, 0, "x", make([]byte, 32<<10))
					for i := 0; i < 64; i++ {
						if _, err := c.nc.Write(junk); err != nil {
							return
						}
					}
				}()
				h, body, err := c.tryNext(waitFor)
				if err != nil {
					t.Fatalf("round %d: reading the refusal: %v", round, err)
				}
				expectCode(t, h, body, wire.CodeTooManyConnections, 0)
				if _, _, err := c.tryNext(waitFor); !errors.Is(err, io.EOF) {
					t.Fatalf("round %d: after the ERROR: %v, want EOF", round, err)
				}
				c.nc.Close()
				<-done
			}
			eventually(t, waitFor, "the refused connections closed", func() bool { return s.conns.Load() == 1 && s.lingering.Load() == 0 })
		})
	}
}
