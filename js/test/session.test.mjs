// Session logic against a scripted in-memory server (fakenet.mjs): no
// sockets. Each test is one behaviour of the SDK, mirroring the Go SDK's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, codec, features, UnknownOutcomeError, ServerError, ClosedError, ProtocolError, InvalidOptionError, InvalidHeadersError, FiltersUnsupportedError } from "../dist/index.js";
import { FakeNet } from "./fakenet.mjs";

const T = codec.FrameType;
const te = new TextEncoder();
const td = new TextDecoder();
const EPOCH = 77;

async function setup(opts = {}, urls = ["ws://a/"]) {
  const net = new FakeNet();
  const c = await connect(urls, { WebSocket: net.WebSocket, backoffMinMs: 1, backoffMaxMs: 5, ...opts });
  const ws = await net.conn(0);
  return { net, c, ws };
}

/** Answers a SUBSCRIBE with SUBSCRIBED. */
function subscribed(net, ws, fr, first, { earliest = 1, next = first, epoch = EPOCH } = {}) {
  net.push(ws, codec.encodeSubscribed(fr.id, { subID: fr.v.subID, first, earliest, next, epoch }));
}

function data(net, ws, subID, first, ...texts) {
  net.push(ws, codec.encodeData(subID, first, texts.map((t) => te.encode(t))));
}

/** Reads n events from an async-iterated subscription, as plain summaries. */
async function take(sub, n) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const r = await sub.next();
    assert.equal(r.done, false);
    out.push(summary(r.value));
  }
  return out;
}

function summary(ev) {
  switch (ev.kind) {
    case "message":
      return `msg ${ev.position} ${td.decode(ev.payload)}`;
    case "gap":
      return `gap ${ev.from}-${ev.to} ${ev.reason}`;
    case "epoch":
      return `epoch ${ev.epoch} at ${ev.position}`;
  }
}

async function subscribeOn(net, c, ws, channel, opts, first) {
  const p = c.subscribe(channel, opts);
  const fr = await net.frame(ws, T.SUBSCRIBE);
  subscribed(net, ws, fr, first);
  return [await p, fr];
}

test("HELLO carries name and token; WELCOME is exposed", async () => {
  const { c, ws } = await setup({ name: "web-1", token: "s3cret" });
  assert.equal(ws.hello.name, "web-1");
  assert.equal(td.decode(ws.hello.token), "s3cret");
  assert.equal(ws.hello.minVersion, 1);
  assert.deepEqual(ws.protocols, ["sluice.v1"], "the subprotocol of PROTOCOL.md 10.1 is offered");
  assert.equal(c.welcome.serverName, "fake");
  c.close();
});

test("a refused handshake rejects connect with the ServerError", async () => {
  const net = new FakeNet();
  net.behaviour.set("ws://a/", { error: { code: codec.CODE_UNAUTHENTICATED, retriable: false, text: "no" } });
  await assert.rejects(connect("ws://a/", { WebSocket: net.WebSocket }), (e) => e instanceof ServerError && e.codeName === "UNAUTHENTICATED");
});

test("connect tries the URLs in turn", async () => {
  const net = new FakeNet();
  net.behaviour.set("ws://a/", "refuse");
  const c = await connect("ws://a/, ws://b/", { WebSocket: net.WebSocket });
  assert.equal(c.url, "ws://b/");
  c.close();
});

test("publish resolves to the position; publishes are pipelined and acked in one PUBACK", async () => {
  const { net, c, ws } = await setup();
  const ps = ["a", "b", "c"].map((m) => c.publish("ch", m));
  const frs = [await net.frame(ws, T.PUBLISH), await net.frame(ws, T.PUBLISH), await net.frame(ws, T.PUBLISH)];
  assert.deepEqual(frs.map((f) => f.v.text), ["a", "b", "c"]);
  assert.ok(frs.every((f) => f.flags === codec.FLAG_ACK));
  net.push(ws, codec.encodePubAck(frs.map((f, i) => ({ id: f.id, position: 10 + i }))));
  assert.deepEqual(await Promise.all(ps), [10, 11, 12]);
  c.close();
});

test("at most maxPending publishes await their ack; the next waits for a slot", async () => {
  const { net, c, ws } = await setup({ maxPending: 2 });
  const ps = [c.publish("ch", "1"), c.publish("ch", "2"), c.publish("ch", "3")];
  const f1 = await net.frame(ws, T.PUBLISH);
  await net.frame(ws, T.PUBLISH);
  await new Promise((r) => setImmediate(r));
  assert.equal(ws.inbox.filter((f) => f.type === T.PUBLISH).length, 0, "third held back");
  net.push(ws, codec.encodePubAck([{ id: f1.id, position: 1 }]));
  const f3 = await net.frame(ws, T.PUBLISH);
  assert.equal(f3.v.text, "3");
  assert.equal(await ps[0], 1);
  c.close();
  await Promise.all([assert.rejects(ps[1], UnknownOutcomeError), assert.rejects(ps[2], UnknownOutcomeError)]);
});

test("a lost ack is an unknown outcome and the publish is never sent again", async () => {
  const { net, c, ws } = await setup();
  const p = c.publish("ch", "once");
  await net.frame(ws, T.PUBLISH);
  net.drop(ws);
  await assert.rejects(p, (e) => e instanceof UnknownOutcomeError);
  const ws2 = await net.conn(1);
  const later = c.publish("ch", "after");
  const f = await net.frame(ws2, T.PUBLISH);
  assert.equal(f.v.text, "after", "the first frame on the new connection is the new publish, not a resend");
  net.push(ws2, codec.encodePubAck([{ id: f.id, position: 2 }]));
  assert.equal(await later, 2);
  c.close();
});

