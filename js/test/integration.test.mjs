// The SDK in Node.js (over the `ws` package) against a real `sluice serve`
// with its WebSocket gateway, on free loopback ports.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { connect, codec, ServerError, UnknownOutcomeError } from "../dist/index.js";
import { startServer, goPublish, waitEarliest, cuttableProxy, holdOff } from "./server.mjs";

const td = new TextDecoder();
let srv;

before(async () => {
  srv = await startServer();
});
after(async () => {
  await srv?.stop();
});

/** Collects n events from sub (async iteration), as summaries. */
async function take(sub, n) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const r = await sub.next();
    assert.equal(r.done, false, "subscription ended early");
    const ev = r.value;
    out.push(ev.kind === "message" ? [ev.position, td.decode(ev.payload)] : ev);
  }
  return out;
}

test("acknowledged publishes get consecutive positions from 1, as numbers; a subscriber from earliest sees them in order", async () => {
  const c = await connect(srv.wsURL);
  const positions = await Promise.all(Array.from({ length: 200 }, (_, i) => c.publish("it.order", `m${i}`)));
  assert.deepEqual(positions, Array.from({ length: 200 }, (_, i) => i + 1), "a new channel numbers from 1");
  const sub = await c.subscribe("it.order", { start: "earliest" });
  const got = await take(sub, 200);
  assert.deepEqual(
    got,
    positions.map((p, i) => [p, `m${i}`]),
  );
  await sub.unsubscribe();
  await c.drain();
});

test("messages published by the Go SDK over TCP reach a WebSocket subscriber with the positions Go was given", async () => {
  const c = await connect(srv.wsURL);
  const sub = await c.subscribe("it.cross", { start: "live" });
  const positions = await goPublish(srv, "it.cross", ["from-go-1", "from-go-2", "from-go-3"]);
  assert.equal(positions.length, 3);
  assert.deepEqual(await take(sub, 3), positions.map((p, i) => [p, `from-go-${i + 1}`]));
  c.close();
});

test("message ids and headers: from the JS SDK and from the Go SDK, and a repeated id is stored once", async (t) => {
  const c = await connect(srv.wsURL);
  if ((c.welcome.features & codec.FEATURE_HEADERS) === 0) {
    c.close();
    t.skip("this server does not accept FeatureHeaders (PROTOCOL.md 2.14) yet");
    return;
  }
  const sub = await c.subscribe("it.headers");
  const p1 = await c.publish("it.headers", "order 1", { msgId: "ord-1", headers: { "content-type": "text/plain", traceparent: "00-abc-01" } });
  // A retry with the same id (after an unknown outcome, say) acknowledges the first position.
  assert.equal(await c.publish("it.headers", "order 1", { msgId: "ord-1" }), p1);
  const [p2] = await goPublish(srv, "it.headers", ["from go"], undefined, ["--header", "k=v", "--msg-id", "go-1"]);
  const p3 = await c.publish("it.headers", "plain");
  const evs = [];
  for (let i = 0; i < 3; i++) evs.push((await sub.next()).value);
  const view = (e) => [e.position, td.decode(e.payload), e.msgId && td.decode(e.msgId), e.headers.map((h) => `${h.key}=${h.value}`)];
  assert.deepEqual(evs.map(view), [
    [p1, "order 1", "ord-1", ["content-type=text/plain", "traceparent=00-abc-01"]],
    [p2, "from go", "go-1", ["k=v"]],
    [p3, "plain", null, []],
  ]);
  c.close();
});

test("subscribe from a position, last N and since T", async () => {
  const c = await connect(srv.wsURL);
  const ps = [];
  for (let i = 0; i < 10; i++) ps.push(await c.publish("it.starts", `s${i}`));
  const fromPos = await c.subscribe("it.starts", { start: { position: ps[7] } });
  assert.deepEqual(await take(fromPos, 3), [[ps[7], "s7"], [ps[8], "s8"], [ps[9], "s9"]]);
  const last = await c.subscribe("it.starts", { start: { last: 2 } });
  assert.deepEqual(await take(last, 2), [[ps[8], "s8"], [ps[9], "s9"]]);
  const since = await c.subscribe("it.starts", { start: { sinceMs: 60000 } });
  assert.deepEqual((await take(since, 10)).map(([p]) => p), ps);
  assert.equal(since.info.first, ps[0]);
  c.close();
});

