// OpenTelemetry trace propagation (@sluice-rtm/client/otel) against a real
// `sluice serve`: a trace that spans a publisher and a subscriber, a trace
// context written by the Go command line read back here, and no headers
// at all without the opt-in.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { context, propagation, trace } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { connect } from "../dist/index.js";
import { otelTracing, traced, extractContext, traceHeaders } from "../dist/otel.js";
import { startServer, goPublish } from "./server.mjs";

let srv;
const spans = new InMemorySpanExporter();
const tracer = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }).getTracer("otel-test");

before(async () => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  srv = await startServer();
});
after(async () => {
  await srv?.stop();
  context.disable();
  propagation.disable();
});

/** The first message event of a subscription from earliest, through onEvent. */
async function firstMessage(client, channel) {
  let got;
  const message = new Promise((resolve) => (got = resolve));
  await client.subscribe(channel, { start: "earliest", onEvent: (ev) => ev.kind === "message" && got({ ev }) });
  return message;
}

test("a trace spans the publisher and the subscriber", async () => {
  spans.reset();
  const sub = await connect(srv.wsURL);
  const pub = await connect(srv.wsURL, { ...otelTracing() });
  let done;
  const handled = new Promise((resolve) => (done = resolve));
  await sub.subscribe("otel.orders", {
    start: "earliest",
    onEvent: traced((ev) => {
      if (ev.kind !== "message") return;
      tracer.startActiveSpan("handle order", (span) => {
        span.end();
        done();
      });
    }),
  });
  await tracer.startActiveSpan("place order", async (span) => {
    await pub.publish("otel.orders", "order 17");
    span.end();
  });
  await handled;
  const byName = Object.fromEntries(spans.getFinishedSpans().map((s) => [s.name, s]));
  const place = byName["place order"], handle = byName["handle order"];
  assert.ok(place && handle, `spans: ${Object.keys(byName)}`);
  assert.equal(handle.spanContext().traceId, place.spanContext().traceId, "one trace");
  const parent = handle.parentSpanContext?.spanId ?? handle.parentSpanId;
  assert.equal(parent, place.spanContext().spanId, "the subscriber's span is a child of the publisher's");
  pub.close();
  sub.close();
});

test("a traceparent written by the Go command line is read here", async () => {
  const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  await goPublish(srv, "otel.go", ["from go"], undefined, ["--header", `traceparent=${tp}`]);
  const c = await connect(srv.wsURL);
  const { ev } = await firstMessage(c, "otel.go");
  const sc = trace.getSpanContext(extractContext(ev));
  assert.equal(sc?.traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
  assert.equal(sc?.spanId, "00f067aa0ba902b7");
  assert.equal(sc?.isRemote, true);
  c.close();
});

test("without otelTracing a publish carries no headers, even inside a span", async () => {
  const c = await connect(srv.wsURL);
  await tracer.startActiveSpan("untraced publish", async (span) => {
    assert.equal(traceHeaders().length, 1, "the context does hold a trace");
    await c.publish("otel.plain", "x");
    span.end();
  });
  const { ev } = await firstMessage(c, "otel.plain");
  assert.deepEqual(ev.headers, []);
  assert.deepEqual(traceHeaders(context.active()), [], "no trace outside the span");
  c.close();
});