test("publishes issued while disconnected wait and go out on the next connection", async () => {
  const { net, c, ws } = await setup();
  net.drop(ws);
  const p = c.publish("ch", "queued");
  const ws2 = await net.conn(1);
  const f = await net.frame(ws2, T.PUBLISH);
  assert.equal(f.v.text, "queued");
  net.push(ws2, codec.encodePubAck([{ id: f.id, position: 5 }]));
  assert.equal(await p, 5);
  c.close();
});

test("an ERROR answering a publish rejects it with ServerError; the connection carries on", async () => {
  const { net, c, ws } = await setup();
  const p = c.publish("ch", "x");
  const f = await net.frame(ws, T.PUBLISH);
  net.push(ws, codec.encodeError(f.id, { code: 13, retriable: false, text: "ch" }));
  await assert.rejects(p, (e) => e instanceof ServerError && e.codeName === "FORBIDDEN" && e.op === "publish");
  assert.ok(c.connected);
  c.close();
});

test("an ERROR OUTCOME_UNKNOWN answering a publish is an unknown outcome, not a refusal", async () => {
  const { net, c, ws } = await setup();
  const p = c.publish("ch", "x");
  const f = await net.frame(ws, T.PUBLISH);
  net.push(ws, codec.encodeError(f.id, { code: 23, retriable: true, text: "host failed" }));
  await assert.rejects(p, (e) => e instanceof UnknownOutcomeError && e.cause instanceof ServerError && e.cause.codeName === "OUTCOME_UNKNOWN");
  assert.ok(c.connected);
  c.close();
});

test("publishNoAck sends PUBLISH without the ACK flag", async () => {
  const { net, c, ws } = await setup();
  await c.publishNoAck("ch", te.encode("fire"));
  const f = await net.frame(ws, T.PUBLISH);
  assert.equal(f.flags, 0);
  assert.equal(f.v.text, "fire");
  c.close();
});

test("invalid channels and oversize payloads are refused before sending", async () => {
  const { net, c, ws } = await setup();
  net.welcome.maxPayload = 4;
  await assert.rejects(c.publish("a b", "x"), codec.InvalidChannelError);
  const ok = c.publish("ok", "x"); // the last valid name is cached; an invalid one after it is still refused
  await assert.rejects(c.publish("a\u00a0b", "x"), codec.InvalidChannelError);
  const okf = await net.frame(ws, T.PUBLISH);
  net.push(ws, codec.encodePubAck([{ id: okf.id, position: 1 }]));
  assert.equal(await ok, 1);
  await assert.rejects(c.subscribe("", {}), codec.InvalidChannelError);
  c.close();
  // maxPayload is per connection: a new client sees 4.
  const net2 = new FakeNet();
  net2.welcome.maxPayload = 4;
  const c2 = await connect("ws://a/", { WebSocket: net2.WebSocket });
  await assert.rejects(c2.publish("ch", "12345"), /payload of 5 bytes, server max 4/);
  c2.close();
});

test("an aborted publish that was not sent is never sent; one aborted after sending is an unknown outcome", async () => {
  const { net, c, ws } = await setup({ maxPending: 1 });
  const first = new AbortController();
  const p1 = c.publish("ch", "1", { signal: first.signal });
  const f1 = await net.frame(ws, T.PUBLISH);
  const second = new AbortController();
  const p2 = c.publish("ch", "2", { signal: second.signal });
  second.abort(new Error("changed my mind"));
  await assert.rejects(p2, /changed my mind/);
  first.abort();
  await assert.rejects(p1, UnknownOutcomeError);
  net.push(ws, codec.encodePubAck([{ id: f1.id, position: 1 }]));
  const p3 = c.publish("ch", "3");
  const f3 = await net.frame(ws, T.PUBLISH);
  assert.equal(f3.v.text, "3", "publish 2 was never sent");
  net.push(ws, codec.encodePubAck([{ id: f3.id, position: 2 }]));
  assert.equal(await p3, 2);
  c.close();
});

test("start options map to SUBSCRIBE start kinds", async () => {
  const { net, c, ws } = await setup();
  const starts = [
    ["live", codec.StartKind.LIVE, 0],
    ["earliest", codec.StartKind.EARLIEST, 0],
    [{ position: 42 }, codec.StartKind.POSITION, 42],
    [{ last: 10 }, codec.StartKind.LAST, 10],
    [{ sinceMs: 5000 }, codec.StartKind.SINCE, 5000],
  ];
  for (const [start, kind, arg] of starts) {
    const p = c.subscribe("ch", { start });
    const f = await net.frame(ws, T.SUBSCRIBE);
    assert.equal(f.v.start, kind);
    assert.equal(f.v.arg, arg);
    assert.equal(f.v.epoch, 0);
    subscribed(net, ws, f, 42);
    await p;
  }
  const bad = [
    [{ position: 0 }, /position must be a whole number from 1 to 2\^53-1 \(positions start at 1\), got 0/],
    [{ position: 42n }, /position must be a whole number .* got 42n \(a bigint; positions are numbers\)/],
    [{ position: 2 ** 53 }, /position must be a whole number from 1 to 2\^53-1/],
    [{ position: 1.5 }, /position must be a whole number/],
    [{ position: "7" }, /position must be a whole number .* got "7"/],
    [{ last: -1 }, /last must be a whole number from 0/],
    [{ last: 3n }, /last must be a whole number/],
    [{ sinceMs: -5 }, /sinceMs must be a number from 0/],
    [{ since: 5 }, /invalid start/],
  ];
  for (const [start, re] of bad) await assert.rejects(c.subscribe("ch", { start }), (e) => e instanceof InvalidOptionError && re.test(e.message), String(re));
  assert.equal(ws.inbox.length, 0, "nothing was sent for them");
  c.close();
});

