package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
)

// The raw byte relay is the baseline a pub/sub server's 1:1 delivery is
// measured against: a server that copies the bytes a publisher's socket
// delivers to the subscribers' sockets of the same channel, without parsing
// them, storing them or giving them positions. What a real server delivers
// per second, as a share of what the relay delivers on the same machine, is
// the cost of everything it does besides moving bytes.
//
// Its protocol: a client's first line is "P <channel>\n" (publisher) or
// "S <channel>\n" (subscriber), which the relay answers with "+\n" once
// the subscriber is registered; from then on, a publisher's bytes are
// copied to every subscriber of the channel connected at that moment. The relay
// driver frames messages as a 4-byte big-endian length and the payload,
// which only its subscribers parse.

// relayBuf is the relay's copy buffer and the driver's write buffer.
const relayBuf = 64 << 10

// ServeRelay accepts relay clients on ln until it is closed. Each
// connection has one goroutine; a publisher's goroutine writes to its
// channel's subscribers in turn (a subscriber that does not read stalls
// its publisher: a baseline has no slow-consumer policy).
func ServeRelay(ln net.Listener) error {
	r := &relay{subs: make(map[string][]net.Conn)}
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go r.serve(c)
	}
}

type relay struct {
	mu   sync.Mutex
	subs map[string][]net.Conn
}

func (r *relay) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, relayBuf)
	line, err := br.ReadString('\n')
	if err != nil || len(line) > 256 {
		return
	}
	role, ch, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	if !ok {
		return
	}
	switch role {
	case "S":
		r.mu.Lock()
		r.subs[ch] = append(r.subs[ch], c)
		r.mu.Unlock()
		if _, err := c.Write([]byte("+\n")); err != nil { // registered
			return
		}
		_, _ = io.Copy(io.Discard, br) // until the subscriber closes
		r.mu.Lock()
		list := r.subs[ch]
		for i, s := range list {
			if s == c {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(r.subs, ch)
		} else {
			r.subs[ch] = list
		}
		r.mu.Unlock()
	case "P":
		buf := make([]byte, relayBuf)
		var out []net.Conn
		for {
			n, err := br.Read(buf)
			if n > 0 {
				r.mu.Lock()
				out = append(out[:0], r.subs[ch]...)
				r.mu.Unlock()
				for _, s := range out {
					_, _ = s.Write(buf[:n])
				}
			}
			if err != nil {
				return
			}
		}
	}
}

// RelayDriver drives a relay (ServeRelay) at Addr: fire-and-forget
// publish and live subscriptions only.
type RelayDriver struct {
	Addr string
}

// Name returns "relay".
func (d *RelayDriver) Name() string { return "relay" }

// Connect returns a client; it dials once per role (the first Publish's
// channel, and each Subscribe).
func (d *RelayDriver) Connect(context.Context) (Client, error) {
	return &relayClient{addr: d.Addr}, nil
}

type relayClient struct {
	addr string
	// publisher side, used by one goroutine at a time
	pub   net.Conn
	pubW  *bufio.Writer
	pubCh string
	hdr   [4]byte

	mu   sync.Mutex
	subs []*relaySub
}

func (c *relayClient) dial(ctx context.Context, role, ch string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, fmt.Errorf("bench: relay dial %s: %w", c.addr, err)
	}
	if _, err := fmt.Fprintf(nc, "%s %s\n", role, ch); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// Publish writes one framed message; a client publishes to one channel.
func (c *relayClient) Publish(ctx context.Context, ch string, p []byte) error {
	if c.pub == nil {
		nc, err := c.dial(ctx, "P", ch)
		if err != nil {
			return err
		}
		c.pub, c.pubW, c.pubCh = nc, bufio.NewWriterSize(nc, relayBuf), ch
	}
	if ch != c.pubCh {
		return fmt.Errorf("%w: a relay client publishes to one channel", ErrUnsupported)
	}
	binary.BigEndian.PutUint32(c.hdr[:], uint32(len(p)))
	if _, err := c.pubW.Write(c.hdr[:]); err != nil {
		return err
	}
	_, err := c.pubW.Write(p)
	return err
}

func (c *relayClient) PublishAcked(context.Context, string, []byte) error { return ErrUnsupported }
func (c *relayClient) PublishAsync(context.Context, string, []byte, func(error)) error {
	return ErrUnsupported
}

// Flush writes what is buffered (the relay has no acknowledgements).
func (c *relayClient) Flush(context.Context) error {
	if c.pubW == nil {
		return nil
	}
	return c.pubW.Flush()
}

// Subscribe opens a subscriber connection whose goroutine parses the
// frames and calls h.
func (c *relayClient) Subscribe(ctx context.Context, ch string, start Start, h Handler) (Sub, error) {
	if start != StartLive {
		return nil, ErrUnsupported
	}
	nc, err := c.dial(ctx, "S", ch)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(nc, relayBuf)
	if line, err := br.ReadString('\n'); err != nil || line != "+\n" {
		nc.Close()
		return nil, fmt.Errorf("bench: relay did not register the subscriber: %q %v", line, err)
	}
	s := &relaySub{nc: nc, done: make(chan struct{})}
	c.mu.Lock()
	c.subs = append(c.subs, s)
	c.mu.Unlock()
	go s.loop(br, h)
	return s, nil
}

// Close closes the client's connections.
func (c *relayClient) Close() error {
	if c.pub != nil {
		_ = c.pubW.Flush()
		c.pub.Close()
	}
	c.mu.Lock()
	subs := c.subs
	c.mu.Unlock()
	for _, s := range subs {
		_ = s.Close()
	}
	return nil
}

type relaySub struct {
	nc      net.Conn
	done    chan struct{}
	closing atomic.Bool
	err     atomic.Pointer[error]
}

func (s *relaySub) loop(br *bufio.Reader, h Handler) {
	defer close(s.done)
	var hdr [4]byte
	var p []byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			s.fail(err)
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if n > 16<<20 {
			s.fail(fmt.Errorf("bench: relay frame of %d bytes", n))
			return
		}
		if cap(p) < n {
			p = make([]byte, n)
		}
		if _, err := io.ReadFull(br, p[:n]); err != nil {
			s.fail(err)
			return
		}
		h(p[:n])
	}
}

func (s *relaySub) fail(err error) {
	if !s.closing.Load() {
		s.err.Store(&err)
	}
}

func (s *relaySub) Dropped() uint64 { return 0 }

func (s *relaySub) Err() error {
	if e := s.err.Load(); e != nil {
		return *e
	}
	return nil
}

func (s *relaySub) Close() error {
	s.closing.Store(true)
	err := s.nc.Close()
	<-s.done
	return err
}
