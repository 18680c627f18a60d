package otelsluice_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-rtm/sluice/client"
	"github.com/sluice-rtm/sluice/client/otelsluice"
	"github.com/sluice-rtm/sluice/engine"
)

// A trace that spans a publisher and a subscriber, through a real server:
// the publisher's span travels in the message's traceparent header, and
// the subscriber's span is its child, in the same trace.
func Example_traceAcrossPublishAndDelivery() {
	ctx := context.Background()
	srv, err := engine.Start(engineOptions())
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown(ctx)

	// The application's tracing set-up: here spans are kept in memory.
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	tracer := tp.Tracer("example")
	prop := propagation.TraceContext{}

	sub, err := client.Dial(ctx, srv.Addr())
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	handled := make(chan struct{})
	_, err = sub.SubscribeFunc(ctx, "orders", otelsluice.Handler(prop, func(ctx context.Context, ev client.Event) {
		_, span := tracer.Start(ctx, "handle order")
		span.End()
		close(handled)
	}))
	if err != nil {
		log.Fatal(err)
	}

	pub, err := client.Dial(ctx, srv.Addr(), otelsluice.WithPropagation(prop))
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	pctx, span := tracer.Start(ctx, "place order")
	if _, err := pub.Publish(pctx, "orders", []byte("order 17")); err != nil {
		log.Fatal(err)
	}
	span.End()

	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		log.Fatal("no delivery")
	}
	var place, handle tracetest.SpanStub // ended in either order
	for _, s := range spans.GetSpans() {
		if s.Name == "place order" {
			place = s
		} else {
			handle = s
		}
	}
	fmt.Println(place.Name, "->", handle.Name)
	fmt.Println("same trace:", handle.SpanContext.TraceID() == place.SpanContext.TraceID())
	fmt.Println("child of the publisher's span:", handle.Parent.SpanID() == place.SpanContext.SpanID())
	// Output:
	// place order -> handle order
	// same trace: true
	// child of the publisher's span: true
}

// engineOptions is a single-node server on a free loopback port.
func engineOptions() engine.Options {
	o := engine.DefaultOptions()
	o.Listen = "127.0.0.1:0"
	o.Loops = 1
	return o
}
