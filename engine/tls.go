package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// TLS for clients.
//
// gnet has no TLS, and its loops must never block on a handshake or on
// crypto. So TLS connections are terminated outside the loops and bridged
// in as plain byte streams:
//
//	client ==TLS==> tlsBridge.ln (net.Listener, crypto/tls)
//	                  | handshake on the accepting goroutine's child,
//	                  | bounded by HandshakeTimeout
//	                  v
//	          socketpair(AF_UNIX): "ours" <-> "theirs"
//	          theirs is enrolled in a gnet loop (Engine.Register), with
//	          the client's IP in the gnet context (per-address limits)
//	          two goroutines copy tls->ours and ours->tls
//
// From then on the engine cannot tell the connection from a TCP one. The
// cost is two goroutines, two 32 KiB buffers and one extra copy through
// the kernel per direction; bench-tls.md measures it.

// bridgeBuf is the copy buffer of one direction of a bridge.
const bridgeBuf = 32 << 10

// maxTLSHandshakes bounds TLS handshakes in progress, so that a flood of
// connections that never finish one cannot make the server start an
// unbounded number of goroutines.
const maxTLSHandshakes = 1024

// bridgeWriteTimeout closes a bridge whose TLS client stops reading: its
// pending output is already bounded by the engine's OutboundLimit, this
// frees the goroutine.
const bridgeWriteTimeout = time.Minute

// tlsGnetOptions are the gnet options the TLS bridge and the cluster's
// node links need (both enroll connections). Enrolling a
// connection (Engine.Register) picks a loop with gnet's load balancer from
// the bridge's (or the link dialer's) goroutines, concurrently with gnet's
// own acceptor: the round-robin balancer keeps an unsynchronised counter,
// the least-connections one only reads atomic counts, so such a server
// uses the latter. The ticker's first call (OnTick) tells them that gnet
// has registered its loops (the balancer's list is
// written before the ticker goroutine starts).
func (s *Server) tlsGnetOptions() []gnet.Option {
	if s.opts.TLSListen == "" && s.opts.WSListen == "" && s.opts.Cluster == nil {
		return nil // nothing is ever enrolled: gnet's defaults
	}
	s.loopsUp = make(chan struct{})
	return []gnet.Option{gnet.WithLoadBalancing(gnet.LeastConnections), gnet.WithTicker(true)}
}

// OnTick is gnet's ticker callback, enabled only with a TLS listener: its
// first call closes loopsUp; it then asks not to be called again soon.
func (h *handler) OnTick() (time.Duration, gnet.Action) {
	if h.srv.loopsUp != nil {
		h.srv.loopsUpOnce.Do(func() { close(h.srv.loopsUp) })
	}
	return 24 * time.Hour, gnet.None
}

// tlsBridge is the TLS listener and its bridges.
type tlsBridge struct {
	s    *Server
	ln   net.Listener
	cfg  *tls.Config
	sem  chan struct{}
	wg   sync.WaitGroup // acceptor, handshakes and copy goroutines
	addr string
	ws   bool // the WebSocket listener's (wss://): enrolled as WebSocket
}

// TLSAddr returns the address of the TLS listener ("" without one), with
// the port chosen when Options.TLSListen had port 0.
func (s *Server) TLSAddr() string {
	if s.tlsBr == nil {
		return ""
	}
	return s.tlsBr.addr
}

