// A scripted in-memory server for the session-logic tests: an injected
// WebSocket constructor whose sockets talk to test code instead of a network.
// No sockets, no timers of its own; tests await frames and answer them.
import { codec, presence, features } from "../dist/index.js";

// Kept so that a test that wraps the global setTimeout does not see ours.
const setT = globalThis.setTimeout;

export const WELCOME = {
  version: 1,
  features: 0,
  maxPayload: 1 << 20,
  maxBody: (1 << 20) + 256,
  maxSubs: 1024,
  limitMsgs: 5000,
  limitSize: 2 << 20,
  limitLifeMs: 4000,
  ttlMs: 60000,
  pingIntervalMs: 0,
  serverName: "fake",
  nodes: [],
};

/** One decoded client frame. */
function decode(bytes) {
  const f = codec.decodeFrame(bytes, 1 << 24);
  const h = f.header;
  let v;
  switch (h.type) {
    case codec.FrameType.HELLO:
      v = codec.decodeHello(f.body);
      break;
    case codec.FrameType.PUBLISH:
      v = codec.decodePublish(f.body, h.flags);
      v.channel = new TextDecoder().decode(v.channel);
      v.text = new TextDecoder().decode(v.payload);
      break;
    case codec.FrameType.SUBSCRIBE:
      if (h.flags & codec.FLAG_FILTER) {
        const { sub, filter } = features.decodeSubscribeFilter(f.body);
        v = { ...sub, filter };
      } else v = codec.decodeSubscribe(f.body);
      break;
    case codec.FrameType.REFRESH:
      v = { token: new TextDecoder().decode(features.decodeRefresh(f.body)) };
      break;
    case codec.FrameType.UNSUBSCRIBE:
      v = codec.decodeUnsubscribe(f.body);
      break;
    case presence.PresenceType.PRESENCE:
      v = presence.decodePresence(f.body);
      break;
  }
  return { ...h, v };
}

export class FakeNet {
  constructor() {
    this.sockets = [];
    this.welcome = { ...WELCOME };
    /** url -> "refuse" (close at once) | {error: frame fields} (ERROR answering HELLO) */
    this.behaviour = new Map();
    this.waiters = [];
    const net = this;
    this.WebSocket = class FakeWS {
      constructor(url, protocols) {
        this.url = url;
        this.protocols = protocols;
        this.binaryType = "blob";
        this.bufferedAmount = 0;
        this.readyState = 0;
        this.onopen = this.onmessage = this.onclose = this.onerror = null;
        this.inbox = []; // frames from the client not yet taken by the test
        this.closed = false;
        net.sockets.push(this);
        queueMicrotask(() => net.open(this));
      }
      send(b) {
        if (this.closed) return;
        const fr = decode(b);
        if (fr.type === codec.FrameType.HELLO) return net.hello(this, fr);
        this.inbox.push(fr);
        net.wake();
      }
      close() {
        if (this.closed) return;
        this.closed = true;
        queueMicrotask(() => this.onclose?.({ code: 1000, reason: "" }));
        net.wake();
      }
    };
  }

  open(ws) {
    if (this.behaviour.get(ws.url) === "refuse") {
      ws.closed = true;
      ws.onerror?.({});
      ws.onclose?.({ code: 1006, reason: "" });
      return;
    }
    ws.readyState = 1;
    ws.onopen?.({});
  }

  hello(ws, fr) {
    ws.hello = fr.v;
    const b = this.behaviour.get(ws.url);
    if (b && b.error) {
      this.push(ws, codec.encodeError(fr.id, b.error));
      ws.closed = true;
      queueMicrotask(() => ws.onclose?.({ code: 1000, reason: "" }));
      return;
    }
    this.push(ws, codec.encodeWelcome(fr.id, this.welcome));
    ws.welcomed = true;
    // Frames (or a close) right behind the WELCOME, in the same turn.
    if (b && b.afterWelcome) b.afterWelcome(this, ws);
    this.wake();
  }

  /** Sends bytes to the client over ws (as the server). */
  push(ws, bytes) {
    if (ws.closed && !ws.welcomed) {
      /* still allowed during the handshake refusal */
    }
    const copy = bytes.slice().buffer;
    ws.onmessage?.({ data: copy });
  }

  /** Cuts ws as a network failure would. */
  drop(ws) {
    ws.closed = true;
    ws.readyState = 3;
    ws.onclose?.({ code: 1006, reason: "" });
    this.wake();
  }

  wake() {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  /** Resolves when pred() returns a value other than undefined. */
  async until(pred, what = "condition", ms = 2000) {
    const deadline = Date.now() + ms;
    for (;;) {
      const v = pred();
      if (v !== undefined && v !== false) return v;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => {
        this.waiters.push(r);
        setT(r, 20); // bounded re-check, so a timeout is reported
      });
    }
  }

  /** The n-th socket (0-based) once it has completed the handshake. */
  conn(n) {
    return this.until(() => (this.sockets[n]?.welcomed ? this.sockets[n] : undefined), `connection ${n}`);
  }

  /** Takes the next client frame of ws (optionally of one type). */
  frame(ws, type) {
    return this.until(() => {
      const i = ws.inbox.findIndex((f) => type === undefined || f.type === type);
      if (i >= 0) return ws.inbox.splice(i, 1)[0];
    }, `a ${type === undefined ? "frame" : codec.typeName(type)} on ${ws.url}`);
  }
}
