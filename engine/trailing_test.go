package engine

import (
	"testing"

	"github.com/sluice-rtm/sluice/wire"
)

// A client that sends a fatal frame followed by a megabyte more input still
// reads its ERROR before the close: the server acts on nothing after the
// fatal frame, writes the ERROR before it closes, and the bytes it never
// read do not make it drop the ERROR. (On loopback the ERROR is on the wire
// before the close; on a slow link a close with unread input sends RST,
// which can discard an unsent ERROR: see DESIGN.md, "known limits".)
func TestFatalErrorSurvivesTrailingInput(t *testing.T) {
	s := startTest(t, nil)
	for i := 0; i < 20; i++ {
		c, _ := helloRaw(t, s.Addr())
		junk := make([]byte, 0, 1<<20)
		junk = append(junk, 0, 0, 0, 1, 0x77, 0, 0, 0, 0, 0, 0) // unknown type 0x77
		for len(junk) < 1<<20-wire.HeaderLen {
			junk = wire.AppendPing(junk, 1)
		}
		_, _ = c.nc.Write(junk) // fails once the server has closed; read after it
		e := c.expectError()
		if e.Code != wire.CodeUnknownType {
			t.Fatalf("round %d: got %v, want UNKNOWN_TYPE", i, e)
		}
		c.expectClosed()
	}
}
