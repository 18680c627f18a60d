// Package otelsluice carries OpenTelemetry trace context through Sluice
// messages: the publisher's current span context travels in the message's
// headers (W3C traceparent and tracestate, and baggage, or whatever the
// configured propagator writes), and the subscriber's handler gets it
// back as the parent of its own spans, so one trace spans the publish and
// every delivery.
//
// It uses only OpenTelemetry's propagation API
// (go.opentelemetry.io/otel/propagation); spans are the application's,
// made with whatever TracerProvider it set up. It is its own Go module,
// so the Sluice SDK does not depend on OpenTelemetry, and an application
// that does not opt in pays nothing (client.WithPropagator unset: one nil
// check per publish).
//
//	conn, _ := client.Dial(ctx, addr, otelsluice.WithPropagation(nil))
//	ctx, span := tracer.Start(ctx, "publish chat")
//	conn.Publish(ctx, "chat", payload)   // carries traceparent
//	span.End()
//
//	conn.SubscribeFunc(ctx, "chat", otelsluice.Handler(nil, func(ctx context.Context, ev client.Event) {
//		_, span := tracer.Start(ctx, "handle chat") // a child of the publisher's span
//		defer span.End()
//	}))
package otelsluice

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sluice-rtm/sluice/client"
)

// WithPropagation is a client.Dial option that injects the publish
// call's context into every message's headers with p (nil: the global
// propagator, otel.GetTextMapPropagator(), read at each publish, so one
// set up after Dial counts).
func WithPropagation(p propagation.TextMapPropagator) client.Option {
	return client.WithPropagator(Propagator{p})
}

// Propagator adapts an OpenTelemetry TextMapPropagator to
// client.Propagator. The zero value uses the global propagator. Safe for
// concurrent use when the TextMapPropagator is (OpenTelemetry's are).
type Propagator struct {
	P propagation.TextMapPropagator
}

func (p Propagator) prop() propagation.TextMapPropagator {
	if p.P != nil {
		return p.P
	}
	return otel.GetTextMapPropagator()
}

// Inject implements client.Propagator: it appends the fields the
// propagator writes for ctx (none when ctx carries no trace).
func (p Propagator) Inject(ctx context.Context, hs []client.Header) []client.Header {
	c := carrier{hs: hs}
	p.prop().Inject(ctx, &c)
	return c.hs
}

// Extract returns ctx with the trace context (and baggage) that ev's
// headers carry, with p (nil: the global propagator). Without such
// headers it returns ctx unchanged in effect.
func Extract(ctx context.Context, p propagation.TextMapPropagator, ev client.Event) context.Context {
	return Propagator{p}.prop().Extract(ctx, &carrier{hs: ev.Headers})
}

// Handler wraps fn for client.Conn.SubscribeFunc: fn gets the context the
// event's headers carry, under context.Background() (the handler runs on
// the connection's reader goroutine, which has no context of its own).
// The same contract as SubscribeFunc's function applies to fn.
func Handler(p propagation.TextMapPropagator, fn func(context.Context, client.Event)) func(client.Event) {
	prop := Propagator{p}
	return func(ev client.Event) {
		fn(prop.prop().Extract(context.Background(), &carrier{hs: ev.Headers}), ev)
	}
}

// carrier is a propagation.TextMapCarrier over message headers. Keys are
// compared without regard to case, as HTTP header names are (the W3C
// propagator writes lower case).
type carrier struct{ hs []client.Header }

func (c *carrier) Get(key string) string {
	for _, h := range c.hs {
		if strings.EqualFold(h.Key, key) {
			return h.Value
		}
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	for i, h := range c.hs {
		if strings.EqualFold(h.Key, key) {
			// Replace rather than repeat (a message published again with
			// its own traceparent). hs may be the caller's: copy first.
			c.hs = append([]client.Header(nil), c.hs...)
			c.hs[i].Value = value
			return
		}
	}
	c.hs = append(c.hs, client.Header{Key: key, Value: value})
}

func (c *carrier) Keys() []string {
	keys := make([]string, len(c.hs))
	for i, h := range c.hs {
		keys[i] = h.Key
	}
	return keys
}