// loadTLSConfig returns the server's TLS configuration: Options.TLSConfig,
// or one with the certificate of TLSCertFile/TLSKeyFile, TLS 1.2 or later.
func loadTLSConfig(o *Options) (*tls.Config, error) {
	if o.TLSConfig != nil {
		return o.TLSConfig.Clone(), nil
	}
	cert, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("engine: TLS certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// startTLS opens the TLS listener of Options.TLSListen.
func (s *Server) startTLS() error {
	if s.opts.TLSListen == "" {
		return nil
	}
	cfg, err := loadTLSConfig(&s.opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.opts.TLSListen)
	if err != nil {
		return fmt.Errorf("engine: TLS listen on %s: %w", s.opts.TLSListen, err)
	}
	b := &tlsBridge{s: s, ln: ln, cfg: cfg, sem: make(chan struct{}, maxTLSHandshakes), addr: ln.Addr().String()}
	s.tlsBr = b
	select { // see tlsGnetOptions
	case <-s.loopsUp:
	case <-s.done:
		_ = ln.Close()
		return errors.New("engine: stopped while starting")
	}
	b.wg.Add(1)
	s.owned.Go(b.accept, b.wg.Done)
	s.log.Info("sluice TLS listening", "addr", b.addr)
	return nil
}

// stopTLSAccept closes the TLS listener: no new TLS clients.
func (s *Server) stopTLSAccept() {
	if s.tlsBr != nil {
		_ = s.tlsBr.ln.Close()
	}
}

// waitTLS waits (at most until ctx ends) for the bridges to end; they end
// when the engine closes their connections.
func (s *Server) waitTLS(ctx context.Context) {
	if s.tlsBr == nil {
		return
	}
	done := make(chan struct{})
	s.owned.Go(s.tlsBr.wg.Wait, func() { close(done) })
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// waitWSS is waitTLS for the wss:// listener's bridges.
func (s *Server) waitWSS(ctx context.Context) {
	if s.wssBr == nil {
		return
	}
	done := make(chan struct{})
	s.owned.Go(s.wssBr.wg.Wait, func() { close(done) })
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (b *tlsBridge) accept() {
	var delay time.Duration
	for {
		raw, err := b.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary (e.g. out of file descriptors): back off.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			b.s.log.Warn("TLS accept", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		select {
		case b.sem <- struct{}{}:
		default:
			b.s.countReject(RejectTLSHandshake)
			_ = raw.Close()
			continue
		}
		b.wg.Add(1)
		b.s.owned.Go(func() { b.serve(raw) }, b.wg.Done)
	}
}

// serve completes the TLS handshake of raw and bridges it into the engine.
func (b *tlsBridge) serve(raw net.Conn) {
	s := b.s
	deadline := time.Now().Add(s.opts.HandshakeTimeout)
	ip, in := hostOf(raw.RemoteAddr()), raw
	if s.trusted.Contains(parseAddr(ip)) {
		var err error
		if ip, in, err = readProxyHeader(raw, ip, deadline); err != nil {
			<-b.sem
			s.countReject(RejectTLSHandshake)
			s.log.Debug("PROXY header before TLS", "remote", raw.RemoteAddr(), "err", err)
			_ = raw.Close()
			return
		}
	}
	tc := tls.Server(in, b.cfg)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	err := tc.HandshakeContext(ctx)
	cancel()
	<-b.sem
	if err != nil {
		s.countReject(RejectTLSHandshake)
		s.log.Debug("TLS handshake failed", "remote", raw.RemoteAddr(), "err", err)
		_ = raw.Close()
		return
	}
	ours, err := b.enroll(&bridged{ip: ip, tls: true, ws: b.ws})
	if err != nil {
		s.log.Warn("TLS bridge", "remote", raw.RemoteAddr(), "err", err)
		_ = tc.Close()
		return
	}
	b.wg.Add(1)
	s.owned.Go(func() { b.copyIn(tc, ours) }, b.wg.Done)
	b.copyOut(ours, tc)
}

// enroll creates a socket pair, hands one end to a gnet loop (with br as
// its context) and returns the other.
func (b *tlsBridge) enroll(br *bridged) (*net.UnixConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	ours, err1 := fileConn(fds[0], "sluice-tls-bridge")
	theirs, err2 := fileConn(fds[1], "sluice-tls-engine")
	if err := errors.Join(err1, err2); err != nil {
		closeAll(ours, theirs)
		return nil, err
	}
	ctx := gnet.NewNetConnContext(context.Background(), theirs)
	ctx = gnet.NewContext(ctx, br)
	res, err := b.s.eng.Register(ctx)
	if err != nil {
		closeAll(ours, theirs)
		return nil, fmt.Errorf("register with the engine: %w", err)
	}
	// gnet duplicates theirs' descriptor and closes theirs itself.
	if r := <-res; r.Err != nil {
		closeAll(ours, theirs)
		return nil, fmt.Errorf("register with the engine: %w", r.Err)
	}
	return ours, nil
}

func fileConn(fd int, name string) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close() // FileConn duplicates the descriptor
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("socketpair end is a %T", c)
	}
	return uc, nil
}

func closeAll(cs ...*net.UnixConn) {
	for _, c := range cs {
		if c != nil {
			_ = c.Close()
		}
	}
}

// copyIn copies the client's decrypted bytes to the engine. When the
// client is done (or the bridge is torn down) the engine sees end of
// stream.
func (b *tlsBridge) copyIn(tc *tls.Conn, ours *net.UnixConn) {
	buf := make([]byte, bridgeBuf)
	for {
		n, err := tc.Read(buf)
		if n > 0 {
			if _, werr := ours.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = ours.CloseWrite()
}

// copyOut copies the engine's output to the client, encrypted, until the
// engine closes its end; then it closes the TLS connection (which also
// ends copyIn) and the bridge.
func (b *tlsBridge) copyOut(ours *net.UnixConn, tc *tls.Conn) {
	buf := make([]byte, bridgeBuf)
	for {
		n, err := ours.Read(buf)
		if n > 0 {
			_ = tc.SetWriteDeadline(time.Now().Add(bridgeWriteTimeout))
			if _, werr := tc.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = tc.Close()
	_ = ours.Close()
}
