// @sluice-rtm/client/otel: OpenTelemetry trace propagation through Sluice
// messages, with @opentelemetry/api's propagation API. The publisher's
// active trace context travels in the message's headers (W3C traceparent
// and tracestate, baggage: whatever the registered propagator writes);
// a subscriber's handler runs in the context those headers carry, so its
// spans are children of the publisher's.
//
//   import { connect } from "@sluice-rtm/client";
//   import { otelTracing, traced } from "@sluice-rtm/client/otel";
//   const client = await connect(url, { ...otelTracing() });
//   await tracer.startActiveSpan("place order", async (span) => {
//     await client.publish("orders", body);   // carries traceparent
//     span.end();
//   });
//   await client.subscribe("orders", {
//     onEvent: traced((ev) => tracer.startActiveSpan("handle order", (s) => { ...; s.end(); })),
//   });
//
// Opt-in: a client without injectHeaders pays one check per publish.
// @opentelemetry/api is a peer dependency of this entry point only; the
// SDK itself (and the console's bundle) does not load it.
import { context, propagation, ROOT_CONTEXT, type Context, type TextMapGetter, type TextMapSetter } from "@opentelemetry/api";
import type { ConnectOptions, MessageEvent, SubEvent } from "./client.js";
import type { HeaderField } from "./codec.js";

const setter: TextMapSetter<Array<[string, string]>> = {
  set(carrier, key, value) {
    carrier.push([key, value]);
  },
};

/** Reads message headers; keys are compared without regard to case, as HTTP's. */
const getter: TextMapGetter<HeaderField[]> = {
  get(carrier, key) {
    const k = key.toLowerCase();
    for (const h of carrier) if (h.key.toLowerCase() === k) return h.value;
    return undefined;
  },
  keys(carrier) {
    return carrier.map((h) => h.key);
  },
};

/**
 * The headers that carry ctx (default: the active context) with the
 * registered propagator; empty when ctx holds no trace (or no propagator
 * is registered).
 */
export function traceHeaders(ctx: Context = context.active()): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  propagation.inject(ctx, pairs, setter);
  return pairs;
}

/** Options for connect() that add the caller's active trace context to every publish. */
export function otelTracing(): Pick<ConnectOptions, "injectHeaders"> {
  return { injectHeaders: () => traceHeaders() };
}

/** The context a message's headers carry, under parent (default: the root context). */
export function extractContext(ev: MessageEvent, parent: Context = ROOT_CONTEXT): Context {
  return propagation.extract(parent, ev.headers, getter);
}

/**
 * Wraps an onEvent handler so that it runs with the message's context
 * active (other events run in the root context), and gets it as its
 * second argument too.
 */
export function traced(handler: (ev: SubEvent, ctx: Context) => void): (ev: SubEvent) => void {
  return (ev) => {
    const ctx = ev.kind === "message" ? extractContext(ev) : ROOT_CONTEXT;
    context.with(ctx, () => handler(ev, ctx));
  };
}
