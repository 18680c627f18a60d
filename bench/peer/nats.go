package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-rtm/sluice/bench"
)

// StreamName is the JetStream stream the JetStream driver creates; it
// captures every subject under StreamSubjects (bench channel names start
// with "bench.").
const (
	StreamName     = "SLUICEBENCH"
	StreamSubjects = "bench.>"
)

// NATSDriver drives a NATS server with nats.go. Without JetStream it is
// NATS core: Publish is fire-and-forget, Flush a PING round trip, and
// acknowledged publishes and replay are bench.ErrUnsupported. Its fields
// are read by Connect and must not change during a run.
type NATSDriver struct {
	// URL is the server, e.g. "nats://127.0.0.1:4222".
	URL string
	// Dial, if set, replaces the TCP dialer (e.g. bench.LoopbackDialer).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// js is set by NewJetStreamDriver.
	jetStream bool
	// liveStream, if set (JetStreamStreamNode), makes StartLive
	// subscriptions ordered consumers of this stream from its next
	// message, and StartEarliest ones read it instead of StreamName.
	liveStream string
}

// Name returns "nats", or "nats-js" for the JetStream driver.
func (d *NATSDriver) Name() string {
	if d.jetStream {
		return "nats-js"
	}
	return "nats"
}

// JetStreamDriver is a NATSDriver whose acknowledged publishes go to a
// JetStream memory stream and whose StartEarliest subscriptions are ordered
// consumers of it. Its stream captures StreamSubjects, so core publishes to
// those subjects are stored too while it exists: Close it (which deletes
// the stream) before running core scenarios.
type JetStreamDriver struct {
	NATSDriver
	nc *nats.Conn
	js jetstream.JetStream
}

// NewJetStreamDriver connects to url and creates (or recreates, empty) the
// memory stream StreamName.
func NewJetStreamDriver(ctx context.Context, url string) (*JetStreamDriver, error) {
	nc, js, err := adminJetStream(url)
	if err != nil {
		return nil, err
	}
	_ = js.DeleteStream(ctx, StreamName)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: StreamName, Subjects: []string{StreamSubjects}, Storage: jetstream.MemoryStorage,
	}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("peer: create stream: %w", err)
	}
	return &JetStreamDriver{NATSDriver: NATSDriver{URL: url, jetStream: true}, nc: nc, js: js}, nil
}

// Close deletes the stream and closes the admin connection.
func (d *JetStreamDriver) Close(ctx context.Context) error {
	err := d.js.DeleteStream(ctx, StreamName)
	d.nc.Close()
	return err
}

// natsDialer adapts a context dialer to nats.CustomDialer.
type natsDialer struct {
	dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Dial implements nats.CustomDialer with a 10 s bound.
func (n natsDialer) Dial(network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return n.dial(ctx, addr)
}

// Connect opens one nats.go connection without reconnection.
func (d *NATSDriver) Connect(ctx context.Context) (bench.Client, error) {
	c := &natsClient{}
	opts := []nats.Option{nats.Name("sluice-bench"), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { c.setErr(err) })}
	if d.Dial != nil {
		opts = append(opts, nats.SetCustomDialer(natsDialer{d.Dial}))
	}
	if dl, ok := ctx.Deadline(); ok {
		opts = append(opts, nats.Timeout(time.Until(dl)))
	}
	nc, err := nats.Connect(d.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("peer: nats connect %s: %w", d.URL, err)
	}
	c.nc = nc
	if d.jetStream {
		c.stream, c.liveStream = StreamName, d.liveStream != ""
		if c.liveStream {
			c.stream = d.liveStream
		}
		c.pending = make(map[*nats.Msg]func(error))
		c.js, err = jetstream.New(nc,
			jetstream.WithPublishAsyncMaxPending(4096),
			jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) { c.asyncDone(m, nil) }),
			jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) { c.asyncDone(m, err) }))
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("peer: jetstream: %w", err)
		}
	}
	return c, nil
}

