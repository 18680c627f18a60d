package otelsluice

import (
	"context"
	"reflect"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rtm/sluice/client"
)

var w3c = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

func spanCtx(t *testing.T) context.Context {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	m, err := baggage.NewMember("tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := baggage.New(m)
	return baggage.ContextWithBaggage(trace.ContextWithSpanContext(context.Background(), sc), b)
}

// TestInjectExtractRoundTrip: the publisher's span context and baggage
// come back out of the headers on the subscriber's side.
func TestInjectExtractRoundTrip(t *testing.T) {
	own := []client.Header{{Key: "ct", Value: "json"}}
	hs := Propagator{w3c}.Inject(spanCtx(t), own[:1:1])
	want := []client.Header{{Key: "ct", Value: "json"},
		{Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{Key: "baggage", Value: "tenant=acme"}}
	if !reflect.DeepEqual(hs, want) {
		t.Fatalf("headers %v, want %v", hs, want)
	}
	ctx := Extract(context.Background(), w3c, client.Event{Headers: hs})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("extracted %+v", sc)
	}
	if v := baggage.FromContext(ctx).Member("tenant").Value(); v != "acme" {
		t.Fatalf("baggage %q", v)
	}
}

// TestNoTraceNoHeaders: a context without a span adds nothing, and an
// event without headers yields no span context.
func TestNoTraceNoHeaders(t *testing.T) {
	if hs := (Propagator{w3c}).Inject(context.Background(), nil); len(hs) != 0 {
		t.Fatalf("headers %v from an untraced context", hs)
	}
	if sc := trace.SpanContextFromContext(Extract(context.Background(), w3c, client.Event{})); sc.IsValid() {
		t.Fatalf("span context %+v from no headers", sc)
	}
}

// TestInjectReplacesAndKeepsCallersSlice: a message that already carries a
// traceparent (published again) gets the current one instead of a second,
// and the caller's slice is not written.
func TestInjectReplacesAndKeepsCallersSlice(t *testing.T) {
	old := []client.Header{{Key: "TraceParent", Value: "00-00000000000000000000000000000001-0000000000000001-01"}}
	hs := Propagator{propagation.TraceContext{}}.Inject(spanCtx(t), old[:1:1])
	if len(hs) != 1 || hs[0].Value != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("headers %v", hs)
	}
	if old[0].Value != "00-00000000000000000000000000000001-0000000000000001-01" {
		t.Fatalf("the caller's header was changed to %q", old[0].Value)
	}
}

// TestHandlerGetsTheContext: Handler hands fn the extracted context.
func TestHandlerGetsTheContext(t *testing.T) {
	hs := Propagator{w3c}.Inject(spanCtx(t), nil)
	var got trace.SpanContext
	Handler(w3c, func(ctx context.Context, ev client.Event) { got = trace.SpanContextFromContext(ctx) })(client.Event{Headers: hs})
	if got.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("handler got %+v", got)
	}
}
