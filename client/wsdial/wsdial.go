// Package wsdial connects to Sluice's WebSocket gateway from Go: Dial
// returns a net.Conn that carries the protocol v1 byte stream, each frame
// written is sent as one binary WebSocket message (PROTOCOL.md section 10), so
// the Go SDK runs over WebSocket unchanged:
//
//	c, err := client.Dial(ctx, "ws://127.0.0.1:7001/",
//		client.WithDialer(wsdial.Dialer(wsdial.Options{})))
//
// The node addresses a server lists in WELCOME, which the SDK adds to its
// reconnect list, are TCP addresses: this dialer refuses them (they are no
// ws:// URLs) and the SDK goes on to the URLs it was given. Give every
// gateway URL to client.Dial, comma-separated.
//
// It exists for Go programs that can reach Sluice only through an HTTP
// proxy or load balancer that passes WebSocket, and for the benchmarks
// and tests of the gateway. Browsers and Node.js use the TypeScript SDK.
package wsdial

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/sluice-rtm/sluice/wire"
	"github.com/sluice-rtm/sluice/ws"
)

// DefaultMaxMessage bounds a message from the server unless
// Options.MaxMessage says otherwise: a frame of the largest body a
// server may announce (wire.MaxBodyFor of a 16 MiB payload) fits.
const DefaultMaxMessage = 17 << 20

// Options configure Dial. The zero value dials ws:// and wss:// URLs
// without an Origin.
type Options struct {
	// Origin is sent as the Origin header ("" = none, as non-browser
	// clients do).
	Origin string
	// TLSConfig is used for wss:// (nil = the system roots, ServerName
	// from the URL).
	TLSConfig *tls.Config
	// Header holds extra request headers.
	Header http.Header
	// MaxMessage bounds a message from the server (0 = DefaultMaxMessage).
	MaxMessage int
	// Dialer dials the TCP connection (nil = a net.Dialer).
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Dialer adapts Dial to client.WithDialer: addr is the URL given to
// client.Dial ("ws://host:port/path" or "wss://...").
func Dialer(o Options) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) { return Dial(ctx, addr, o) }
}

// ErrHandshake is wrapped by the errors of a refused upgrade.
var ErrHandshake = errors.New("wsdial: upgrade refused")

// Dial connects to rawURL and completes the WebSocket upgrade, bounded by
// ctx. The returned Conn is safe for one reader and one writer at a time
// concurrently (Read and Write each take their own lock).
func Dial(ctx context.Context, rawURL string, o Options) (*Conn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("wsdial: %w", err)
	}
	secure := false
	switch u.Scheme {
	case "ws":
	case "wss":
		secure = true
	default:
		return nil, fmt.Errorf("wsdial: %q: scheme must be ws or wss", rawURL)
	}
	host := u.Host
	if u.Port() == "" {
		if secure {
			host = net.JoinHostPort(u.Hostname(), "443")
		} else {
			host = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	dial := o.Dialer
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	nc, err := dial(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	if secure {
		cfg := o.TLSConfig.Clone()
		if cfg == nil {
			cfg = &tls.Config{}
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	c, err := handshake(nc, u, o)
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

func handshake(nc net.Conn, u *url.URL, o Options) (*Conn, error) {
	var kb [16]byte
	_, _ = rand.Read(kb[:])
	key := base64.StdEncoding.EncodeToString(kb[:])
	path := u.RequestURI()
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: %s\r\n", path, u.Host, key, ws.Subprotocol)
	if o.Origin != "" {
		fmt.Fprintf(&b, "Origin: %s\r\n", o.Origin)
	}
	for k, vs := range o.Header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(nc, b.String()); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 4096)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		return nil, fmt.Errorf("wsdial: reading the upgrade answer: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%w: %s: %s", ErrHandshake, resp.Status, strings.TrimSpace(string(body)))
	}
	if got := resp.Header.Get("Sec-WebSocket-Accept"); got != ws.AcceptKey(key) {
		return nil, fmt.Errorf("%w: Sec-WebSocket-Accept %q does not match the key", ErrHandshake, got)
	}
	limit := o.MaxMessage
	if limit <= 0 {
		limit = DefaultMaxMessage
	}
	c := &Conn{nc: nc, rd: ws.Reader{Max: limit, Client: true}}
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	c.rng = mrand.NewChaCha8(seed)
	// Bytes the bufio.Reader read past the answer are the first frames.
	if n := br.Buffered(); n > 0 {
		c.rbuf = make([]byte, n, max(n, 64<<10))
		_, _ = io.ReadFull(br, c.rbuf)
		c.raw = c.rbuf
	}
	return c, nil
}

// Conn is a WebSocket connection carrying the protocol byte stream.
// Write takes whole or partial protocol frames and sends each complete
// frame as one masked binary message; Read returns the payloads of the
// server's binary messages in order, answering pings on the way.
type Conn struct {
	nc net.Conn

	rmu  sync.Mutex
	rd   ws.Reader
	rbuf []byte // read buffer; raw is its undecoded part
	raw  []byte
	msg  []byte // message bytes not yet returned
	rerr error

	wmu   sync.Mutex
	wpend []byte // written bytes that do not yet make a whole frame
	rng   *mrand.ChaCha8
	wdone bool // a close frame was sent
}

// Read implements net.Conn.
func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		if len(c.msg) > 0 {
			n := copy(p, c.msg)
			c.msg = c.msg[n:]
			return n, nil
		}
		if c.rerr != nil {
			return 0, c.rerr
		}
		for len(c.raw) > 0 && len(c.msg) == 0 && c.rerr == nil {
			ev, n, err := c.rd.Next(c.raw)
			if err == ws.ErrIncomplete {
				break
			}
			if err != nil {
				_ = c.control(ws.OpClose, ws.ClosePayload(ws.CodeOf(err), ""))
				c.rerr = fmt.Errorf("wsdial: %w", err)
				break
			}
			c.raw = c.raw[n:]
			switch ev.Op {
			case ws.OpBinary:
				c.msg = ev.Payload // valid until raw is compacted or Next runs again
			case ws.OpText:
				c.rerr = errors.New("wsdial: the server sent a text message")
			case ws.OpPing:
				_ = c.control(ws.OpPong, ev.Payload)
			case ws.OpClose:
				_ = c.control(ws.OpClose, ws.ClosePayload(ev.Code, ""))
				c.rerr = &CloseError{Code: ev.Code, Reason: ev.Reason}
			}
		}
		if len(c.msg) > 0 || c.rerr != nil {
			continue
		}
		// Need more bytes: keep the undecoded tail at the front.
		k := copy(c.rbuf, c.raw)
		if k == cap(c.rbuf) {
			c.rbuf = append(c.rbuf[:k], make([]byte, max(64<<10, k))...)
		}
		c.rbuf = c.rbuf[:cap(c.rbuf)]
		if len(c.rbuf) == 0 {
			c.rbuf = make([]byte, 64<<10)
		}
		n, err := c.nc.Read(c.rbuf[k:])
		c.raw = c.rbuf[:k+n]
		if err != nil && n == 0 {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // no close frame came
			}
			c.rerr = err
		}
	}
}

