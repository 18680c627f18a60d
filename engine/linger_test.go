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
