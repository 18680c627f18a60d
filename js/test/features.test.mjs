// JWT refresh and server-side filters through the SDK in Node.js, against
// a real `sluice serve`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, ServerError } from "../dist/index.js";
import { startServer, goPublish } from "./server.mjs";
import { jwtConfig, mintHS256 } from "./jwtutil.mjs";

const td = new TextDecoder();
const PUB = "js-publisher-token-0123456789";

test("JWT: a token provider refreshes the 2-second token on the open connection; the subscription keeps receiving, no reconnect", async () => {
  const srv = await startServer({ config: jwtConfig(PUB) });
  try {
    let calls = 0;
    const states = [];
    const c = await connect(srv.wsURL, {
      tokenProvider: async () => {
        calls++;
        const now = Math.floor(Date.now() / 1000);
        return mintHS256({ sub: "alice", exp: now + 2, info: { n: calls }, caps: { subscribe: ["jwt.>"] } });
      },
      onState: (e) => states.push(e.state),
    });
    const sub = await c.subscribe("jwt.live");
    assert.equal(c.clientId, "alice");
    while (c.tokenRefreshes < 2) await new Promise((r) => setTimeout(r, 100)); // about 3.4 s
    const [p] = await goPublish(srv, "jwt.live", ["after two refreshes"], PUB);
    const r = await sub.next();
    assert.equal(r.value.position, p);
    assert.equal(td.decode(r.value.payload), "after two refreshes");
    assert.deepEqual(states, ["connected"]);
    assert.equal(calls, c.tokenRefreshes + 1);
    c.close();
  } finally {
    await srv.stop();
  }
});

test("JWT: a fixed token that expires: TOKEN_EXPIRED after the grace, then the expired token is refused and the client closes", async () => {
  const srv = await startServer({ config: jwtConfig(PUB, "500ms") });
  try {
    const errors = [];
    const token = mintHS256({ sub: "bob", exp: Math.floor(Date.now() / 1000) + 1, caps: { subscribe: ["jwt.>"] } });
    const c = await connect(srv.wsURL, {
      token,
      backoffMinMs: 10,
      backoffMaxMs: 50,
      onState: (e) => e.error && errors.push(e.error),
    });
    await c.subscribe("jwt.fixed");
    await c.closed;
    assert.ok(errors.some((e) => /TOKEN_EXPIRED/.test(e.message)), errors.map(String).join("; "));
    const last = errors.at(-1);
    assert.ok(/UNAUTHENTICATED: token expired/.test(last.message), String(last));
  } finally {
    await srv.stop();
  }
});

test("filters: only matching messages at their channel positions, and INVALID_FILTER for a bad expression", async () => {
  const srv = await startServer();
  try {
    const c = await connect(srv.wsURL);
    const sub = await c.subscribe("it.filter", { start: "earliest", filter: 'headers.type == "t" && payload.n > 1' });
    const ps = [];
    for (let n = 0; n < 9; n++) {
      ps.push(await c.publish("it.filter", JSON.stringify({ n }), { headers: { type: n % 3 === 0 ? "t" : "q" } }));
    }
    for (const n of [3, 6]) {
      const r = await sub.next();
      assert.equal(r.value.position, ps[n]);
      assert.equal(td.decode(r.value.payload), JSON.stringify({ n }));
      assert.deepEqual(r.value.headers, [{ key: "type", value: "t" }]);
    }
    await assert.rejects(c.subscribe("it.filter", { filter: "payload.n >" }), (e) => e instanceof ServerError && e.codeName === "INVALID_FILTER");
    c.close();
  } finally {
    await srv.stop();
  }
});
