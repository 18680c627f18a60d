package engine

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rtm/sluice/client/wsdial"
	"github.com/sluice-rtm/sluice/wire"
	"github.com/sluice-rtm/sluice/ws"
)

func startWSTest(t testing.TB, mutate func(*Options)) *Server {
	return startTest(t, func(o *Options) {
		o.WSListen = "127.0.0.1:0"
		if mutate != nil {
			mutate(o)
		}
	})
}

// dialWS connects through the WebSocket gateway and returns a rawConn
// over it: every helper of the TCP tests runs over WebSocket unchanged.
func dialWS(t testing.TB, s *Server, o wsdial.Options) *rawConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	nc, err := wsdial.Dial(ctx, s.WSURL(), o)
	if err != nil {
		t.Fatalf("ws dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, r: wire.NewReader(nc, 64<<20)}
}

const upgradeReq = "GET /sluice HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"

// wsRaw is a hand-driven WebSocket client for malformed input.
type wsRaw struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
	rd ws.Reader
}

// dialWSRaw connects to the WebSocket listener and sends req (a whole
// upgrade request when it ends with a blank line).
func dialWSRaw(t testing.TB, s *Server, req string) *wsRaw {
	t.Helper()
	nc, err := net.DialTimeout("tcp", s.WSAddr(), waitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(waitFor))
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	return &wsRaw{t: t, nc: nc, br: bufio.NewReader(nc), rd: ws.Reader{Max: 64 << 20, Client: true}}
}

// upgraded dials and completes a valid upgrade.
func upgraded(t testing.TB, s *Server) *wsRaw {
	t.Helper()
	c := dialWSRaw(t, s, upgradeReq+"\r\n")
	if resp := c.response(); resp.StatusCode != 101 || resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("upgrade answer %v %v", resp.Status, resp.Header)
	}
	return c
}

func (c *wsRaw) response() *http.Response {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: "GET"})
	if err != nil {
		c.t.Fatalf("read HTTP answer: %v", err)
	}
	return resp
}

var testMask = [4]byte{9, 8, 7, 6}

func (c *wsRaw) send(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *wsRaw) sendMsg(op ws.Op, p []byte) { c.send(ws.AppendMaskedFrame(nil, true, op, p, testMask)) }

// next reads one frame from the server.
func (c *wsRaw) next() (ws.Event, error) {
	var buf []byte
	for {
		if len(buf) > 0 {
			b := append([]byte(nil), buf...)
			ev, n, err := c.rd.Next(b)
			if err == nil {
				_, _ = c.br.Discard(n)
				ev.Payload = append([]byte(nil), ev.Payload...)
				return ev, nil
			}
			if err != ws.ErrIncomplete {
				return ev, err
			}
		}
		// Peek more of what is buffered or arrives.
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return ws.Event{}, err
		}
		buf, _ = c.br.Peek(c.br.Buffered())
	}
}

// frame reads the next binary message and decodes it as a protocol frame.
func (c *wsRaw) frame() (wire.Header, []byte) {
	c.t.Helper()
	ev, err := c.next()
	if err != nil || ev.Op != ws.OpBinary {
		c.t.Fatalf("want a binary message, got %v %q (%v)", ev.Op, ev.Payload, err)
	}
	h, body, n, err := wire.Split(ev.Payload, 64<<20)
	if err != nil || n != len(ev.Payload) {
		c.t.Fatalf("message is not one frame: n=%d of %d, %v", n, len(ev.Payload), err)
	}
	return h, body
}

// closed expects a close frame with code, then the end of the stream.
func (c *wsRaw) closed(code ws.Code) {
	c.t.Helper()
	ev, err := c.next()
	if err != nil || ev.Op != ws.OpClose || ev.Code != code {
		c.t.Fatalf("want close %d, got %v code %d reason %q (%v)", code, ev.Op, ev.Code, ev.Reason, err)
	}
	if _, err := c.br.ReadByte(); err != io.EOF && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		c.t.Fatalf("after the close frame: %v, want end of stream", err)
	}
}

func (c *wsRaw) hello() {
	c.t.Helper()
	c.sendMsg(ws.OpBinary, wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Name: "raw"}))
	if h, body := c.frame(); h.Type != wire.TypeWelcome {
		c.t.Fatalf("want WELCOME, got %s", describe(h, body))
	}
}