test("a first subscribe refused by the server rejects with ServerError", async () => {
  const { net, c, ws } = await setup();
  const p = c.subscribe("ch");
  const f = await net.frame(ws, T.SUBSCRIBE);
  net.push(ws, codec.encodeError(f.id, { code: 13, retriable: false, text: "ch" }));
  await assert.rejects(p, (e) => e instanceof ServerError && e.codeName === "FORBIDDEN");
  c.close();
});

test("messages come in order; duplicates are dropped; a hole is a lost gap; GAPs are trimmed", async () => {
  const { net, c, ws } = await setup();
  const [sub, fr] = await subscribeOn(net, c, ws, "ch", { start: "live" }, 5);
  const id = fr.v.subID;
  data(net, ws, id, 5, "e", "f");
  data(net, ws, id, 6, "f", "g"); // 6 again
  data(net, ws, id, 9, "i"); // 8 missing
  net.push(ws, codec.encodeGap(id, { from: 8, to: 11, reason: codec.GapReason.EXPIRED })); // 8..9 already covered
  data(net, ws, id, 12, "l");
  assert.deepEqual(await take(sub, 6), ["msg 5 e", "msg 6 f", "msg 7 g", "gap 8-8 lost", "msg 9 i", "gap 10-11 expired"]);
  assert.deepEqual(await take(sub, 1), ["msg 12 l"]);
  c.close();
  await assert.rejects(sub.next(), ClosedError);
});

test("a resume after reconnecting starts at the last delivered + 1 with the epoch; a later first is an expired gap", async () => {
  const { net, c, ws } = await setup();
  const [sub, fr] = await subscribeOn(net, c, ws, "ch", { start: "earliest" }, 1);
  data(net, ws, fr.v.subID, 1, "a", "b", "c");
  assert.deepEqual(await take(sub, 3), ["msg 1 a", "msg 2 b", "msg 3 c"]);
  net.drop(ws);
  const ws2 = await net.conn(1);
  const f2 = await net.frame(ws2, T.SUBSCRIBE);
  assert.equal(f2.v.start, codec.StartKind.POSITION);
  assert.equal(f2.v.arg, 4);
  assert.equal(f2.v.epoch, EPOCH);
  subscribed(net, ws2, f2, 6);
  data(net, ws2, f2.v.subID, 6, "f");
  assert.deepEqual(await take(sub, 2), ["gap 4-5 expired", "msg 6 f"]);
  c.close();
});

test("an epoch change on resume is reported and delivery restarts at position 1 of the new incarnation", async () => {
  const { net, c, ws } = await setup();
  const [sub, fr] = await subscribeOn(net, c, ws, "ch", {}, 10);
  data(net, ws, fr.v.subID, 10, "j");
  await take(sub, 1);
  net.drop(ws);
  const ws2 = await net.conn(1);
  const f2 = await net.frame(ws2, T.SUBSCRIBE);
  assert.equal(f2.v.arg, 11);
  assert.equal(f2.v.epoch, EPOCH);
  // A new incarnation, all of it retained (PROTOCOL.md 5: it numbers from 1).
  subscribed(net, ws2, f2, 1, { epoch: 99 });
  data(net, ws2, f2.v.subID, 1, "new");
  assert.deepEqual(await take(sub, 2), ["epoch 99 at 1", "msg 1 new"]);
  assert.equal(sub.info.epoch, 99);
  net.drop(ws2);
  const ws3 = await net.conn(2);
  const f3 = await net.frame(ws3, T.SUBSCRIBE);
  assert.equal(f3.v.arg, 2);
  assert.equal(f3.v.epoch, 99);
  // Another one, whose positions 1..6 are gone: exactly those are lost (the
  // server's own GAP for them is not repeated), then its messages.
  subscribed(net, ws3, f3, 7, { earliest: 7, next: 8, epoch: 100 });
  net.push(ws3, codec.encodeGap(f3.v.subID, { from: 1, to: 6, reason: codec.GapReason.LOST }));
  data(net, ws3, f3.v.subID, 7, "g");
  assert.deepEqual(await take(sub, 3), ["epoch 100 at 1", "gap 1-6 lost", "msg 7 g"]);
  assert.deepEqual(sub.info, { first: 7, earliest: 7, next: 8, epoch: 100 });
  assert.equal(sub.nextPosition, 8);
  net.drop(ws3);
  const ws4 = await net.conn(3);
  const f4 = await net.frame(ws4, T.SUBSCRIBE);
  assert.deepEqual([f4.v.start, f4.v.arg, f4.v.epoch], [codec.StartKind.POSITION, 8, 100]);
  c.close();
});

