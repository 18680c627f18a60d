package engine

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/wire"
	"github.com/sluice-rtm/sluice/ws"
)

// drip writes b one byte per every, in a goroutine the test owns (stopped
// by closing stop or by a write failing).
func drip(nc net.Conn, b []byte, every time.Duration, stop <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for i := range b {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			_ = nc.SetWriteDeadline(time.Now().Add(waitFor))
			if _, err := nc.Write(b[i : i+1]); err != nil {
				return
			}
		}
	}()
	return done
}

// TestSlowlorisAfterHelloIsClosed: a client that says HELLO and then
// drips a 4 KiB PUBLISH one byte at a time (each byte resetting the idle
// timer) is closed with IDLE_TIMEOUT once the frame has taken longer than
// FrameTimeout since its first byte; a client that sends whole frames as
// slowly stays (the control), and so does one whose frame arrives in time.
func TestSlowlorisAfterHelloIsClosed(t *testing.T) {
	const ft = 400 * time.Millisecond
	s := startTest(t, func(o *Options) { o.FrameTimeout = ft })
	slow, _ := helloRaw(t, s.Addr())
	steady, _ := helloRaw(t, s.Addr())
	stop := make(chan struct{})
	defer close(stop)
	start := time.Now()
	d1 := drip(slow.nc, wire.AppendPublish(nil, 1, wire.FlagAck, "loris", make([]byte, 4096)), 20*time.Millisecond, stop)
	// The control: a whole PING every 20 ms, answered with PONG.
	go func() {
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for i := uint32(1); ; i++ {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			if steady.writeErr(wire.AppendPing(nil, i)) != nil {
				return
			}
		}
	}()
	h, body := slow.next()
	took := time.Since(start)
	expectCode(t, h, body, wire.CodeIdleTimeout, 0)
	slow.expectClosed()
	slow.nc.Close()
	<-d1
	if took < ft {
		t.Fatalf("closed after %v, before the frame timeout %v", took, ft)
	}
	if took > ft+2*time.Second {
		t.Fatalf("closed only after %v (frame timeout %v)", took, ft)
	}
	// The steady client kept being answered past the frame timeout.
	for deadline := time.Now().Add(2 * ft); time.Now().Before(deadline); {
		h, body := steady.next()
		if h.Type != wire.TypePong {
			t.Fatalf("steady client got %s", describe(h, body))
		}
	}
	if v := s.Metrics(context.Background()).Violations["frame_timeout"]; v != 1 {
		t.Fatalf("frame_timeout violations %d, want 1", v)
	}
}

// TestSlowlorisNodeRecordIsClosed: on a sealed node connection a record
// begun and never finished (a header and a few bytes) ends the connection
// within FrameTimeout, like a partial frame on a client connection.
func TestSlowlorisNodeRecordIsClosed(t *testing.T) {
	const ft = 400 * time.Millisecond
	s := startNode(t, "a", nil, func(o *Options) { withSecret(o); o.FrameTimeout = ft })
	nc, sess := nodeSession(t, s.Addr(), "x", sealTestSecret)
	rec, err := sess.Sealer().Seal(nil, wire.AppendNodeRequest(nil, 1, wire.OpStatus, nil))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := nc.Write(rec[:wire.HeaderLen+3]); err != nil {
		t.Fatal(err)
	}
	types, end := answers(nc, sess.Conn(nc))
	if !closedStream(end) {
		t.Fatalf("partial record: connection not closed (%v, answered %v)", end, types)
	}
	if took := time.Since(start); took < ft || took > ft+2*time.Second {
		t.Fatalf("closed after %v, frame timeout %v", took, ft)
	}
}

// TestDefaultAbuseLimits: the defaults bound a partial frame's time and
// the connections of one address.
func TestDefaultAbuseLimits(t *testing.T) {
	o := DefaultOptions()
	if o.FrameTimeout != 10*time.Second || o.MaxConnsPerAddr != DefaultMaxConnsPerAddr {
		t.Fatalf("FrameTimeout %v, MaxConnsPerAddr %d", o.FrameTimeout, o.MaxConnsPerAddr)
	}
	o.FrameTimeout = -1
	if err := o.Validate(); err == nil {
		t.Fatal("a negative FrameTimeout was accepted")
	}
}