// TestWSPublishSubscribe: a WebSocket client and a TCP client publish to
// and subscribe from each other, with positions, pipelined acks and a
// DATA frame over 64 KiB (a 64-bit WebSocket length).
func TestWSPublishSubscribe(t *testing.T) {
	s := startWSTest(t, nil)
	if !strings.HasPrefix(s.WSURL(), "ws://127.0.0.1:") {
		t.Fatalf("WSURL %q", s.WSURL())
	}
	wc := dialWS(t, s, wsdial.Options{})
	if _, err := wc.handshakeErr(); err != nil {
		t.Fatal(err)
	}
	tc, _ := helloRaw(t, s.Addr())
	wc.subscribe(1, "ws.a", wire.StartLive, 0)
	tc.subscribe(1, "ws.b", wire.StartLive, 0)

	p1 := tc.publish("ws.a", []byte("from tcp"))
	evs := wc.events(1)
	if len(evs) != 1 || evs[0].payload != "from tcp" || evs[0].pos != p1 {
		t.Fatalf("WebSocket subscriber got %v, want position %d", evs, p1)
	}
	// 200 pipelined publishes in one write: 200 messages, acks in order.
	var batch [][]byte
	for i := range 200 {
		batch = append(batch, payloadOf(i))
	}
	batch = append(batch, bytes.Repeat([]byte("L"), 100<<10))
	pos, err := wc.publishBatch("ws.b", batch)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tc.eventsUntil(1, pos[len(pos)-1])
	if err != nil {
		t.Fatal(err)
	}
	m, gaps, err := checkStream(got, 1, pos[0], pos[len(pos)-1])
	if err != nil || len(gaps) > 0 || len(m) != len(batch) {
		t.Fatalf("TCP subscriber: %d messages, gaps %v, %v", len(m), gaps, err)
	}
	// And the big one back to the WebSocket subscriber.
	big := bytes.Repeat([]byte("B"), 200<<10)
	pb := tc.publish("ws.a", big)
	evs = wc.events(1)
	if len(evs) != 1 || evs[0].pos != pb || evs[0].payload != string(big) {
		t.Fatalf("big DATA over WebSocket: %d events", len(evs))
	}
	met := s.Metrics(context.Background())
	if met.WSConnections != 1 || met.Connections != 2 {
		t.Fatalf("metrics: %d WebSocket of %d connections", met.WSConnections, met.Connections)
	}
}