test("an epoch change whose new first is beyond the old cursor: the lost gap starts at 1, with or without the server's GAP", async () => {
  const { net, c, ws } = await setup();
  const [sub, fr] = await subscribeOn(net, c, ws, "ch", {}, 1);
  data(net, ws, fr.v.subID, 1, "a");
  await take(sub, 1);
  net.drop(ws);
  const ws2 = await net.conn(1);
  const f2 = await net.frame(ws2, T.SUBSCRIBE);
  subscribed(net, ws2, f2, 50, { earliest: 50, next: 51, epoch: 1764633600000 });
  data(net, ws2, f2.v.subID, 50, "x");
  assert.deepEqual(await take(sub, 3), ["epoch 1764633600000 at 1", "gap 1-49 lost", "msg 50 x"]);
  c.close();
});

test("an epoch change that finds the iterator's queue full is not lost: the resume after the pause reports it", async () => {
  const { net, c, ws } = await setup();
  const [sub, fr] = await subscribeOn(net, c, ws, "ch", { buffer: 2 }, 1);
  data(net, ws, fr.v.subID, 1, "a", "b"); // the queue is full, nothing read yet
  net.drop(ws);
  const ws2 = await net.conn(1);
  const f2 = await net.frame(ws2, T.SUBSCRIBE);
  subscribed(net, ws2, f2, 1, { epoch: 99 });
  const un = await net.frame(ws2, T.UNSUBSCRIBE); // paused instead of queueing the epoch event
  assert.equal(un.v, f2.v.subID);
  net.push(ws2, codec.encodeUnsubscribed(un.id, un.v));
  assert.deepEqual(await take(sub, 2), ["msg 1 a", "msg 2 b"]);
  const again = await net.frame(ws2, T.SUBSCRIBE);
  assert.deepEqual([again.v.arg, again.v.epoch], [3, EPOCH], "the resume still names the old incarnation");
  subscribed(net, ws2, again, 1, { epoch: 99 });
  data(net, ws2, again.v.subID, 1, "new");
  assert.deepEqual(await take(sub, 2), ["epoch 99 at 1", "msg 1 new"]);
  c.close();
});

/** A frame with the given header fields and body, as bytes (for frames the encoders refuse to make). */
function rawFrame(type, id, ...parts) {
  const body = parts.flatMap((p) => Array.from(p));
  const f = new Uint8Array(10 + body.length);
  const v = new DataView(f.buffer);
  v.setUint32(0, body.length);
  v.setUint8(4, type);
  v.setUint32(6, id);
  f.set(body, 10);
  return f;
}
const u32 = (n) => { const b = new Uint8Array(4); new DataView(b.buffer).setUint32(0, n); return b; };
const u64 = (n) => { const b = new Uint8Array(8); new DataView(b.buffer).setBigUint64(0, BigInt(n)); return b; };

test("a position or epoch beyond 2^53-1 from the server is a protocol error that drops the connection, never a rounded number", async () => {
  const cases = [
    ["PUBACK", (id) => rawFrame(T.PUBACK, 0, [0, 1], u32(id), u64(2n ** 53n))],
    ["DATA", (id, subID) => rawFrame(T.DATA, subID, u64(2n ** 60n), u32(1), u32(1), [0x61])],
    ["GAP", (id, subID) => rawFrame(T.GAP, subID, u64(1), u64(2n ** 64n - 1n), [3])],
  ];
  for (const [name, make] of cases) {
    const states = [];
    const { net, c, ws } = await setup({ onState: (e) => states.push(e) });
    const [sub, fr] = await subscribeOn(net, c, ws, "ch", {}, 1);
    const p = c.publish("ch", "x");
    const f = await net.frame(ws, T.PUBLISH);
    net.push(ws, make(f.id, fr.v.subID));
    await assert.rejects(p, (e) => e instanceof UnknownOutcomeError && e.cause instanceof ProtocolError && /exceeds 2\^53-1/.test(e.cause.message), name);
    const ws2 = await net.conn(1); // reconnected, and the subscription resumes where it was
    const f2 = await net.frame(ws2, T.SUBSCRIBE);
    assert.deepEqual([f2.v.arg, f2.v.epoch], [1, EPOCH], name);
    assert.equal(states[1].state, "disconnected");
    assert.equal(sub.nextPosition, 1);
    c.close();
  }
  // An epoch beyond 2^53-1 in SUBSCRIBED: the subscribe is not confirmed on that connection.
  const { net, c, ws } = await setup();
  const p = c.subscribe("ch");
  const f = await net.frame(ws, T.SUBSCRIBE);
  net.push(ws, rawFrame(T.SUBSCRIBED, f.id, u32(f.v.subID), u64(1), u64(1), u64(1), u64(0x1122334455667788n)));
  const ws2 = await net.conn(1);
  const f2 = await net.frame(ws2, T.SUBSCRIBE);
  subscribed(net, ws2, f2, 1);
  const sub = await p;
  assert.equal(sub.info.epoch, EPOCH);
  c.close();
});

test("callbacks: onEvent gets every event in order and onEnd the reason", async () => {
  const { net, c, ws } = await setup();
  const got = [];
  let ended;
  const p = c.subscribe("ch", { onEvent: (ev) => got.push(summary(ev)), onEnd: (e) => (ended = e) });
  const f = await net.frame(ws, T.SUBSCRIBE);
  subscribed(net, ws, f, 3);
  const sub = await p;
  data(net, ws, f.v.subID, 3, "c", "d");
  net.push(ws, codec.encodeGap(f.v.subID, { from: 5, to: 5, reason: codec.GapReason.SLOW }));
  assert.deepEqual(got, ["msg 3 c", "msg 4 d", "gap 5-5 slow"]);
  const u = sub.unsubscribe();
  const uf = await net.frame(ws, T.UNSUBSCRIBE);
  net.push(ws, codec.encodeUnsubscribed(uf.id, uf.v));
  await u;
  assert.equal(ended.name, "UnsubscribedError");
  c.close();
});

