// Presence in headless Chromium: the web console's presence panel, and the
// SDK in a page, against a real `sluice serve` whose clients authenticate
// with JWTs (HS256, signed here with node:crypto, an implementation
// independent of the server's) naming their client id and client info.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { startServer } from "./server.mjs";
import { launchBrowser } from "./browser.mjs";
import { connect } from "../dist/index.js";

const WAIT = { timeout: 20000 };
const SECRET = "presence-browser-test-secret-0123456789";

const b64url = (s) => Buffer.from(s).toString("base64url");

/** An HS256 JWT for sub with info, valid for an hour, with every capability on chat channels. */
function jwt(sub, info) {
  const header = b64url(JSON.stringify({ alg: "HS256", typ: "JWT", kid: "k1" }));
  const now = Math.floor(Date.now() / 1000);
  const claims = { sub, exp: now + 3600, info, caps: { publish: ["chat.>"], subscribe: ["chat.>"], presence: ["chat.>"] } };
  const body = `${header}.${b64url(JSON.stringify(claims))}`;
  return `${body}.${createHmac("sha256", SECRET).update(body).digest("base64url")}`;
}

// Anonymous clients (the console) may read everything; JWTs carry their caps.
const CONFIG = `
[auth]
anonymous = "viewer"
[[auth.roles]]
name = "viewer"
subscribe = [">"]
[auth.jwt]
[[auth.jwt.keys]]
kid = "k1"
alg = "HS256"
secret = "${SECRET}"
`;

test("console: a channel's occupancy and members with their client ids and info, live as they join and leave", async () => {
  const srv = await startServer({ config: CONFIG, args: ["--presence-occupancy-interval", "100ms"] });
  const b = await launchBrowser();
  const clients = [];
  try {
    const { page } = b;
    await page.goto(`${srv.httpURL}/console/?presence=chat.room`);
    await page.waitForFunction(() => document.querySelector("#presence-status").textContent === "watching chat.room", null, WAIT);
    const alice = await connect(srv.wsURL, { token: jwt("alice", { name: "Alice" }) });
    clients.push(alice);
    await alice.subscribe("chat.room", { presence: true });
    await page.waitForSelector("#presence-list tbody tr[data-member]", WAIT);
    const rows = () => page.$$eval("#presence-list tbody tr[data-member]", (trs) => trs.map((tr) => [...tr.cells].map((td) => td.textContent)));
    let r = await rows();
    assert.equal(r.length, 1);
    assert.equal(r[0][0], "alice");
    assert.equal(r[0][3], '{"name":"Alice"}');
    const bob = await connect(srv.wsURL, { token: jwt("bob", { name: "Bob" }) });
    clients.push(bob);
    await bob.subscribe("chat.room", { presence: true });
    await page.waitForFunction(() => document.querySelectorAll("#presence-list tbody tr[data-member]").length === 2, null, WAIT);
    await page.waitForFunction(() => document.querySelector("#presence-members").textContent === "2", null, WAIT);
    assert.equal(await page.textContent("#presence-subscribers"), "3"); // the console's own subscription counts
    alice.close();
    await page.waitForFunction(() => document.querySelectorAll("#presence-list tbody tr[data-member]").length === 1, null, WAIT);
    r = await rows();
    assert.equal(r[0][0], "bob");
    const log = await page.$$eval("#presence-log li", (lis) => lis.map((li) => [li.className, li.textContent]));
    assert.equal(log[0][0], "leave");
    assert.match(log[0][1], /left: alice on /);
    assert.ok(log.some(([k, t]) => k === "join" && /joined: bob on /.test(t)));
    await page.waitForFunction(() => document.querySelector("#presence-members").textContent === "1", null, WAIT);
  } finally {
    for (const c of clients) c.close();
    await b.close();
    await srv.stop();
  }
});

test("SDK in the page: a member with presence events and occupancy sees a Node.js client join and leave, and queries the channel", async () => {
  const srv = await startServer({ config: CONFIG });
  const b = await launchBrowser();
  let other;
  try {
    const { page } = b;
    await page.goto(`${srv.httpURL}/console/config.json`);
    await page.evaluate(
      async ({ wsURL, token }) => {
        const sluice = await import("/console/sluice.js");
        const w = window;
        w.events = [];
        w.client = await sluice.connect(wsURL, { token });
        w.sub = await w.client.subscribe("chat.lobby", {
          presence: true,
          presenceEvents: true,
          occupancy: true,
          onEvent: (ev) => {
            if (ev.kind === "join" || ev.kind === "leave") w.events.push(`${ev.kind} ${ev.member.clientId}`);
            else if (ev.kind === "occupancy") w.events.push(`occupancy ${ev.occupancy.subscribers}/${ev.occupancy.members}`);
          },
        });
      },
      { wsURL: srv.wsURL, token: jwt("page", { tab: 1 }) },
    );
    await page.waitForFunction(() => window.events.includes("occupancy 1/1"), null, WAIT);
    other = await connect(srv.wsURL, { token: jwt("carol", { name: "Carol" }) });
    await other.subscribe("chat.lobby", { presence: true });
    await page.waitForFunction(() => window.events.includes("join carol"), null, WAIT);
    await page.waitForFunction(() => window.sub.members().complete && window.sub.members().members.length === 2, null, WAIT);
    const st = await page.evaluate(async () => {
      const s = await window.client.presence("chat.lobby");
      return { occ: s.occupancy, ids: s.members.map((m) => m.clientId), info: new TextDecoder().decode(s.members[0].info) };
    });
    assert.deepEqual(st.occ, { subscribers: 2, publishers: 0, members: 2 });
    assert.deepEqual(st.ids, ["carol", "page"]);
    assert.equal(st.info, '{"name":"Carol"}');
    other.close();
    await page.waitForFunction(() => window.events.includes("leave carol"), null, WAIT);
    await page.waitForFunction(() => window.sub.members().members.map((m) => m.clientId).join() === "page", null, WAIT);
    await page.evaluate(() => window.client.close());
  } finally {
    other?.close();
    await b.close();
    await srv.stop();
  }
});