// TestWSFragmentedMessage: a publish split over three fragments with a
// ping between them is one frame; the ping is answered with its payload.
func TestWSFragmentedMessage(t *testing.T) {
	s := startWSTest(t, nil)
	c := upgraded(t, s)
	c.hello()
	f := wire.AppendPublish(nil, 5, wire.FlagAck, "frag", []byte("hello fragments"))
	var b []byte
	b = ws.AppendMaskedFrame(b, false, ws.OpBinary, f[:3], testMask)
	b = ws.AppendMaskedFrame(b, true, ws.OpPing, []byte("are you there"), testMask)
	b = ws.AppendMaskedFrame(b, false, ws.OpContinuation, f[3:12], testMask)
	b = ws.AppendMaskedFrame(b, true, ws.OpContinuation, f[12:], testMask)
	c.send(b)
	// The pong and the PUBACK, in either order (a pong is sent with the
	// connection's next output).
	var pong, ack bool
	for !pong || !ack {
		ev, err := c.next()
		switch {
		case err != nil:
			t.Fatal(err)
		case ev.Op == ws.OpPong && string(ev.Payload) == "are you there" && !pong:
			pong = true
		case ev.Op == ws.OpBinary && !ack:
			h, body, _, err := wire.Split(ev.Payload, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			acks, err := wire.DecodePubAck(body, nil)
			if h.Type != wire.TypePubAck || err != nil || len(acks) != 1 || acks[0].ID != 5 || acks[0].Position == 0 {
				t.Fatalf("want PUBACK id 5, got %s", describe(h, body))
			}
			ack = true
		default:
			t.Fatalf("unexpected %v %q", ev.Op, ev.Payload)
		}
	}
	// The client ends the session: the server answers with its close.
	c.sendMsg(ws.OpClose, ws.ClosePayload(ws.CodeNormal, "bye"))
	c.closed(ws.CodeNormal)
}

// TestWSMalformedClosesOnlyThatConnection: every malformed class gets its
// close code (and the ERROR first where the protocol is at fault) while
// another WebSocket client and a TCP client carry on.
func TestWSMalformedClosesOnlyThatConnection(t *testing.T) {
	s := startWSTest(t, nil)
	good := dialWS(t, s, wsdial.Options{})
	if _, err := good.handshakeErr(); err != nil {
		t.Fatal(err)
	}
	tcp, _ := helloRaw(t, s.Addr())
	limit := int(s.maxBody) + wire.HeaderLen
	cases := []struct {
		name  string
		hello bool
		send  func(c *wsRaw)
		err   wire.Code // an ERROR before the close, 0 = none
		code  ws.Code
	}{
		{"text message", true, func(c *wsRaw) { c.sendMsg(ws.OpText, []byte("hello")) }, 0, ws.CodeUnsupportedData},
		{"unmasked frame", true, func(c *wsRaw) { c.send(ws.AppendFrame(nil, ws.OpBinary, wire.AppendPing(nil, 1))) }, 0, ws.CodeProtocolError},
		{"oversize message (header only)", true, func(c *wsRaw) {
			c.send(ws.AppendHeader(nil, true, ws.OpBinary, limit+1, &testMask))
		}, 0, ws.CodeTooBig},
		{"oversize before HELLO", false, func(c *wsRaw) {
			c.send(ws.AppendHeader(nil, true, ws.OpBinary, wire.HeaderLen+wire.MinMaxBody+1, &testMask))
		}, 0, ws.CodeTooBig},
		{"endless fragments", true, func(c *wsRaw) {
			b := ws.AppendMaskedFrame(nil, false, ws.OpBinary, []byte{0}, testMask)
			chunk := bytes.Repeat([]byte{1}, 60<<10)
			for len(b) < limit+(64<<10) {
				b = ws.AppendMaskedFrame(b, false, ws.OpContinuation, chunk, testMask)
			}
			c.send(b)
		}, 0, ws.CodeTooBig},
		{"reserved opcode", true, func(c *wsRaw) { c.send([]byte{0x83, 0x80, 1, 2, 3, 4}) }, 0, ws.CodeProtocolError},
		{"reserved bit", true, func(c *wsRaw) { c.send([]byte{0xc2, 0x80, 1, 2, 3, 4}) }, 0, ws.CodeProtocolError},
		{"two frames in one message", true, func(c *wsRaw) {
			c.sendMsg(ws.OpBinary, append(wire.AppendPing(nil, 1), wire.AppendPing(nil, 2)...))
		}, wire.CodeProtocolError, ws.CodeProtocolError},
		{"half a frame in a message", true, func(c *wsRaw) {
			c.sendMsg(ws.OpBinary, wire.AppendPublish(nil, 1, 0, "x", []byte("abc"))[:12])
		}, wire.CodeProtocolError, ws.CodeProtocolError},
		{"malformed protocol frame", true, func(c *wsRaw) {
			c.sendMsg(ws.OpBinary, wire.AppendHeader(nil, wire.TypeSubscribe, 0, 1, 0))
		}, wire.CodeProtocolError, ws.CodeProtocolError},
		{"publish before HELLO", false, func(c *wsRaw) {
			c.sendMsg(ws.OpBinary, wire.AppendPublish(nil, 1, 0, "x", nil))
		}, wire.CodeHelloRequired, ws.CodePolicyViolation},
		{"bad close code", true, func(c *wsRaw) { c.sendMsg(ws.OpClose, []byte{0x03, 0xed}) }, 0, ws.CodeProtocolError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := upgraded(t, s)
			if tc.hello {
				c.hello()
			}
			tc.send(c)
			if tc.err != 0 {
				h, body := c.frame()
				e, err := wire.DecodeError(h, body)
				if h.Type != wire.TypeError || err != nil || e.Code != tc.err {
					t.Fatalf("want ERROR %v, got %s", tc.err, describe(h, body))
				}
			}
			c.closed(tc.code)
			// The others carry on.
			good.subscribe(good.nextID()+100, "still."+strings.ReplaceAll(tc.name, " ", "-"), wire.StartLive, 0)
			tcp.publish("still.alive", []byte("x"))
		})
	}
	if n := s.Metrics(context.Background()).WSErrors; n < 6 {
		t.Fatalf("WSErrors = %d", n)
	}
}