test("a slow iterator pauses the subscription and resumes it from the server's history", async () => {
  const { net, c, ws } = await setup();
  const [sub, fr] = await subscribeOn(net, c, ws, "ch", { buffer: 2 }, 1);
  data(net, ws, fr.v.subID, 1, "a", "b", "c", "d");
  // 1 and 2 fill the queue; 3 overflows: the client unsubscribes instead of buffering.
  const un = await net.frame(ws, T.UNSUBSCRIBE);
  assert.equal(un.v, fr.v.subID);
  data(net, ws, fr.v.subID, 5, "e"); // in flight before UNSUBSCRIBED: dropped
  assert.deepEqual(await take(sub, 2), ["msg 1 a", "msg 2 b"]);
  const again = await net.frame(ws, T.SUBSCRIBE);
  assert.equal(again.v.start, codec.StartKind.POSITION);
  assert.equal(again.v.arg, 3);
  assert.notEqual(again.v.subID, fr.v.subID);
  subscribed(net, ws, again, 3);
  data(net, ws, again.v.subID, 3, "c", "d");
  assert.deepEqual(await take(sub, 2), ["msg 3 c", "msg 4 d"]);
  c.close();
});

test("UNSUBSCRIBED with id 0 ends the subscription as FORBIDDEN and it is not resumed", async () => {
  const { net, c, ws } = await setup();
  const [sub, fr] = await subscribeOn(net, c, ws, "ch", {}, 1);
  net.push(ws, codec.encodeUnsubscribed(0, fr.v.subID));
  await assert.rejects(sub.next(), (e) => e instanceof ServerError && e.codeName === "FORBIDDEN");
  net.drop(ws);
  const ws2 = await net.conn(1);
  const p = c.publish("other", "x"); // a frame we can wait for
  const f = await net.frame(ws2);
  assert.equal(f.type, T.PUBLISH, "no SUBSCRIBE before it");
  net.push(ws2, codec.encodePubAck([{ id: f.id, position: 1 }]));
  await p;
  c.close();
});

test("reconnecting rotates over the URL list", async () => {
  const { net, c, ws } = await setup({}, ["ws://a/", "ws://b/"]);
  assert.equal(ws.url, "ws://a/");
  net.drop(ws);
  const ws2 = await net.conn(1);
  assert.equal(ws2.url, "ws://b/");
  c.close();
});

test("two handshakes in a row refused as UNAUTHENTICATED end reconnecting", async () => {
  const states = [];
  const { net, c, ws } = await setup({ onState: (e) => states.push(e.state) });
  net.behaviour.set("ws://a/", { error: { code: codec.CODE_UNAUTHENTICATED, retriable: false, text: "revoked" } });
  const sub = c.subscribe("ch");
  const f = await net.frame(ws, T.SUBSCRIBE);
  subscribed(net, ws, f, 1);
  const s = await sub;
  net.drop(ws);
  await c.closed;
  assert.ok(c.error instanceof ClosedError);
  assert.match(c.error.message, /UNAUTHENTICATED/);
  assert.equal(net.sockets.length, 3, "the first connection and two refused handshakes");
  await assert.rejects(s.next(), ClosedError);
  await assert.rejects(c.publish("ch", "x"), ClosedError);
  assert.deepEqual(states, ["connected", "disconnected", "closed"]);
});

test("a malformed frame from the server drops the connection (and reconnects)", async () => {
  const { net, c, ws } = await setup();
  const p = c.publish("ch", "x");
  await net.frame(ws, T.PUBLISH);
  net.push(ws, codec.encodeData(1, 0, [te.encode("x")]).subarray(0, 15)); // shorter than declared
  await assert.rejects(p, (e) => e instanceof UnknownOutcomeError && e.cause instanceof ProtocolError);
  await net.conn(1);
  c.close();
});

test("a text message is a protocol violation", async () => {
  const states = [];
  const { c, ws } = await setup({ reconnect: false, onState: (e) => states.push(e) });
  ws.onmessage({ data: "hello" });
  await c.closed;
  assert.ok(c.error.cause instanceof ProtocolError, String(c.error.cause));
});

test("no PONG to two PINGs in a row drops the connection", async () => {
  const net = new FakeNet();
  net.welcome.pingIntervalMs = 10;
  const c = await connect("ws://a/", { WebSocket: net.WebSocket, reconnect: false });
  const ws = await net.conn(0);
  const ping = await net.frame(ws, T.PING);
  net.push(ws, codec.encodePong(ping.id)); // the first is answered
  await c.closed;
  assert.match(c.error.message, /ping timeout/);
  assert.ok(ws.inbox.filter((f) => f.type === T.PING).length >= 1);
});

test("the server's PING is answered with a PONG of the same id", async () => {
  const { net, c, ws } = await setup();
  net.push(ws, codec.encodePing(4242));
  const f = await net.frame(ws, T.PONG);
  assert.equal(f.id, 4242);
  c.close();
});

