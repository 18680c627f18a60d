package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/sluice-rtm/sluice/wire"
)

// Defaults of the Dial options.
const (
	DefaultName        = "sluice-go"
	DefaultBackoffMin  = 100 * time.Millisecond
	DefaultBackoffMax  = 10 * time.Second
	DefaultMaxPending  = 1024
	DefaultDialTimeout = 5 * time.Second
	DefaultSubBuffer   = 1024
	DefaultMaxBody     = 64 << 20
	// handshakeMaxBody bounds the WELCOME frame (and an ERROR answering
	// HELLO) before the server's own MaxBody is known.
	handshakeMaxBody = 1 << 20
	// maxAddrs bounds the address list (seeds plus nodes learned from
	// WELCOME) so a server cannot make it grow without limit.
	maxAddrs = 256
	// goawayGrace is how long the client keeps reading a connection after
	// GOAWAY (to collect its outstanding acks) before dropping it.
	goawayGrace = 2 * time.Second
	// healthySession is how long a connection must have lasted for the
	// reconnect backoff to start again from its minimum.
	healthySession = time.Second
	// minWriteTimeout is the shortest write deadline used on a connection.
	minWriteTimeout = 5 * time.Second
)

// Option configures Dial.
type Option func(*options) error

type options struct {
	name        string
	token       []byte
	provider    TokenProvider // replaces token when set (refresh.go)
	reconnect   bool
	backoffMin  time.Duration
	backoffMax  time.Duration
	maxPending  int
	logger      *slog.Logger
	dialTimeout time.Duration
	maxBody     uint32
	dialer      func(ctx context.Context, addr string) (net.Conn, error)
	tls         *tls.Config
	idempotence time.Duration // > 0: automatic message ids, resent for this long
	compressMin int           // > 0: offer S2, compress publishes of at least this many bytes
	propagator  Propagator    // non-nil: headers injected into every publish (propagate.go)
}

func defaultOptions() options {
	return options{
		name:        DefaultName,
		reconnect:   true,
		backoffMin:  DefaultBackoffMin,
		backoffMax:  DefaultBackoffMax,
		maxPending:  DefaultMaxPending,
		logger:      slog.New(slog.DiscardHandler),
		dialTimeout: DefaultDialTimeout,
		maxBody:     DefaultMaxBody,
	}
}

// DefaultCompressMin is the threshold to pass to WithCompression when in
// doubt: publishes whose payload (with id and headers) is at least 512
// bytes are compressed. S2 is off unless WithCompression turns it on.
const DefaultCompressMin = wire.DefaultS2Threshold

// WithCompression turns on S2 compression (PROTOCOL.md 2.15; off by
// default, as in NATS's and Kafka's clients: on loopback and a LAN the CPU
// it costs outweighs the bytes it saves, BENCHMARKS.md): the client offers
// wire.FeatureS2, and when the server accepts it, a publish whose payload,
// with its id and headers, is at least minSize bytes (DefaultCompressMin = 512 is a good start) is sent
// as an S2 block if that is smaller; the server then sends this
// connection's subscriptions large DATA batches compressed too.
// WithCompression(0), the default, keeps S2 off (not offered, nothing
// compressed).
// Compression costs CPU on both sides; it pays for text-like payloads
// (JSON: about 0.4 of the size) on slow or metered links, not for
// already-compressed data, which the size check then sends as it is.
func WithCompression(minSize int) Option {
	return func(o *options) error {
		if minSize < 0 {
			return fmt.Errorf("%w: compression threshold %d", ErrInvalidOption, minSize)
		}
		o.compressMin = minSize
		return nil
	}
}

// WithName sets the client name sent in HELLO (at most 255 bytes; default
// "sluice-go").
func WithName(name string) Option {
	return func(o *options) error {
		if len(name) > wire.MaxNameLen {
			return fmt.Errorf("%w: name is %d bytes, at most %d", ErrInvalidOption, len(name), wire.MaxNameLen)
		}
		o.name = name
		return nil
	}
}

// WithToken sets the authentication token sent in HELLO (at most 4096
// bytes). The slice is copied.
func WithToken(token []byte) Option {
	return func(o *options) error {
		if len(token) > wire.MaxTokenLen {
			return fmt.Errorf("%w: token is %d bytes, at most %d", ErrInvalidOption, len(token), wire.MaxTokenLen)
		}
		o.token = append([]byte(nil), token...)
		return nil
	}
}

// WithReconnect enables (the default) or disables automatic reconnection.
// Without it, the loss of the connection closes the Conn.
func WithReconnect(enabled bool) Option {
	return func(o *options) error { o.reconnect = enabled; return nil }
}

// WithBackoff sets the reconnect backoff: attempt n waits a uniformly random
// time in [0, min(max, min*2^n)) ("full jitter"). Defaults 100ms and 10s.
func WithBackoff(minDelay, maxDelay time.Duration) Option {
	return func(o *options) error {
		if minDelay <= 0 || maxDelay < minDelay {
			return fmt.Errorf("%w: backoff min %v max %v", ErrInvalidOption, minDelay, maxDelay)
		}
		o.backoffMin, o.backoffMax = minDelay, maxDelay
		return nil
	}
}

// WithMaxPending sets the publish window: how many publishes may await
// their PUBACK at once (default 1024). A publish that finds the window full
// blocks until a slot frees or its context ends.
func WithMaxPending(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: max pending %d < 1", ErrInvalidOption, n)
		}
		o.maxPending = n
		return nil
	}
}

// WithLogger sets the logger for connection events (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// DefaultRetryFor is how long WithIdempotence(0) keeps resending a publish
// whose outcome is unknown: well inside the server's default dedup window
// (2 minutes, but at most the TTL: 60 s with the server's defaults).
const DefaultRetryFor = 30 * time.Second