// TestWSBadUpgrade: bad upgrade requests get their HTTP status and a
// close; an upgrade that never ends is cut at the handshake timeout.
func TestWSBadUpgrade(t *testing.T) {
	s := startWSTest(t, func(o *Options) {
		o.HandshakeTimeout = 300 * time.Millisecond
		o.WSOrigins = []string{"https://app.example.com"}
	})
	cases := []struct {
		name, req string
		status    int
	}{
		{"not HTTP", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", 400},
		{"POST", strings.Replace(upgradeReq, "GET", "POST", 1) + "\r\n", 400},
		{"no key", strings.Replace(upgradeReq, "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", "", 1) + "\r\n", 400},
		{"version 8", strings.Replace(upgradeReq, "Version: 13", "Version: 8", 1) + "\r\n", 426},
		{"plain HTTP GET", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"header too long", upgradeReq + "X-Junk: " + strings.Repeat("j", ws.MaxRequest) + "\r\n\r\n", 400},
		{"disallowed origin", upgradeReq + "Origin: https://evil.example.com\r\n\r\n", 403},
		{"slowloris", upgradeReq + "X-Slow: 1\r\n", 408},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			c := dialWSRaw(t, s, tc.req)
			resp := c.response()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %s, want %d", resp.Status, tc.status)
			}
			if tc.status == 426 && resp.Header.Get("Sec-WebSocket-Version") != "13" {
				t.Fatalf("426 without Sec-WebSocket-Version: %v", resp.Header)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			if _, err := c.br.ReadByte(); err != io.EOF && !isReset(err) {
				t.Fatalf("after the answer: %v, want end of stream", err)
			}
			if tc.name == "slowloris" && time.Since(start) > 5*time.Second {
				t.Fatalf("slowloris cut after %v", time.Since(start))
			}
		})
	}
	// An allowed origin upgrades.
	c := dialWSRaw(t, s, upgradeReq+"Origin: https://app.example.com\r\n\r\n")
	if resp := c.response(); resp.StatusCode != 101 {
		t.Fatalf("allowed origin: %s", resp.Status)
	}
	if n := s.Metrics(context.Background()).Rejected[RejectWSUpgrade]; n != int64(len(cases)) {
		t.Fatalf("rejected ws_upgrade = %d, want %d", n, len(cases))
	}
}

// TestWSDefaultOrigins: with no allow-list, pages of the host the client
// connects to are admitted (any port), other origins are not.
func TestWSDefaultOrigins(t *testing.T) {
	s := startWSTest(t, nil)
	for origin, status := range map[string]int{"http://127.0.0.1:9090": 101, "http://evil.example": 403, "": 101} {
		req := upgradeReq
		if origin != "" {
			req += "Origin: " + origin + "\r\n"
		}
		c := dialWSRaw(t, s, req+"\r\n")
		if resp := c.response(); resp.StatusCode != status {
			t.Fatalf("origin %q: %s, want %d", origin, resp.Status, status)
		}
	}
}

