package client

import (
	"context"
	"fmt"

	"github.com/sluice-rtm/sluice/wire"
)

// Propagator carries request-scoped context, such as an OpenTelemetry
// trace, from a publisher to the subscribers in message headers. The
// module github.com/sluice-rtm/sluice/client/otelsluice implements it
// with OpenTelemetry's propagation API (W3C traceparent and tracestate,
// baggage), and extracts the context on the subscriber's side.
type Propagator interface {
	// Inject returns hs with the headers that carry ctx appended. hs is
	// the message's own headers (nil for a plain publish), capped so
	// that appending copies it. It is called on the publishing goroutine,
	// once per publish, possibly from many goroutines at once.
	Inject(ctx context.Context, hs []Header) []Header
}

// WithPropagator makes every publish of the Conn (Publish, PublishAsync,
// PublishFunc, PublishMsg, PublishMsgAsync and PublishNoAck) carry the
// headers p injects for the publish call's context. Off by default: then
// a publish costs one nil check more (BenchmarkPublishNoAck_Propagator).
// The injected headers count against the server's limits like the
// message's own (PROTOCOL.md 2.14); an invalid one fails the publish with
// ErrInvalidHeaders, and a server without headers with
// ErrHeadersUnsupported.
func WithPropagator(p Propagator) Option {
	return func(o *options) error {
		o.propagator = p
		return nil
	}
}

// propagate returns hs with p's headers for ctx, checked.
func propagate(p Propagator, ctx context.Context, hs []Header) ([]Header, error) {
	out := p.Inject(ctx, hs[:len(hs):len(hs)])
	if len(out) == len(hs) {
		return hs, nil
	}
	if err := wire.CheckHeaders(out); err != nil {
		return hs, fmt.Errorf("%w: injected by the propagator: %w", ErrInvalidHeaders, err)
	}
	return out, nil
}
