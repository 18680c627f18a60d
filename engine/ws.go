package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/sluice-rtm/sluice/wire"
	"github.com/sluice-rtm/sluice/ws"
)

// The WebSocket gateway (PROTOCOL.md section 10).
//
// A WebSocket client is a client connection like a TCP one, on the same
// event loops, with a wsConn attached that adapts its bytes:
//
//	in:  HTTP upgrade (ws.ParseRequest) -> 101, then WebSocket frames
//	     (ws.Reader, unmasked in place in gnet's buffer) -> one protocol
//	     frame per binary message -> loop.frame, as for TCP
//	out: the connection's pending output (whole protocol frames, own
//	     bytes and shared DATA bodies) is cut at frame boundaries when it
//	     is flushed and each frame gets a WebSocket header (wrap); control
//	     frames (pong, close) follow
//
// so auth, limits, permissions, the slow-consumer policy and metrics are
// those of every client. The listener is a net.Listener whose one
// goroutine accepts and hands each socket to a loop (Engine.Register):
// gnet's own multi-address listening (gnet.Rotate) cannot tell a
// connection's listener apart when both listen on port 0. With a TLS
// certificate configured the listener serves wss: the TLS bridge
// (tls.go) terminates TLS and enrolls the plain stream, marked WebSocket.

// wsAcceptBacklog bounds how long the acceptor backs off after an accept
// error (e.g. out of descriptors).
const wsMaxBackoff = time.Second

// wsConn is the WebSocket state of one client connection; owned by its
// loop like the rest of conn.
type wsConn struct {
	up bool      // the upgrade was answered with 101
	rd ws.Reader // the client's frames
	// pre is raw output that precedes the wrapped frames of this flush
	// (the answer to the upgrade); post follows them (pongs, the close).
	pre, post []byte
	// closeQueued: a close frame is in post; closeSent: it was flushed,
	// so nothing more may be sent.
	closeQueued, closeSent bool

	lens []int    // frame lengths of this flush
	hdrs []byte   // their WebSocket headers
	out  [][]byte // the wrapped vectors
}

// wsTraffic is traffic for a WebSocket connection.
func (l *loop) wsTraffic(c *conn) gnet.Action {
	l.begin()
	c.noteInput(l.now)
	w := c.ws
	buf, _ := c.gc.Peek(-1)
	off := 0
	if c.sec.addr == addrProxyHeader {
		if off = l.proxyHeader(c, buf); off < 0 {
			l.end() // the rest of a PROXY header (clientaddr.go) comes later
			return gnet.None
		}
	}
	if !w.up && !c.closing {
		off += l.wsUpgrade(c, buf[off:])
	}
	upgraded := w.up
	progressed := false // a message (or a control frame outside one) was completed
	for w.up && !c.closing && !c.closed {
		limit := l.srv.maxBody
		if !c.hello {
			limit = wire.MinMaxBody // as for TCP: only a HELLO is valid yet
		}
		w.rd.Max = wire.HeaderLen + int(limit)
		ev, n, err := w.rd.Next(buf[off:])
		if err == ws.ErrIncomplete {
			break
		}
		if err != nil {
			l.stats.wsErrors++
			c.wsClose(ws.CodeOf(err), err.Error())
			break
		}
		off += n
		if !w.rd.InMessage() {
			progressed = true
		}
		switch ev.Op {
		case ws.OpBinary:
			h, body, m, err := wire.Split(ev.Payload, limit)
			if err == nil && m != len(ev.Payload) {
				err = fmt.Errorf("%w: a WebSocket message holds a %d-byte frame and %d bytes more: one frame per message",
					wire.ErrMalformed, m, len(ev.Payload)-m)
			} else if err == wire.ErrIncomplete {
				err = fmt.Errorf("%w: a WebSocket message of %d bytes holds no whole frame: one frame per message",
					wire.ErrMalformed, len(ev.Payload))
			}
			if err != nil {
				code := wire.CodeProtocolError
				if isTooLarge(err) {
					code = wire.CodeFrameTooLarge
				}
				c.sendError(0, code, err.Error())
				break
			}
			l.frame(c, h, body)
			if ev.Assembled {
				// The payloads of a publish run alias the Reader's
				// buffer, which goes back to the pool now: a quiet
				// connection holds no reassembly memory.
				l.flushRun()
				w.rd.Release()
			}
		case ws.OpPing:
			if !w.closeQueued {
				w.post = ws.AppendFrame(w.post, ws.OpPong, ev.Payload)
				c.markDirty()
			}
		case ws.OpClose:
			// The client ends the session: answer its close (RFC 6455
			// 5.5.1) and close after the flush.
			code := ev.Code
			if code == ws.CodeNoStatus {
				code = ws.CodeNormal
			}
			c.wsClose(code, "")
		}
	}
	l.flushRun()
	if c.closing {
		off = len(buf)
	}
	l.stats.bytesIn += uint64(off)
	if off > 0 {
		_, _ = c.gc.Discard(off) // never Discard(0): see traffic
	}
	if upgraded {
		// FrameTimeout: a message must be whole once its first byte came,
		// however it is cut (a frame's bytes dripped, or a fragmented
		// message continued one small fragment at a time; the control
		// frames a client may interleave do not complete it). Before
		// the upgrade the handshake timeout bounds the request.
		pending := len(buf) - off
		if w.rd.InMessage() {
			pending++
		}
		c.notePartial(l.now, pending, progressed)
	}
	l.end()
	return gnet.None
}