// TestWSAuth: the token in HELLO and the role's permissions apply over
// WebSocket as over TCP.
func TestWSAuth(t *testing.T) {
	s := startWSTest(t, func(o *Options) { o.Auth = testAuth() })
	c := upgraded(t, s)
	c.sendMsg(ws.OpBinary, wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Token: []byte("wrong-token-0123456789")}))
	h, body := c.frame()
	if e, _ := wire.DecodeError(h, body); h.Type != wire.TypeError || e.Code != wire.CodeUnauthenticated {
		t.Fatalf("wrong token: %s", describe(h, body))
	}
	c.closed(ws.CodePolicyViolation)

	bob := upgraded(t, s)
	bob.sendMsg(ws.OpBinary, wire.AppendHello(nil, 1, wire.Hello{MinVersion: 1, MaxVersion: 1, Token: []byte(tokBob)}))
	if h, body := bob.frame(); h.Type != wire.TypeWelcome {
		t.Fatalf("bob: %s", describe(h, body))
	}
	bob.sendMsg(ws.OpBinary, wire.AppendPublish(nil, 9, wire.FlagAck, "chat.x", []byte("no")))
	h, body = bob.frame()
	if e, _ := wire.DecodeError(h, body); h.Type != wire.TypeError || e.Code != wire.CodeForbidden || h.ID != 9 {
		t.Fatalf("bob publishes: %s", describe(h, body))
	}
	// FORBIDDEN is not fatal: bob may still subscribe where allowed.
	bob.sendMsg(ws.OpBinary, wire.AppendSubscribe(nil, 10, wire.Subscribe{SubID: 1, Channel: []byte("metrics.cpu"), Start: wire.StartLive}))
	if h, body := bob.frame(); h.Type != wire.TypeSubscribed {
		t.Fatalf("bob subscribes: %s", describe(h, body))
	}
}

// TestWSS: with a certificate the listener serves wss://.
func TestWSS(t *testing.T) {
	set := newCerts(t)
	s := startTest(t, func(o *Options) {
		o.WSListen = "127.0.0.1:0"
		o.TLSConfig = set.ServerConfig()
	})
	if !strings.HasPrefix(s.WSURL(), "wss://") {
		t.Fatalf("WSURL %q", s.WSURL())
	}
	cfg := set.ClientConfig()
	c := dialWS(t, s, wsdial.Options{TLSConfig: cfg})
	if _, err := c.handshakeErr(); err != nil {
		t.Fatal(err)
	}
	if p := c.publish("tls.ws", []byte("x")); p == 0 {
		t.Fatal("position 0")
	}
	m := s.Metrics(context.Background())
	if m.WSConnections != 1 || m.TLSConnections != 1 {
		t.Fatalf("metrics: ws %d tls %d", m.WSConnections, m.TLSConnections)
	}
}

// TestWSShutdownGoingAway: a shutdown sends GOAWAY and close 1001.
func TestWSShutdownGoingAway(t *testing.T) {
	s := startWSTest(t, nil)
	c := upgraded(t, s)
	c.hello()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	if h, body := c.frame(); h.Type != wire.TypeGoAway {
		t.Fatalf("want GOAWAY, got %s", describe(h, body))
	}
	ev, err := c.next()
	if err != nil || ev.Op != ws.OpClose || ev.Code != ws.CodeGoingAway {
		t.Fatalf("want close 1001, got %v %d %v", ev.Op, ev.Code, err)
	}
	c.nc.Close()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestWSSlowConsumerDisconnect: the slow-consumer policy applies to a
// WebSocket subscriber that does not read, as to a TCP one.
func TestWSSlowConsumerDisconnect(t *testing.T) {
	s := startWSTest(t, func(o *Options) {
		o.OutboundLimit = 64 << 10
		o.SlowPolicy = SlowDisconnect
	})
	small := func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			}); err != nil {
				return err
			}
			return serr
		}}
		return d.DialContext(ctx, network, addr)
	}
	slow := dialWS(t, s, wsdial.Options{Dialer: small})
	if _, err := slow.handshakeErr(); err != nil {
		t.Fatal(err)
	}
	slow.subscribe(1, "slow.ws", wire.StartLive, 0)
	pub, _ := helloRaw(t, s.Addr())
	payloads := make([][]byte, 16)
	for i := range payloads {
		payloads[i] = bytes.Repeat([]byte{'p'}, 1024)
	}
	// Publish until the server gives up on the subscriber; it then
	// half-closes the connection and ends it when the client closes or
	// its linger time passes (loop.closeGracefully).
	for w := 0; s.Metrics(context.Background()).SlowCloses == 0; w++ {
		if w == 1600 {
			t.Fatal("the slow WebSocket subscriber was never disconnected")
		}
		if _, err := pub.publishBatch("slow.ws", payloads); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, waitFor, "slow subscriber disconnected", func() bool { return s.conns.Load() == 1 })
	pub.publish("slow.ws", []byte("the publisher carries on"))
}