// CloseError is the error Read returns after the server's close frame.
type CloseError struct {
	Code   ws.Code
	Reason string
}

func (e *CloseError) Error() string {
	return fmt.Sprintf("wsdial: closed by the server with %d %q", e.Code, e.Reason)
}

// Write implements net.Conn: every complete protocol frame in the bytes
// written so far is sent as one binary message.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wdone {
		return 0, net.ErrClosed
	}
	buf := p
	if len(c.wpend) > 0 {
		c.wpend = append(c.wpend, p...)
		buf = c.wpend
	}
	// The masked messages are built in a buffer of the process-wide
	// bytebufferpool, put back after the socket write: a connection holds
	// no output memory between writes (BENCHMARKS.md, "bytebufferpool").
	bb := bytebufferpool.Get()
	defer bytebufferpool.Put(bb)
	out := bb.B[:0]
	off := 0
	for {
		_, _, n, err := wire.Split(buf[off:], 1<<31)
		if err == wire.ErrIncomplete {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("wsdial: not a protocol frame: %w", err)
		}
		out = ws.AppendMaskedFrame(out, true, ws.OpBinary, buf[off:off+n], c.key())
		off += n
	}
	bb.B = out
	if len(out) > 0 {
		if _, err := c.nc.Write(out); err != nil {
			return 0, err
		}
	}
	rest := buf[off:]
	if len(rest) > 0 || len(c.wpend) > 0 {
		c.wpend = append(c.wpend[:0], rest...)
	}
	return len(p), nil
}

func (c *Conn) key() [4]byte {
	v := c.rng.Uint64()
	return [4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
}

// control sends a control frame (pong, close); safe from Read.
func (c *Conn) control(op ws.Op, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wdone {
		return nil
	}
	if op == ws.OpClose {
		c.wdone = true
	}
	_, err := c.nc.Write(ws.AppendMaskedFrame(nil, true, op, payload, c.key()))
	return err
}

// Close sends a close frame (1000) and closes the connection.
func (c *Conn) Close() error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	_ = c.control(ws.OpClose, ws.ClosePayload(ws.CodeNormal, ""))
	return c.nc.Close()
}

// CloseWith sends a close frame with code and reason and closes the
// connection (for tests of the server's handling).
func (c *Conn) CloseWith(code ws.Code, reason string) error {
	_ = c.control(ws.OpClose, ws.ClosePayload(code, reason))
	return c.nc.Close()
}

// NetConn returns the underlying connection (to send raw bytes in tests).
func (c *Conn) NetConn() net.Conn { return c.nc }

func (c *Conn) LocalAddr() net.Addr                { return c.nc.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr               { return c.nc.RemoteAddr() }
func (c *Conn) SetDeadline(t time.Time) error      { return c.nc.SetDeadline(t) }
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.nc.SetReadDeadline(t) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.nc.SetWriteDeadline(t) }