// wsUpgrade handles the upgrade request at the start of buf and returns
// the bytes it consumed.
func (l *loop) wsUpgrade(c *conn, buf []byte) int {
	w := c.ws
	req, n, err := ws.ParseRequest(buf, ws.MaxRequest)
	if err == ws.ErrIncomplete {
		return 0
	}
	var he *ws.HandshakeError
	switch {
	case errors.As(err, &he):
		c.wsRefuse(he.Status, he.Msg)
		return len(buf)
	case err != nil:
		c.wsRefuse(400, err.Error())
		return len(buf)
	case !ws.OriginAllowed(req.Origin, req.Host, l.srv.opts.WSOrigins):
		c.wsRefuse(403, fmt.Sprintf("origin %q is not allowed (ws-origins)", req.Origin))
		return len(buf)
	case c.sec.addr == addrHTTPHeaders && !l.wsAddrHeaders(c, &req):
		return len(buf) // refused by the per-address limit
	}
	w.up = true
	w.pre = ws.AppendAccept(w.pre, &req, req.SelectProtocol())
	c.markDirty()
	return n
}

// wsRefuse answers a connection that is not (yet) a WebSocket with an
// HTTP error and closes it after the flush.
func (c *conn) wsRefuse(status int, msg string) {
	if c.closing || c.closed {
		return
	}
	c.l.srv.countReject(RejectWSUpgrade)
	c.ws.pre = ws.AppendReject(c.ws.pre, status, msg)
	c.closing = true
	c.markDirty()
	c.l.closeAfterFlush = append(c.l.closeAfterFlush, c)
}

// wsClose queues a close frame after the pending output and closes the
// connection after the flush; nothing is sent after it.
func (c *conn) wsClose(code ws.Code, reason string) {
	w := c.ws
	if !w.closeQueued {
		w.closeQueued = true
		w.post = ws.AppendClose(w.post, code, reason)
		c.markDirty()
	}
	if !c.closing && !c.closed {
		c.closing = true
		c.l.closeAfterFlush = append(c.l.closeAfterFlush, c)
	}
}

// wsCloseCode is the close code that follows a fatal ERROR.
func wsCloseCode(code wire.Code) ws.Code {
	switch code {
	case wire.CodeProtocolError:
		return ws.CodeProtocolError
	case wire.CodeFrameTooLarge:
		return ws.CodeTooBig
	case wire.CodeShuttingDown:
		return ws.CodeGoingAway
	}
	return ws.CodePolicyViolation
}

// wsHTTPStatus is the HTTP status that refuses a connection still in its
// upgrade with an ERROR code (handshake timeout, limits, shutdown).
func wsHTTPStatus(code wire.Code) int {
	if code == wire.CodeHandshakeTimeout {
		return 408
	}
	return 503
}

// pendingRaw reports whether raw output waits to be flushed.
func (w *wsConn) pendingRaw() bool { return len(w.pre) > 0 || len(w.post) > 0 }

// wrap returns the vectors to write for the pending output iov (whole
// protocol frames, possibly several in one vector or one frame over
// several): pre, then each frame as one binary message, then post. The
// result is valid until the next wrap; the caller resets pre and post
// after writing.
func (w *wsConn) wrap(iov [][]byte) [][]byte {
	out := w.out[:0]
	if len(w.pre) > 0 {
		out = append(out, w.pre)
	}
	if w.up && !w.closeSent && len(iov) > 0 {
		lens := w.lens[:0]
		for i, j := 0, 0; i < len(iov); {
			var lb [4]byte
			if !gather(iov, i, j, lb[:]) {
				break // cannot happen: output holds whole frames only
			}
			fl := wire.HeaderLen + int(binary.BigEndian.Uint32(lb[:]))
			lens = append(lens, fl)
			i, j = advance(iov, i, j, fl)
		}
		hdrs := w.hdrs[:0]
		if need := len(lens) * 10; cap(hdrs) < need {
			hdrs = make([]byte, 0, need) // never reallocated below: out aliases it
		}
		i, j := 0, 0
		for _, fl := range lens {
			s := len(hdrs)
			hdrs = ws.AppendHeader(hdrs, true, ws.OpBinary, fl, nil)
			out = append(out, hdrs[s:len(hdrs):len(hdrs)])
			for fl > 0 && i < len(iov) {
				e := iov[i][j:]
				k := min(len(e), fl)
				if k > 0 {
					out = append(out, e[:k:k])
				}
				fl -= k
				if j += k; j == len(iov[i]) {
					i, j = i+1, 0
				}
			}
		}
		w.lens, w.hdrs = lens, hdrs
	}
	if len(w.post) > 0 {
		out = append(out, w.post)
	}
	if w.closeQueued {
		w.closeSent = true
	}
	w.out = out
	return out
}