// natsClient is one nats.go connection (plus its JetStream context).
type natsClient struct {
	nc *nats.Conn
	js jetstream.JetStream // nil for core
	// stream is what ordered consumers read; liveStream: StartLive
	// subscriptions are ordered consumers too (JetStreamStreamNode).
	stream     string
	liveStream bool

	n atomic.Uint32 // publishes, to check ctx every 1024

	mu      sync.Mutex
	pending map[*nats.Msg]func(error) // async publishes awaiting their ack
	err     error                     // first asynchronous error
}

func (c *natsClient) setErr(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// Publish implements bench.Client: core NATS, fire-and-forget (ctx is
// checked every 1024 publishes).
func (c *natsClient) Publish(ctx context.Context, subj string, p []byte) error {
	if c.n.Add(1)&1023 == 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return c.nc.Publish(subj, p)
}

// PublishAcked implements bench.Client with a synchronous JetStream
// publish (core: ErrUnsupported).
func (c *natsClient) PublishAcked(ctx context.Context, subj string, p []byte) error {
	if c.js == nil {
		return fmt.Errorf("%w: acknowledged publish needs JetStream", bench.ErrUnsupported)
	}
	_, err := c.js.Publish(ctx, subj, p)
	return err
}

// PublishAsync implements bench.Client with JetStream PublishMsgAsync;
// done runs on nats.go's ack-handler goroutine (core: ErrUnsupported).
func (c *natsClient) PublishAsync(_ context.Context, subj string, p []byte, done func(error)) error {
	if c.js == nil {
		return fmt.Errorf("%w: acknowledged publish needs JetStream", bench.ErrUnsupported)
	}
	m := &nats.Msg{Subject: subj, Data: p}
	c.mu.Lock()
	c.pending[m] = done
	c.mu.Unlock()
	if _, err := c.js.PublishMsgAsync(m); err != nil {
		c.mu.Lock()
		delete(c.pending, m)
		c.mu.Unlock()
		return err
	}
	return nil
}

func (c *natsClient) asyncDone(m *nats.Msg, err error) {
	c.mu.Lock()
	done, ok := c.pending[m]
	delete(c.pending, m)
	c.mu.Unlock()
	if ok {
		done(err)
	}
}

// Flush waits for every async JetStream publish, then for a PING round
// trip (so the server has processed every earlier publish), and returns the
// first asynchronous error (e.g. a slow consumer) seen by the connection.
func (c *natsClient) Flush(ctx context.Context) error {
	if c.js != nil {
		select {
		case <-c.js.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var err error
	if _, ok := ctx.Deadline(); ok {
		err = c.nc.FlushWithContext(ctx)
	} else {
		err = c.nc.FlushTimeout(time.Minute)
	}
	if err != nil {
		return fmt.Errorf("peer: flush: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if errors.Is(c.err, nats.ErrSlowConsumer) {
		return nil // reported per subscription as Dropped
	}
	return c.err
}

// Subscribe implements bench.Client: a core subscription (StartLive) or a
// JetStream ordered consumer on the memory stream (StartEarliest; with
// JetStreamStreamNode, StartLive too, from the stream's next message).
func (c *natsClient) Subscribe(ctx context.Context, subj string, start bench.Start, h bench.Handler) (bench.Sub, error) {
	if start == bench.StartEarliest || c.liveStream {
		if c.js == nil {
			return nil, fmt.Errorf("%w: replay needs JetStream", bench.ErrUnsupported)
		}
		policy := jetstream.DeliverAllPolicy
		if start != bench.StartEarliest {
			// The consumer exists when this returns: every message
			// stored afterwards is delivered.
			policy = jetstream.DeliverNewPolicy
		}
		cons, err := c.js.OrderedConsumer(ctx, c.stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{subj}, DeliverPolicy: policy,
		})
		if err != nil {
			return nil, fmt.Errorf("peer: ordered consumer: %w", err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) { h(m.Data()) })
		if err != nil {
			return nil, fmt.Errorf("peer: consume: %w", err)
		}
		return &jsSub{cc: cc}, nil
	}
	sub, err := c.nc.Subscribe(subj, func(m *nats.Msg) { h(m.Data) })
	if err != nil {
		return nil, fmt.Errorf("peer: subscribe: %w", err)
	}
	// A round trip makes sure the server has registered the interest
	// before the caller starts publishing.
	if err := c.nc.FlushTimeout(10 * time.Second); err != nil {
		return nil, fmt.Errorf("peer: subscribe flush: %w", err)
	}
	return &coreSub{sub: sub}, nil
}

// Close implements bench.Client.
func (c *natsClient) Close() error {
	c.nc.Close()
	return nil
}

// coreSub is a core NATS subscription; Dropped is nats.go's count of
// messages dropped for exceeding the pending limits (slow consumer).
type coreSub struct {
	sub    *nats.Subscription
	closed atomic.Bool
}

// Dropped implements bench.Sub.
func (s *coreSub) Dropped() uint64 {
	n, err := s.sub.Dropped()
	if err != nil || n < 0 {
		return 0
	}
	return uint64(n)
}

// Err reports a subscription that nats.go has invalidated (its connection
// closed) before Close.
func (s *coreSub) Err() error {
	if s.closed.Load() || s.sub.IsValid() {
		return nil
	}
	return fmt.Errorf("peer: subscription ended: %w", nats.ErrBadSubscription)
}

// Close implements bench.Sub.
func (s *coreSub) Close() error {
	s.closed.Store(true)
	err := s.sub.Unsubscribe()
	if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrBadSubscription) {
		return nil
	}
	return err
}

// jsSub is an ordered consumer; it never drops (it resets and redelivers).
type jsSub struct{ cc jetstream.ConsumeContext }

// Dropped, Err and Close implement bench.Sub.
func (s *jsSub) Dropped() uint64 { return 0 }
func (s *jsSub) Err() error      { return nil }
func (s *jsSub) Close() error    { s.cc.Stop(); return nil }

// Embedded is a nats-server running inside this process.
type Embedded struct {
	srv *server.Server
	dir string
}

// StartEmbedded starts a nats-server with JetStream (memory and a
// temporary store directory) listening on addr ("127.0.0.1:0" picks a
// free port), and waits until it accepts connections.
func StartEmbedded(addr string) (*Embedded, error) {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("peer: listen address %q: %w", addr, err)
	}
	var port int
	if _, err := fmt.Sscan(portS, &port); err != nil {
		return nil, fmt.Errorf("peer: listen port %q: %w", portS, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return startEmbedded(&server.Options{Host: host, Port: port})
}

// startEmbedded starts a nats-server with opts, to which it adds
// JetStream with a new temporary store directory, no logging, no signal
// handlers and a connection limit that no benchmark reaches; it waits up
// to 20 s until the server accepts connections. On error nothing is left
// running or on disk.
func startEmbedded(opts *server.Options) (*Embedded, error) {
	label, prefix := "nats-server", "sluice-bench-nats-"
	if opts.ServerName != "" {
		label, prefix = label+" "+opts.ServerName, prefix+opts.ServerName+"-"
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, fmt.Errorf("peer: store dir: %w", err)
	}
	opts.NoLog, opts.NoSigs = true, true
	opts.JetStream, opts.StoreDir, opts.MaxConn = true, dir, 200_000
	srv, err := server.NewServer(opts)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("peer: %s: %w", label, err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(20 * time.Second) {
		srv.Shutdown()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("peer: %s did not become ready", label)
	}
	return &Embedded{srv: srv, dir: dir}, nil
}

// adminJetStream opens the admin connection to url (the benchmark's
// streams are created and deleted through it) and its JetStream context.
func adminJetStream(url string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name("sluice-bench-admin"))
	if err != nil {
		return nil, nil, fmt.Errorf("peer: connect %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("peer: jetstream: %w", err)
	}
	return nc, js, nil
}

// URL returns the client URL.
func (e *Embedded) URL() string { return e.srv.ClientURL() }

// Shutdown stops the server and removes its store directory.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	_ = os.RemoveAll(e.dir)
}