// WithIdempotence turns on idempotent publishing, as Kafka's idempotent
// producer does: every acknowledged publish (Publish, PublishAsync,
// PublishFunc, PublishMsg*) that has no Msg.ID gets an automatic one, the
// Conn's random 12-byte producer id followed by a 64-bit sequence number;
// and a publish whose connection is lost before its PUBACK is no longer
// failed with ErrUnknownOutcome but sent again, with the same id, on the
// next connection (to whichever node that is), until it is acknowledged or
// retryFor has passed since it was first sent (0: DefaultRetryFor). The
// server's deduplication then makes the publisher see each message stored
// and acknowledged exactly once. A message resent after the server's
// dedup window (2 minutes by default, at most the server's TTL) would be
// stored twice, so resending stops at nine tenths of the window the server
// announces in WELCOME when that is shorter than retryFor (checked again
// against each server reconnected to). Only when that time is over, or
// the Conn closes, does a publish still unacknowledged end with
// ErrUnknownOutcome.
// Resent publishes keep their order and go before any publish issued after
// the reconnect. The server must accept wire.FeatureHeaders; a publish to
// one that does not fails with ErrHeadersUnsupported. PublishNoAck is not
// affected. Cost: 21 more bytes per PUBLISH and a copy of each frame kept
// until its PUBACK (pooled: no allocation in steady state).
func WithIdempotence(retryFor time.Duration) Option {
	return func(o *options) error {
		if retryFor < 0 {
			return fmt.Errorf("%w: retry for %v", ErrInvalidOption, retryFor)
		}
		if retryFor == 0 {
			retryFor = DefaultRetryFor
		}
		o.idempotence = retryFor
		return nil
	}
}

// WithDialTimeout bounds each connection attempt, TCP connect and handshake
// together (default 5s).
func WithDialTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: dial timeout %v", ErrInvalidOption, d)
		}
		o.dialTimeout = d
		return nil
	}
}

// WithMaxBody caps the body of every frame the client accepts from the
// server at n bytes, whatever the server's WELCOME.MaxBody says (the
// smaller of the two applies; default 64 MiB), so a misbehaving server
// cannot make the client buffer more. A larger frame is a protocol error.
func WithMaxBody(n uint32) Option {
	return func(o *options) error {
		if n < wire.MinMaxBody {
			return fmt.Errorf("%w: max body %d < %d", ErrInvalidOption, n, wire.MinMaxBody)
		}
		o.maxBody = n
		return nil
	}
}

// WithDialer replaces the TCP dialer, e.g. to add TLS. It is called for
// every connection attempt with a context bounded by the dial timeout.
func WithDialer(dial func(ctx context.Context, addr string) (net.Conn, error)) Option {
	return func(o *options) error {
		if dial == nil {
			return fmt.Errorf("%w: nil dialer", ErrInvalidOption)
		}
		o.dialer = dial
		return nil
	}
}

// WithTLS makes every connection use TLS with cfg (cloned; set RootCAs to
// trust a private CA and ServerName when the address is not the name in
// the server's certificate: by default the host part of the address
// dialled is used). The TLS handshake counts towards the dial timeout. With
// WithDialer, TLS runs over the connection the dialer returns.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) error {
		if cfg == nil {
			return fmt.Errorf("%w: nil TLS config", ErrInvalidOption)
		}
		o.tls = cfg.Clone()
		return nil
	}
}

// SubOption configures Subscribe. Of the start options (FromLive,
// FromEarliest, FromPosition, Last, Since) the last one given wins; the
// default is FromLive.
type SubOption func(*subOptions) error

type subOptions struct {
	start  wire.StartKind
	arg    uint64
	buffer int
	pflags wire.Flags // WithPresence, WithPresenceEvents, WithOccupancy
	filter []byte     // WithFilter (filter.go)
}

// FromLive starts at the live edge: only messages published after the
// subscription is made.
func FromLive() SubOption {
	return func(o *subOptions) error { o.start, o.arg = wire.StartLive, 0; return nil }
}

// FromEarliest starts at the oldest retained message.
func FromEarliest() SubOption {
	return func(o *subOptions) error { o.start, o.arg = wire.StartEarliest, 0; return nil }
}

// FromPosition starts at position p (p >= 1). If the server no longer holds
// p, the subscription's first event is a Gap from p.
func FromPosition(p uint64) SubOption {
	return func(o *subOptions) error {
		if p == 0 {
			return fmt.Errorf("%w: position 0 (positions start at 1)", ErrInvalidOption)
		}
		o.start, o.arg = wire.StartPosition, p
		return nil
	}
}

// Last starts n messages back from the live edge.
func Last(n uint64) SubOption {
	return func(o *subOptions) error { o.start, o.arg = wire.StartLast, n; return nil }
}

// Since starts with the messages of the last d (millisecond resolution).
func Since(d time.Duration) SubOption {
	return func(o *subOptions) error {
		if d < 0 {
			return fmt.Errorf("%w: since %v < 0", ErrInvalidOption, d)
		}
		o.start, o.arg = wire.StartSince, uint64(d/time.Millisecond)
		return nil
	}
}

// WithBuffer sets the subscription's event queue length (default 1024).
// When it is full the connection's reader waits (see the package doc).
// Next takes the queued events a batch at a time, so up to n more may
// wait in the batch it took; the Events channel holds n.
func WithBuffer(n int) SubOption {
	return func(o *subOptions) error {
		if n < 1 {
			return fmt.Errorf("%w: buffer %d < 1", ErrInvalidOption, n)
		}
		o.buffer = n
		return nil
	}
}