// written resets the raw output after a flush.
func (w *wsConn) written() {
	w.pre, w.post = w.pre[:0], w.post[:0]
	clear(w.out)
	w.out = w.out[:0]
}

// gather copies len(dst) bytes starting at iov[i][j] into dst; false if
// the vectors end first.
func gather(iov [][]byte, i, j int, dst []byte) bool {
	n := 0
	for n < len(dst) && i < len(iov) {
		k := copy(dst[n:], iov[i][j:])
		n += k
		i, j = i+1, 0
	}
	return n == len(dst)
}

// advance moves the cursor (i, j) n bytes on.
func advance(iov [][]byte, i, j, n int) (int, int) {
	for n > 0 && i < len(iov) {
		k := min(len(iov[i])-j, n)
		n -= k
		if j += k; j == len(iov[i]) {
			i, j = i+1, 0
		}
	}
	for i < len(iov) && j == len(iov[i]) { // skip empty vectors
		i, j = i+1, 0
	}
	return i, j
}

// wsAcceptor is the plain (ws://) WebSocket listener: one goroutine that
// accepts and enrolls each connection into a gnet loop.
type wsAcceptor struct {
	s    *Server
	ln   net.Listener
	done chan struct{}
}

// WSAddr returns the address of the WebSocket listener ("" without one),
// with the port chosen when Options.WSListen had port 0.
func (s *Server) WSAddr() string { return s.wsAddr }

// WSURL returns the URL browsers connect to: ws://ADDR/ or wss://ADDR/
// ("" without a WebSocket listener).
func (s *Server) WSURL() string {
	if s.wsAddr == "" {
		return ""
	}
	if s.wsTLS {
		return "wss://" + s.wsAddr + "/"
	}
	return "ws://" + s.wsAddr + "/"
}

// startWS opens the listener of Options.WSListen.
func (s *Server) startWS() error {
	if s.opts.WSListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.opts.WSListen)
	if err != nil {
		return fmt.Errorf("engine: WebSocket listen on %s: %w", s.opts.WSListen, err)
	}
	select { // see tlsGnetOptions
	case <-s.loopsUp:
	case <-s.done:
		_ = ln.Close()
		return errors.New("engine: stopped while starting")
	}
	s.wsAddr = ln.Addr().String()
	if s.opts.tlsConfigured() {
		cfg, err := loadTLSConfig(&s.opts)
		if err != nil {
			_ = ln.Close()
			return err
		}
		b := &tlsBridge{s: s, ln: ln, cfg: cfg, sem: make(chan struct{}, maxTLSHandshakes), addr: s.wsAddr, ws: true}
		s.wsTLS, s.wssBr = true, b
		b.wg.Add(1)
		s.owned.Go(b.accept, b.wg.Done)
	} else {
		a := &wsAcceptor{s: s, ln: ln, done: make(chan struct{})}
		s.wsAcc = a
		s.owned.Go(a.accept, func() { close(a.done) })
	}
	s.log.Info("sluice WebSocket listening", "url", s.WSURL())
	return nil
}

// stopWSAccept closes the WebSocket listener: no new WebSocket clients.
func (s *Server) stopWSAccept() {
	if s.wsAcc != nil {
		_ = s.wsAcc.ln.Close()
		<-s.wsAcc.done
	}
	if s.wssBr != nil {
		_ = s.wssBr.ln.Close()
	}
}

func (a *wsAcceptor) accept() {
	var delay time.Duration
	for {
		raw, err := a.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), wsMaxBackoff)
			a.s.log.Warn("WebSocket accept", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		ctx := gnet.NewNetConnContext(context.Background(), raw)
		ctx = gnet.NewContext(ctx, &bridged{ip: hostOf(raw.RemoteAddr()), ws: true})
		res, err := a.s.eng.Register(ctx)
		if err == nil {
			// gnet duplicates raw's descriptor and closes raw itself.
			err = (<-res).Err
		}
		if err != nil {
			a.s.log.Warn("WebSocket: register with the engine", "remote", raw.RemoteAddr(), "err", err)
			_ = raw.Close()
		}
	}
}

// wsFlush is flush for a WebSocket connection: the output wrapped into
// messages, written with conn.writev.
func (c *conn) wsFlush() {
	if c.closed || (len(c.iov) == 0 && !c.ws.pendingRaw()) {
		return
	}
	vecs := c.ws.wrap(c.iov)
	n := 0
	for _, v := range vecs {
		n += len(v)
	}
	c.writev(vecs)
	c.l.stats.bytesOut += uint64(n)
	c.ws.written()
}
