package bench

import (
	"context"
	"errors"
)

// Sentinel errors of package bench.
var (
	// ErrUnsupported: the driver cannot do this operation (e.g. acknowledged
	// publish on NATS core; use the JetStream driver).
	ErrUnsupported = errors.New("bench: operation not supported by this driver")
	// ErrConfig: a scenario configuration is invalid.
	ErrConfig = errors.New("bench: invalid configuration")
	// ErrUnknownScenario: no scenario has that name.
	ErrUnknownScenario = errors.New("bench: unknown scenario")
	// ErrIncomplete: a run ended (timeout or stall) before every expected
	// message arrived; the Result still holds what was measured.
	ErrIncomplete = errors.New("bench: run incomplete")
)

// Start says where a subscription begins.
type Start int

// Subscription starts.
const (
	// StartLive: only messages published after the subscription is made.
	StartLive Start = iota
	// StartEarliest: the oldest retained message (replay).
	StartEarliest
)

// Handler receives one message. It is called from a single goroutine per
// subscription, in order; payload is valid only until it returns.
type Handler func(payload []byte)

// Driver connects load-generator clients to one system under test.
type Driver interface {
	// Name is the system's short name, e.g. "sluice" or "nats".
	Name() string
	// Connect opens one client connection. Safe for concurrent use.
	Connect(ctx context.Context) (Client, error)
}

// Client is one connection to the system under test. Publish,
// PublishAcked and PublishAsync may be called from one goroutine at a time;
// Subscribe and Close from any.
type Client interface {
	// Publish sends payload to channel as fast as the system allows for a
	// publisher that does not wait for each message: fire-and-forget where
	// the system has it (NATS core), pipelined with acknowledgements where
	// it does not (Sluice's SDK acknowledges every publish). It may block for
	// flow control. payload may be reused once Publish returns.
	Publish(ctx context.Context, channel string, payload []byte) error
	// PublishAcked publishes and waits until the system acknowledges that
	// the message is stored.
	PublishAcked(ctx context.Context, channel string, payload []byte) error
	// PublishAsync publishes with acknowledgement without waiting; done is
	// called exactly once (from a goroutine of the client; it must be quick)
	// unless PublishAsync returns an error. payload may be reused at once.
	PublishAsync(ctx context.Context, channel string, payload []byte, done func(error)) error
	// Flush waits until every message published so far on this client has
	// been processed by the server (acknowledged, or a round trip after it).
	Flush(ctx context.Context) error
	// Subscribe subscribes to channel from start; h is called for each
	// message until the Sub is closed or the client is closed.
	Subscribe(ctx context.Context, channel string, start Start, h Handler) (Sub, error)
	// Close closes the connection and every subscription on it.
	Close() error
}

// Sub is one subscription.
type Sub interface {
	// Dropped reports how many messages the system told this subscriber it
	// skipped (gaps, slow-consumer drops) so far. Safe from any goroutine.
	Dropped() uint64
	// Err says why the subscription ended before Close (e.g. the server
	// disconnected a slow consumer), or nil while it is live. Safe from any
	// goroutine.
	Err() error
	// Close ends the subscription. Safe from any goroutine; idempotent.
	Close() error
}