// TestWSSlowlorisIsClosed: the frame deadline holds on WebSocket
// connections after HELLO. One client drips a WebSocket message carrying a
// 4 KiB PUBLISH one byte at a time; another sends the same message as
// one-byte fragments, each a whole WebSocket frame, with a ping between
// them (every frame complete, the message never). Each byte or fragment
// resets the idle timer; both are closed with ERROR IDLE_TIMEOUT and close
// code 1008 once the message has taken longer than FrameTimeout since its
// first byte. A client sending whole messages as slowly stays (the
// control).
func TestWSSlowlorisIsClosed(t *testing.T) {
	const ft = 400 * time.Millisecond
	const every = 20 * time.Millisecond
	s := startWSTest(t, func(o *Options) { o.FrameTimeout = ft })
	dripper, fragmenter, steady := upgraded(t, s), upgraded(t, s), upgraded(t, s)
	for _, c := range []*wsRaw{dripper, fragmenter, steady} {
		c.hello()
		_ = c.nc.SetDeadline(time.Now().Add(waitFor))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	// tick runs write every 20 ms until it fails or the test ends.
	tick := func(write func(i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := time.NewTicker(every)
			defer tk.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tk.C:
				}
				if write(i) != nil {
					return
				}
			}
		}()
	}
	pub := wire.AppendPublish(nil, 1, wire.FlagAck, "loris", make([]byte, 4096))
	msg := ws.AppendMaskedFrame(nil, true, ws.OpBinary, pub, testMask)
	tick(func(i int) error {
		if i >= len(msg) {
			return io.EOF
		}
		_, err := dripper.nc.Write(msg[i : i+1])
		return err
	})
	tick(func(i int) error {
		var f []byte
		switch {
		case i >= len(pub):
			return io.EOF
		case i == 0:
			f = ws.AppendMaskedFrame(nil, false, ws.OpBinary, pub[:1], testMask)
		default:
			f = ws.AppendMaskedFrame(nil, i == len(pub)-1, ws.OpContinuation, pub[i:i+1], testMask)
		}
		f = ws.AppendMaskedFrame(f, true, ws.OpPing, nil, testMask)
		_, err := fragmenter.nc.Write(f)
		return err
	})
	tick(func(i int) error {
		_, err := steady.nc.Write(ws.AppendMaskedFrame(nil, true, ws.OpBinary, wire.AppendPing(nil, uint32(i+1)), testMask))
		return err
	})
	start := time.Now()
	for _, c := range []*wsRaw{dripper, fragmenter} {
		var h wire.Header
		var body []byte
		for { // the fragmenter's pongs come first
			ev, err := c.next()
			if err != nil {
				t.Fatalf("want ERROR IDLE_TIMEOUT, got %v", err)
			}
			if ev.Op == ws.OpPong {
				continue
			}
			if ev.Op != ws.OpBinary {
				t.Fatalf("want ERROR IDLE_TIMEOUT, got %v %q", ev.Op, ev.Payload)
			}
			var err2 error
			if h, body, _, err2 = wire.Split(ev.Payload, 1<<20); err2 != nil {
				t.Fatal(err2)
			}
			break
		}
		took := time.Since(start)
		e := expectCode(t, h, body, wire.CodeIdleTimeout, 0)
		if !strings.Contains(e.Text, "incomplete") {
			t.Fatalf("ERROR text %q does not say a frame was incomplete", e.Text)
		}
		c.closed(ws.CodePolicyViolation)
		if took < ft || took > ft+2*time.Second {
			t.Fatalf("closed after %v, frame timeout %v", took, ft)
		}
	}
	// The steady client is still answered past the frame timeout.
	for deadline := time.Now().Add(2 * ft); time.Now().Before(deadline); {
		if h, body := steady.frame(); h.Type != wire.TypePong {
			t.Fatalf("steady client got %s", describe(h, body))
		}
	}
	if v := s.Metrics(context.Background()).Violations["frame_timeout"]; v != 2 {
		t.Fatalf("frame_timeout violations %d, want 2", v)
	}
}