test("GOAWAY: new publishes wait for the next connection while the old one's acks still arrive", async () => {
  const { net, c, ws } = await setup();
  const p1 = c.publish("ch", "before");
  const f1 = await net.frame(ws, T.PUBLISH);
  net.push(ws, codec.encodeGoAway({ code: 15, text: "restart" }));
  const p2 = c.publish("ch", "after");
  net.push(ws, codec.encodePubAck([{ id: f1.id, position: 1 }]));
  assert.equal(await p1, 1);
  net.drop(ws);
  const ws2 = await net.conn(1);
  const f2 = await net.frame(ws2, T.PUBLISH);
  assert.equal(f2.v.text, "after");
  assert.equal(ws.inbox.filter((f) => f.type === T.PUBLISH).length, 0);
  net.push(ws2, codec.encodePubAck([{ id: f2.id, position: 2 }]));
  assert.equal(await p2, 2);
  c.close();
});

test("drain waits for outstanding acks, unsubscribes, then closes", async () => {
  const { net, c, ws } = await setup();
  const [sub] = await subscribeOn(net, c, ws, "ch", {}, 1);
  const p = c.publish("ch", "x");
  const f = await net.frame(ws, T.PUBLISH);
  const d = c.drain();
  await assert.rejects(c.publish("ch", "y"), /draining/);
  net.push(ws, codec.encodePubAck([{ id: f.id, position: 9 }]));
  const u = await net.frame(ws, T.UNSUBSCRIBE);
  net.push(ws, codec.encodeUnsubscribed(u.id, u.v));
  await d;
  assert.equal(await p, 9);
  assert.deepEqual(await sub.next(), { done: true, value: undefined });
  await assert.rejects(c.publish("ch", "z"), ClosedError);
});

test("backoff: full jitter within [1, min(max, min*2^n)] ms", async () => {
  // Measured through the delays the client asks setTimeout for.
  const net = new FakeNet();
  const delays = [];
  const orig = globalThis.setTimeout;
  const c = await connect("ws://a/", { WebSocket: net.WebSocket, backoffMinMs: 100, backoffMaxMs: 400, random: () => 0.999 });
  globalThis.setTimeout = (fn, ms, ...a) => {
    if (ms >= 1 && ms <= 400) delays.push(ms);
    return orig(fn, 0, ...a);
  };
  try {
    net.behaviour.set("ws://a/", "refuse");
    net.drop(await net.conn(0));
    await net.until(() => net.sockets.length >= 5 || undefined, "four reconnect attempts");
  } finally {
    globalThis.setTimeout = orig;
  }
  c.close();
  assert.deepEqual(delays.slice(0, 4), [100, 200, 400, 400]);
});

test("an onEvent callback that throws is reported and does not break the connection", async () => {
  const warned = [];
  const { net, c, ws } = await setup({ logger: { info() {}, warn: (...a) => warned.push(a) } });
  const got = [];
  const p = c.subscribe("ch", {
    onEvent: (ev) => {
      got.push(summary(ev));
      if (got.length === 1) throw new Error("app bug");
    },
  });
  const f = await net.frame(ws, T.SUBSCRIBE);
  subscribed(net, ws, f, 1);
  await p;
  data(net, ws, f.v.subID, 1, "a", "b");
  assert.deepEqual(got, ["msg 1 a", "msg 2 b"]);
  assert.equal(warned.length, 1);
  assert.match(String(warned[0][0]), /onEvent callback threw/);
  assert.ok(c.connected);
  c.close();
});

test("HELLO offers FeatureHeaders (with REFRESH and FILTERS); a publish with a message id and headers is an extended PUBLISH", async () => {
  const net = new FakeNet();
  net.welcome.features = codec.FEATURE_HEADERS;
  const c = await connect("ws://a/", { WebSocket: net.WebSocket });
  const ws = await net.conn(0);
  assert.equal(ws.hello.features & (codec.FEATURE_HEADERS | codec.FEATURE_REFRESH | codec.FEATURE_FILTERS), codec.FEATURE_HEADERS | codec.FEATURE_REFRESH | codec.FEATURE_FILTERS);
  const p = c.publish("ch", "{}", { msgId: "o-17", headers: [["ct", "json"], ["ct", "again"]] });
  const f = await net.frame(ws, T.PUBLISH);
  assert.equal(f.flags, codec.FLAG_ACK | codec.FLAG_EXT);
  assert.equal(td.decode(f.v.msgId), "o-17");
  assert.deepEqual(f.v.headers, [{ key: "ct", value: "json" }, { key: "ct", value: "again" }]);
  assert.equal(f.v.text, "{}");
  net.push(ws, codec.encodePubAck([{ id: f.id, position: 3 }]));
  assert.equal(await p, 3);
  await assert.rejects(c.publish("ch", "x", { headers: { "bad key": "v" } }), InvalidHeadersError);
  // A plain publish stays plain.
  const q = c.publish("ch", "plain", { headers: {} });
  const g = await net.frame(ws, T.PUBLISH);
  assert.equal(g.flags, codec.FLAG_ACK);
  net.push(ws, codec.encodePubAck([{ id: g.id, position: 4 }]));
  await q;
  c.close();
});