test("a slow iterator with a small buffer pauses, resumes from the server's history, and misses nothing", async () => {
  const c = await connect(srv.wsURL);
  const ps = await Promise.all(Array.from({ length: 500 }, (_, i) => c.publish("it.slow", `s${i}`)));
  // Count the SUBSCRIBEs the client sends (an internal method, observed only here).
  let subscribes = 0;
  const send = c.sendSubscribe.bind(c);
  c.sendSubscribe = (...a) => {
    subscribes++;
    return send(...a);
  };
  const sub = await c.subscribe("it.slow", { start: { position: ps[0] }, buffer: 16 });
  const got = [];
  while (got.length < ps.length) {
    const ev = (await sub.next()).value;
    assert.equal(ev.kind, "message", JSON.stringify(ev));
    got.push(ev.position);
    if (got.length % 50 === 0) await new Promise((r) => setTimeout(r, 5)); // a reader that lags
  }
  assert.deepEqual(got, ps);
  assert.ok(subscribes > 1, `the subscription paused and resumed (${subscribes} SUBSCRIBEs)`);
  c.close();
});

test("publishNoAck messages are delivered (fire and forget)", async () => {
  const c = await connect(srv.wsURL);
  const sub = await c.subscribe("it.noack");
  for (let i = 0; i < 5; i++) await c.publishNoAck("it.noack", `n${i}`);
  const got = await take(sub, 5);
  assert.deepEqual(got.map(([, t]) => t), ["n0", "n1", "n2", "n3", "n4"]);
  for (let i = 1; i < 5; i++) assert.equal(got[i][0], got[i - 1][0] + 1);
  c.close();
});

test("a payload over the server's maxPayload is refused before it is sent; the connection carries on", async () => {
  const c = await connect(srv.wsURL);
  const big = new Uint8Array(c.welcome.maxPayload + 1);
  await assert.rejects(c.publish("it.big", big), /payload of/);
  assert.ok(c.connected);
  assert.equal(await c.publish("it.big", "small"), 1);
  c.close();
});

test("a server killed and restarted: in-flight acks are unknown outcomes, the subscription resumes and reports the epoch change", async () => {
  const own = await startServer();
  try {
    const c = await connect(own.wsURL, { backoffMinMs: 20, backoffMaxMs: 200 });
    const sub = await c.subscribe("it.restart", { start: "earliest" });
    const p1 = await c.publish("it.restart", "before");
    assert.deepEqual(await take(sub, 1), [[p1, "before"]]);
    const epoch = sub.info.epoch;
    const settled = Promise.allSettled(Array.from({ length: 50 }, () => c.publish("it.restart", "racing")));
    await own.kill();
    // Every one of them either was acknowledged before the kill or is an unknown outcome.
    const outcomes = await settled;
    for (const o of outcomes) {
      if (o.status === "rejected") assert.ok(o.reason instanceof UnknownOutcomeError, String(o.reason));
    }
    const acked = outcomes.filter((o) => o.status === "fulfilled").length;
    const again = await startServer({ ...own.ports });
    try {
      // Drain what was delivered before the kill, then expect the epoch change.
      let ev;
      const seen = [];
      for (;;) {
        ev = (await sub.next()).value;
        if (ev.kind === "epoch") break;
        seen.push(ev);
      }
      assert.ok(seen.length >= acked, `every acknowledged message (${acked}) was delivered before the cut (${seen.length})`);
      assert.notEqual(ev.epoch, epoch);
      assert.equal(ev.position, 1, "the new incarnation is delivered from its position 1");
      assert.equal(sub.info.epoch, ev.epoch);
      // The restarted node's channel is a new incarnation: numbered from 1, delivered whole.
      const p2 = await c.publish("it.restart", "after");
      assert.equal(p2, 1);
      assert.deepEqual(await take(sub, 1), [[1, "after"]]);
      c.close();
    } finally {
      await again.stop();
    }
  } finally {
    await own.kill();
  }
});