test("headers to a server without FeatureHeaders are refused before sending", async () => {
  const { net, c, ws } = await setup();
  await assert.rejects(c.publish("ch", "x", { msgId: "id-1" }), InvalidOptionError);
  const p = c.publish("ch", "y");
  const f = await net.frame(ws, T.PUBLISH);
  assert.equal(f.v.text, "y", "nothing was sent for the refused one");
  net.push(ws, codec.encodePubAck([{ id: f.id, position: 1 }]));
  await p;
  c.close();
});

test("extended DATA records become events with their message id and headers", async () => {
  const net = new FakeNet();
  net.welcome.features = codec.FEATURE_HEADERS;
  const c = await connect("ws://a/", { WebSocket: net.WebSocket });
  const ws = await net.conn(0);
  const [sub, fr] = await subscribeOn(net, c, ws, "ch", {}, 1);
  net.push(ws, codec.encodeData(fr.v.subID, 1, [te.encode("plain"), { payload: te.encode("rich"), msgId: te.encode("m1"), headers: [{ key: "traceparent", value: "00-1" }] }]));
  const a = (await sub.next()).value;
  const b2 = (await sub.next()).value;
  assert.deepEqual([td.decode(a.payload), a.msgId, a.headers], ["plain", null, []]);
  assert.deepEqual([td.decode(b2.payload), td.decode(b2.msgId), b2.headers], ["rich", "m1", [{ key: "traceparent", value: "00-1" }]]);
  c.close();
});

test("a frame right behind WELCOME in the same turn is handled (a PING gets its PONG)", async () => {
  const net = new FakeNet();
  net.behaviour.set("ws://a/", { afterWelcome: (n, ws) => n.push(ws, codec.encodePing(9)) });
  const c = await connect("ws://a/", { WebSocket: net.WebSocket });
  const ws = await net.conn(0);
  const f = await net.frame(ws, T.PONG);
  assert.equal(f.id, 9);
  c.close();
});

test("a connection lost right behind its WELCOME is not used: connect moves on to the next URL", async () => {
  const net = new FakeNet();
  net.behaviour.set("ws://a/", { afterWelcome: (n, ws) => n.drop(ws) });
  const states = [];
  const c = await connect(["ws://a/", "ws://b/"], { WebSocket: net.WebSocket, onState: (e) => states.push(`${e.state} ${e.url}`) });
  assert.equal(c.url, "ws://b/");
  assert.deepEqual(states, ["connected ws://b/"]);
  c.close();
});

test("a publish that has to wait keeps a copy of its payload", async () => {
  const { net, c, ws } = await setup({ maxPending: 1 });
  const p1 = c.publish("ch", "first");
  const buf = te.encode("original");
  const p2 = c.publish("ch", buf); // waits for the window
  buf.set(te.encode("MUTATED!"));
  const f1 = await net.frame(ws, T.PUBLISH);
  net.push(ws, codec.encodePubAck([{ id: f1.id, position: 1 }]));
  const f2 = await net.frame(ws, T.PUBLISH);
  assert.equal(f2.v.text, "original");
  net.push(ws, codec.encodePubAck([{ id: f2.id, position: 2 }]));
  assert.deepEqual(await Promise.all([p1, p2]), [1, 2]);
  c.close();
});

test("tokenProvider: its token goes in HELLO; AUTHED's lifetime schedules a REFRESH with the next token at 80-90% of it", async () => {
  let n = 0;
  const net = new FakeNet();
  net.welcome.features = codec.FEATURE_REFRESH;
  const c = await connect("ws://a/", { WebSocket: net.WebSocket, tokenProvider: async () => `tok-${++n}`, random: () => 0.5 });
  const ws = await net.conn(0);
  assert.equal(td.decode(ws.hello.token), "tok-1");
  const sent = Date.now();
  net.push(ws, features.encodeAuthed(ws.hello.id ?? 1, { expiresInMs: 200, graceMs: 1000, clientId: "alice" }));
  const r = await net.frame(ws, T.REFRESH);
  assert.equal(r.v.token, "tok-2");
  assert.ok(Date.now() - sent >= 160, `REFRESH after ${Date.now() - sent} ms, want at least 160`);
  assert.equal(c.clientId, "alice");
  net.push(ws, features.encodeAuthed(r.id, { expiresInMs: 0, graceMs: 1000, clientId: "alice" }));
  await net.until(() => c.tokenRefreshes === 1 || undefined, "the refresh counted");
  c.close();
});

test("filter: SUBSCRIBE carries FILTER; FDATA messages come at their positions; a GAP after a hole is no lost range", async () => {
  const net = new FakeNet();
  net.welcome.features = codec.FEATURE_FILTERS;
  const c = await connect("ws://a/", { WebSocket: net.WebSocket });
  const ws = await net.conn(0);
  const got = [];
  const p = c.subscribe("ch", { filter: "payload.x > 1", onEvent: (ev) => got.push(ev) });
  const fr = await net.frame(ws, T.SUBSCRIBE);
  assert.equal(fr.flags, codec.FLAG_FILTER);
  assert.equal(fr.v.filter, "payload.x > 1");
  subscribed(net, ws, fr, 10);
  await p;
  net.push(ws, features.encodeFData(fr.v.subID, [{ position: 12, body: te.encode("a"), ext: false }, { position: 15, body: te.encode("b"), ext: false }]));
  net.push(ws, codec.encodeGap(fr.v.subID, { from: 20, to: 22, reason: codec.GapReason.EXPIRED }));
  net.push(ws, features.encodeFData(fr.v.subID, [{ position: 30, body: te.encode("c"), ext: false }]));
  await net.until(() => got.length === 4 || undefined, "four events");
  assert.deepEqual(
    got.map((e) => (e.kind === "message" ? [e.position, td.decode(e.payload)] : [e.kind, e.from, e.to, e.reason])),
    [[12, "a"], [15, "b"], ["gap", 20, 22, "expired"], [30, "c"]],
  );
  c.close();
});

const FILTER = "payload.price > 100";

/** Is e the end of a filtered subscription on the fake server without filters? */
function filtersUnsupported(e) {
  return e instanceof FiltersUnsupportedError && e.serverName === "fake" && e.channel === "f" && e.filter === FILTER;
}

test("filter: a server without filters refuses a filtered subscribe at once; nothing is sent", async () => {
  const { net, c, ws } = await setup();
  await assert.rejects(c.subscribe("f", { filter: FILTER }), filtersUnsupported);
  net.push(ws, codec.encodePing(5));
  const f = await net.frame(ws);
  assert.equal(f.type, T.PONG, "the first frame after the refusal is the PONG");
  c.close();
});

test("filter: a reconnect to a server without filters ends the filtered subscription with FiltersUnsupportedError, never resumed unfiltered; the unfiltered one resumes", async () => {
  const net = new FakeNet();
  net.welcome.features = codec.FEATURE_FILTERS;
  const c = await connect("ws://a/", { WebSocket: net.WebSocket, backoffMinMs: 1, backoffMaxMs: 5 });
  const ws = await net.conn(0);
  let ended;
  const pf = c.subscribe("f", { filter: FILTER, onEnd: (e) => (ended = e) });
  const ff = await net.frame(ws, T.SUBSCRIBE);
  assert.equal(ff.v.filter, FILTER);
  subscribed(net, ws, ff, 1);
  const filtered = await pf;
  const [plain, fp] = await subscribeOn(net, c, ws, "ch", {}, 1);
  data(net, ws, fp.v.subID, 1, "m1");
  assert.deepEqual(await take(plain, 1), ["msg 1 m1"]);

  net.welcome.features = 0; // the next server does not offer filters
  net.drop(ws);
  const ws2 = await net.conn(1);
  const f2 = await net.frame(ws2, T.SUBSCRIBE);
  assert.equal(f2.flags & codec.FLAG_FILTER, 0);
  assert.equal(f2.v.channel, "ch");
  assert.equal(f2.v.arg, 2);
  assert.deepEqual(ws2.inbox.filter((f) => f.type === T.SUBSCRIBE), [], "no SUBSCRIBE for the filtered subscription");
  subscribed(net, ws2, f2, 2);
  data(net, ws2, f2.v.subID, 2, "m2");
  assert.deepEqual(await take(plain, 1), ["msg 2 m2"]);
  assert.ok(filtersUnsupported(ended), `onEnd got ${ended}`);
  assert.ok(filtersUnsupported(filtered.error));
  await assert.rejects(filtered.next(), filtersUnsupported);
  assert.equal(plain.error, null);

  // Ended for good: a server with filters again does not bring it back.
  net.welcome.features = codec.FEATURE_FILTERS;
  net.drop(ws2);
  const ws3 = await net.conn(2);
  const f3 = await net.frame(ws3, T.SUBSCRIBE);
  assert.equal(f3.v.channel, "ch");
  assert.deepEqual(ws3.inbox.filter((f) => f.type === T.SUBSCRIBE), []);
  c.close();
});

test("filter: a filtered subscribe waiting across a reconnect to a server without filters rejects with FiltersUnsupportedError", async () => {
  const net = new FakeNet();
  net.welcome.features = codec.FEATURE_FILTERS;
  const c = await connect("ws://a/", { WebSocket: net.WebSocket, backoffMinMs: 1, backoffMaxMs: 5 });
  const ws = await net.conn(0);
  const p = c.subscribe("f", { filter: FILTER });
  await net.frame(ws, T.SUBSCRIBE);
  net.welcome.features = 0;
  net.drop(ws); // before SUBSCRIBED
  await assert.rejects(p, filtersUnsupported);
  const ws2 = await net.conn(1);
  assert.deepEqual(ws2.inbox.filter((f) => f.type === T.SUBSCRIBE), []);
  c.close();
});

test("filter: a reconnect to a server with filters resumes the filtered subscription with its filter after the last delivered position", async () => {
  const net = new FakeNet();
  net.welcome.features = codec.FEATURE_FILTERS;
  const c = await connect("ws://a/", { WebSocket: net.WebSocket, backoffMinMs: 1, backoffMaxMs: 5 });
  const ws = await net.conn(0);
  const p = c.subscribe("f", { filter: FILTER });
  const fr = await net.frame(ws, T.SUBSCRIBE);
  subscribed(net, ws, fr, 1);
  const sub = await p;
  net.push(ws, features.encodeFData(fr.v.subID, [{ position: 4, body: te.encode("f4"), ext: false }]));
  assert.deepEqual(await take(sub, 1), ["msg 4 f4"]);
  net.drop(ws);
  const ws2 = await net.conn(1);
  const f2 = await net.frame(ws2, T.SUBSCRIBE);
  assert.equal(f2.flags & codec.FLAG_FILTER, codec.FLAG_FILTER);
  assert.equal(f2.v.filter, FILTER);
  assert.equal(f2.v.start, codec.StartKind.POSITION);
  assert.equal(f2.v.arg, 5);
  c.close();
});