test("a node restarted while a subscriber is away, and the new incarnation's first messages expired: the resume gets the epoch change, exactly positions 1..3 lost, then position 4", async () => {
  const args = ["--limit-msgs", "3", "--limit-life", "1m", "--ttl", "100ms"];
  let own = await startServer({ args });
  const proxy = await cuttableProxy(own.ports.ws);
  let proxy2 = null;
  try {
    const c = await connect(`ws://127.0.0.1:${proxy.port}/`, { backoffMinMs: 20, backoffMaxMs: 100 });
    const sub = await c.subscribe("it.incarnation", { start: "earliest" });
    assert.deepEqual(await goPublish(own, "it.incarnation", ["m1", "m2"]), [1, 2]);
    assert.deepEqual(await take(sub, 2), [[1, "m1"], [2, "m2"]]);
    const oldEpoch = sub.info.epoch;
    await holdOff(proxy);
    await own.kill();
    own = await startServer({ args });
    // A reader on the new node keeps the channel (an idle one would be dropped).
    const watch = await connect(own.wsURL);
    await watch.subscribe("it.incarnation");
    assert.deepEqual(await goPublish(own, "it.incarnation", ["n1", "n2", "n3", "n4"]), [1, 2, 3, 4]);
    const info = await waitEarliest(watch, "it.incarnation", 4);
    proxy2 = await cuttableProxy(own.ports.ws, proxy.port);
    const evs = await take(sub, 3);
    assert.deepEqual(evs, [
      { kind: "epoch", channel: "it.incarnation", epoch: info.epoch, position: 1 },
      { kind: "gap", channel: "it.incarnation", from: 1, to: 3, reason: "lost" },
      [4, "n4"],
    ]);
    assert.ok(info.epoch > oldEpoch, `the new epoch ${info.epoch} is above the old ${oldEpoch}`);
    assert.deepEqual(sub.info, { first: 4, earliest: 4, next: 5, epoch: info.epoch });
    watch.close();
    c.close();
  } finally {
    proxy2?.cut();
    await proxy2?.close();
    await own.kill();
  }
});

test("auth: a wrong or missing token is refused with UNAUTHENTICATED; a publish the role forbids is FORBIDDEN; the right token publishes and subscribes", async () => {
  const token = "js-test-token-" + Math.random().toString(36).slice(2);
  const hash = createHash("sha256").update(token).digest("hex");
  const readerToken = token + "-reader";
  const readerHash = createHash("sha256").update(readerToken).digest("hex");
  const config = `
[auth]
anonymous = ""
[[auth.roles]]
name = "all"
publish = [">"]
subscribe = [">"]
[[auth.roles]]
name = "reader"
subscribe = [">"]
[[auth.tokens]]
name = "js"
hash = "sha256:${hash}"
role = "all"
[[auth.tokens]]
name = "reader"
hash = "sha256:${readerHash}"
role = "reader"
`;
  const own = await startServer({ config });
  try {
    await assert.rejects(connect(own.wsURL, { token: "wrong", reconnect: false }), (e) => e instanceof ServerError && e.codeName === "UNAUTHENTICATED");
    await assert.rejects(connect(own.wsURL, { reconnect: false }), (e) => e instanceof ServerError && e.codeName === "UNAUTHENTICATED");
    const c = await connect(own.wsURL, { token });
    const sub = await c.subscribe("it.auth");
    const p = await c.publish("it.auth", "ok");
    assert.deepEqual(await take(sub, 1), [[p, "ok"]]);
    // A role that may not publish: the server refuses with FORBIDDEN, and the connection carries on.
    const r = await connect(own.wsURL, { token: readerToken });
    await assert.rejects(r.publish("it.auth", "nope"), (e) => e instanceof ServerError && e.codeName === "FORBIDDEN" && e.op === "publish");
    assert.ok(r.connected);
    const rs = await r.subscribe("it.auth", { start: { position: p } });
    assert.deepEqual(await take(rs, 1), [[p, "ok"]]);
    r.close();
    c.close();
  } finally {
    await own.stop();
  }
});
